/* Values of field paths (GP_CAPF_PATH) and of Go's composite kinds (GP_CAP_IFACE, SLICE,
 * STRS, IFACES), written into the scratch buffer of gprobe.bpf.c. The records are
 * specified in agent/src/abi/mod.rs (GpCapture); this file only carries them out.
 *
 * The noinline functions are global: loaded with the program's BTF (both aya and the
 * uprobe_multi loader pass it), the verifier checks each once, on its own. Without BTF
 * they would be checked at each call (some 2 s of verification), and record offsets that
 * pass through s->cursor (memory whose contents the verifier does not track) keep the
 * outcomes of one element or capture from multiplying those of the next. */
#ifndef GPROBE_CAPTURES_H
#define GPROBE_CAPTURES_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"
#include "gomap.h"

/* The scratch buffer at `o`, masked below GP_SCRATCH; struct scratch's slack holds what a
 * write of one string may run past it (the planner keeps real records inside). */
static __always_inline __u8 *at(struct scratch *s, __u32 o)
{
	return s->buf + (o & (GP_SCRATCH - 1));
}

/* `v` stored in and read back from map memory: the same number, but one whose value the
 * verifier no longer knows (volatile: the compiler must not forward the store). */
static __always_inline __u32 untracked(struct scratch *s, __u32 v)
{
	*(volatile __u64 *)&s->cursor = v;
	return (__u32) * (volatile __u64 *)&s->cursor;
}

static __always_inline __u32 pad8(__u32 n)
{
	return (n + 7) & ~7U;
}

static __always_inline __u32 clamp32(__u64 n)
{
	return n > 0xffffffffULL ? 0xffffffffU : (__u32)n;
}

/* min(n, GP_MAX_STR), bounded on the register returned (GP_AT_MOST). */
static __always_inline __u64 cap_str_len(__u64 n)
{
	GP_AT_MOST(n, GP_MAX_STR);
	return n;
}

/* min(len, max) bytes at ptr into the buffer at `o`: the bytes kept; TRUNCATED when len >
 * max, FAULT (and 0 kept) when unreadable. `len` is a Go length (an int): a negative one
 * (torn or foreign memory) reads nothing and is INVALID, never max bytes. */
static __always_inline __u32 read_bytes(struct scratch *s, __u32 o, __u64 ptr, __u64 len,
					__u32 max, __u8 *flags)
{
	if ((__s64)len < 0) {
		*flags |= GP_VAL_INVALID;
		return 0;
	}
	__u64 n = cap_str_len(len > max ? max : len);
	if (len > n)
		*flags |= GP_VAL_TRUNCATED;
	if (n && bpf_probe_read_user(at(s, o), n, (void *)ptr)) {
		*flags |= GP_VAL_FAULT;
		return 0;
	}
	return (__u32)n;
}

/* The capture's words: w[0] (and w[1] for two-word kinds) from loc[0]/loc[1], or read at
 * the end of its path. Returns 0, or the flags of a value without words: FAULT, or NIL |
 * FAULT with *left = the hops not taken when the nil pointer was met (0: the last one). */
static __always_inline __u8 cap_words(const __u64 *regs, const struct gp_capture *c, __u64 *w,
				      __u32 *left)
{
	__u8 word = c->kind == GP_CAP_WORD;
	w[0] = 0;
	w[1] = 0;
	if (!(c->flags & GP_CAPF_PATH)) {
		int e = read_word(regs, &c->loc[0], word ? c->size : 8, &w[0]);
		if (!word)
			e |= read_word(regs, &c->loc[1], 8, &w[1]);
		return e ? GP_VAL_FAULT : 0;
	}
	__u64 v = 0;
	if (read_word(regs, &c->loc[0], 8, &v))
		return GP_VAL_FAULT;
	__u32 n = c->n_hops;
	if (n > GP_MAX_HOPS)
		n = GP_MAX_HOPS;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < GP_MAX_HOPS; i++) {
		if (i >= n)
			break;
		if (!v) {
			*left = n - i;
			return GP_VAL_NIL | GP_VAL_FAULT;
		}
		if (bpf_probe_read_user(&v, 8, (void *)(v + (long)c->hops[i & (GP_MAX_HOPS - 1)])))
			return GP_VAL_FAULT;
	}
	if (!v) {
		*left = 0;
		return GP_VAL_NIL | GP_VAL_FAULT;
	}
	void *a = (void *)(v + (long)c->off);
	if (word)
		return bpf_probe_read_user(w, mem_size(c->size), a) ? GP_VAL_FAULT : 0;
	return bpf_probe_read_user(w, 16, a) ? GP_VAL_FAULT : 0;
}

/* A slice's length (Go's int): a negative one (torn or foreign memory) is INVALID, and no
 * element is read. */
static __always_inline __u64 elem_count(__u64 l, __u8 *flags)
{
	if ((__s64)l < 0) {
		*flags |= GP_VAL_INVALID;
		return 0;
	}
	return l;
}

/* One string of a []string at `p`: u32 full length, u16 bytes kept, u8 flags, u8 0, the
 * bytes padded to 8. Returns the bytes written. */
GP_SUBPROG int gp_str_elem(GP_S_PARAMS, __u32 p, __u64 src, __u32 max)
{
	GP_S_LOAD
	__u64 h[2];
	__u8 ef = 0;
	__u32 k = 0, full = 0;
	if (bpf_probe_read_user(h, sizeof(h), (void *)src)) {
		ef = GP_VAL_FAULT;
	} else {
		full = (__s64)h[1] < 0 ? 0 : clamp32(h[1]);
		k = read_bytes(s, p + 8, h[0], h[1], max, &ef);
	}
	*(__u32 *)at(s, p) = full;
	*(__u16 *)at(s, p + 4) = k;
	*at(s, p + 6) = ef;
	*at(s, p + 7) = 0;
	return 8 + pad8(k);
}

/* One interface of a []any / []error at `p`: u64 type, u64 data, u64 w0, u64 w1, u16 bytes
 * kept, u8 flags, 5 bytes 0, then (DATA_STR) the bytes at w0, padded. */
GP_SUBPROG int gp_iface_elem(GP_SC_PARAMS, __u32 p, __u64 src)
{
	GP_SC_LOAD
	__u64 e[2];
	__u64 ty = 0, w0 = 0, w1 = 0;
	__u8 ef = 0;
	__u32 k = 0;
	if (bpf_probe_read_user(e, sizeof(e), (void *)src)) {
		ef = GP_VAL_FAULT;
		e[1] = 0;
	} else if (e[0]) {
		ty = e[0];
		if ((c->flags & GP_CAPF_ITAB) && bpf_probe_read_user(&ty, 8, (void *)(e[0] + 8))) {
			ty = 0;
			ef = GP_VAL_FAULT;
		}
		if (e[1]) {
			/* A boxed scalar is w0; a string or a message-first error is (w0, w1). */
			if (bpf_probe_read_user(&w0, 8, (void *)e[1]))
				w0 = 0;
			if (bpf_probe_read_user(&w1, 8, (void *)(e[1] + 8)))
				w1 = 0;
		}
		if ((c->flags & GP_CAPF_DATA_STR) && w0) {
			__u32 max = c->max_len > GP_MAX_ELEM_STR ? GP_MAX_ELEM_STR : c->max_len;
			__u8 sf = 0;
			k = read_bytes(s, p + 40, w0, w1, max, &sf);
			/* Not a string after all (a boxed integer): no bytes, not a fault. */
			if (!(sf & GP_VAL_FAULT))
				ef |= sf;
		}
	} else {
		e[1] = 0;
	}
	*(__u64 *)at(s, p) = ty;
	*(__u64 *)at(s, p + 8) = e[1];
	*(__u64 *)at(s, p + 16) = w0;
	*(__u64 *)at(s, p + 24) = w1;
	*(__u64 *)at(s, p + 32) = 0;
	*(__u16 *)at(s, p + 32) = k;
	*at(s, p + 34) = ef;
	return 40 + pad8(k);
}

/* One field of an error node at `p` (GP_CAP_ERROR): u8 kind, u8 off, u8 flags, u8 child
 * (IFACE: the index of the node it was queued as; 0xff: nil, or no room), u16 bytes kept
 * `k`, u16 0, u64 w (STR: the full length; WORD: the word), then (STR) the `k` bytes
 * padded to 8. Returns the bytes written. */
GP_SUBPROG int gp_err_field(GP_SC_PARAMS, __u32 p, __u64 data, __u32 kind_off)
{
	GP_SC_LOAD
	/* One argument for both: BPF functions take five at most. */
	__u32 kind = kind_off & 0xff, off = (kind_off >> 8) & 0xff;
	__u64 h[2] = { 0, 0 };
	__u64 w = 0;
	__u8 ef = 0, child = 0xff;
	__u32 k = 0;
	/* A word field reads its 8 bytes only: a boxed word (syscall.Errno) may end its page. */
	if (bpf_probe_read_user(h, kind == GP_EF_WORD ? 8 : 16, (void *)(data + off))) {
		ef = GP_VAL_FAULT;
	} else if (kind == GP_EF_STR) {
		w = (__s64)h[1] < 0 ? 0 : h[1];
		if (s->estrs >= GP_ERR_STRS) {
			/* Over the bytes one error may take: recorded, not read. */
			ef = GP_VAL_TRUNCATED;
		} else {
			s->estrs++;
			__u32 max = c->max_len > GP_MAX_ELEM_STR ? GP_MAX_ELEM_STR : c->max_len;
			k = read_bytes(s, p + 16, h[0], h[1], max, &ef);
		}
	} else if (kind == GP_EF_IFACE) {
		if (!h[0]) {
			ef = GP_VAL_NIL;
		} else if (s->enq < GP_ERR_NODES) {
			__u32 q = s->enq & 7;
			s->eq[q][0] = h[0];
			s->eq[q][1] = h[1];
			child = q;
			s->enq = q + 1;
		} else {
			ef = GP_VAL_TRUNCATED; /* no room for another node */
		}
	} else if (kind == GP_EF_WORD) {
		w = h[0];
	} else {
		ef = GP_VAL_FAULT;
	}
	if (ef & GP_VAL_FAULT)
		k = 0;
	*at(s, p) = kind;
	*at(s, p + 1) = off;
	*at(s, p + 2) = ef;
	*at(s, p + 3) = child;
	*(__u32 *)at(s, p + 4) = k;
	*(__u64 *)at(s, p + 8) = w;
	return 16 + pad8(k);
}

/* Node i of an error capture at `p`: u64 its dynamic type (0: nil), u32 the type's hash,
 * u8 fields that follow, u8 flags (FAULT: its itab was unreadable), u16 0; then its
 * fields as its table's layout for that hash says (none for a type the table lacks).
 * Returns the bytes written. */
GP_SUBPROG int gp_err_node(GP_SC_PARAMS, __u32 p, __u32 i)
{
	GP_SC_LOAD
	__u64 tab = s->eq[i & 7][0], data = s->eq[i & 7][1];
	__u64 th[2] = { 0, 0 }; /* itab + 8: the type, then its hash */
	__u8 nf = 0, nflags = 0;
	struct gp_err_type *et = &s->et;
	*et = (struct gp_err_type){};
	if (tab && bpf_probe_read_user(th, sizeof(th), (void *)(tab + 8))) {
		nflags = GP_VAL_FAULT;
		th[0] = 0;
	} else if (tab && data) {
		struct gp_err_key key = { .table = c->table, .hash = (__u32)th[1] };
		struct gp_err_type *found = bpf_map_lookup_elem(&errtypes, &key);
		if (found) {
			*et = *found;
			nf = et->n > GP_ERR_FIELDS ? GP_ERR_FIELDS : et->n;
		}
	}
	*(__u64 *)at(s, p) = th[0];
	*(__u32 *)at(s, p + 8) = (__u32)th[1];
	*at(s, p + 12) = nf;
	*at(s, p + 13) = nflags;
	*(__u16 *)at(s, p + 14) = 0;
	__u32 q = p + 16;
	/* Unrolled by hand (clang will not unroll a loop with two exits): as a loop, clang folds
	 * its bounds into one, f < nf, and 5.10's verifier, which forgets a bounded number it
	 * spills (nf), then walks it a million times ("BPF program is too large"). The layout is
	 * read from the scratch map at each field (kept on the stack, the unrolled fields took
	 * 128 bytes: over 512 for the chain). Each field's size is read back untracked: its
	 * outcomes do not multiply the next's. */
#define GP_ERR_FIELD_AT(f)                                                                          \
	if (nf > (f))                                                                              \
		q = untracked(s, q + (gp_err_field(GP_SC(s, c, GP_CI), q, data,                    \
						   et->kind[f] | ((__u32)et->off[f] << 8)) &         \
				      (GP_SCRATCH - 1)));
	_Static_assert(GP_ERR_FIELDS == 5, "one GP_ERR_FIELD_AT for each field");
	GP_ERR_FIELD_AT(0)
	GP_ERR_FIELD_AT(1)
	GP_ERR_FIELD_AT(2)
	GP_ERR_FIELD_AT(3)
	GP_ERR_FIELD_AT(4)
#undef GP_ERR_FIELD_AT
	return (q - p) & (GP_SCRATCH - 1);
}

/* The nodes of an error capture whose words are (tab, data), from `o`: breadth first, as
 * the fields queue them. Returns the bytes written; *nodes the nodes. */
static __always_inline __u32 error_value(struct scratch *s, const struct gp_capture *c, __u32 o,
					 __u64 tab, __u64 data, __u32 *nodes, __u32 ci)
{
	s->eq[0][0] = tab;
	s->eq[0][1] = data;
	s->enq = 1;
	s->estrs = 0;
	__u32 p = o, i = 0;
#pragma clang loop unroll(disable)
	for (; i < GP_ERR_NODES; i++) {
		if (i >= s->enq)
			break;
		__u32 got = gp_err_node(GP_SC(s, c, ci), p, i);
		p = untracked(s, p + (got & (GP_SCRATCH - 1)));
	}
	*nodes = i;
	return (p - o) & (GP_SCRATCH - 1);
}

/* One value of a capture with a path or of a composite kind, at `off`: its gp_value header
 * and bytes. Returns the bytes written (header included, padded to 8). */
GP_SUBPROG int gp_capture_value(GP_SC_PARAMS, __u32 off, __u32 i)
{
	GP_SC_LOAD
	off &= GP_DATA_MASK;
	struct gp_value *v = (struct gp_value *)(s->buf + off);
	__u32 o = off + sizeof(*v); /* the value's bytes */
	if (c->kind == GP_CAP_SPAN) {
		/* Made by span_enter (propagate/spans.h) before the record. */
		*(__u64 *)at(s, o) = s->span[0];
		*(__u64 *)at(s, o + 8) = s->span[1];
		*(__u64 *)at(s, o + 16) = s->span[2];
		*(__u64 *)at(s, o + 24) = s->span[3];
		v->cap = i;
		v->flags = 0;
		v->len = 32;
		v->full_len = 0;
		return sizeof(*v) + 32;
	}
	__u64 w[2];
	__u32 left = 0;
	__u8 flags = cap_words(s->regs, c, w, &left);
	v->cap = i;
	v->full_len = 0;
	if (flags) {
		v->flags = flags;
		v->len = 0;
		v->full_len = left;
		return sizeof(*v);
	}
	__u32 len = 0;
	__u8 kind = c->kind;
	if (kind == GP_CAP_WORD) {
		*(__u64 *)at(s, o) = w[0];
		len = 8;
	} else if (kind == GP_CAP_BYTES) {
		__u64 n = len_of(w[1], c->size, c->flags, &flags);
		v->full_len = clamp32(n);
		len = read_bytes(s, o, w[0], n, c->max_len, &flags);
	} else if (kind == GP_CAP_IFACE) {
		__u64 tab = w[0], data = w[1], ty = tab;
		if (tab && (c->flags & GP_CAPF_ITAB) && bpf_probe_read_user(&ty, 8, (void *)(tab + 8))) {
			flags |= GP_VAL_FAULT;
		} else {
			if (!tab)
				data = 0; /* nil: 16 zero bytes */
			*(__u64 *)at(s, o) = ty;
			*(__u64 *)at(s, o + 8) = data;
			len = 16;
			__u64 h[2];
			if (tab && data && (c->flags & GP_CAPF_DATA_STR) &&
			    !bpf_probe_read_user(h, sizeof(h), (void *)data)) {
				__u8 sf = 0;
				__u32 k = read_bytes(s, o + 24, h[0], h[1], c->max_len, &sf);
				if (!(sf & GP_VAL_FAULT)) {
					*(__u64 *)at(s, o + 16) = h[1];
					v->full_len = (sf & GP_VAL_INVALID) ? 0 : clamp32(h[1]);
					flags |= sf;
					len = 24 + k;
				}
			}
		}
	} else if (kind == GP_CAP_SLICE) {
		__u64 l = elem_count(w[1], &flags);
		__u32 n = c->max_elems > GP_MAX_ELEMS ? GP_MAX_ELEMS : c->max_elems;
		if (l < n)
			n = (__u32)l;
		if (l > n)
			flags |= GP_VAL_TRUNCATED;
		v->full_len = clamp32(l);
		__u32 size = c->size > 8 ? 8 : c->size;
		__u64 bytes = n * size;
		/* The compiler knows bytes <= 128 and would drop the bound; the verifier needs it. */
		GP_AT_MOST(bytes, GP_MAX_ELEMS * 8);
		if (bytes && bpf_probe_read_user(at(s, o), bytes, (void *)w[0]))
			flags |= GP_VAL_FAULT;
		else
			len = bytes;
	} else if (kind == GP_CAP_STRS || kind == GP_CAP_IFACES) {
		__u64 l = elem_count(w[1], &flags);
		__u32 n = c->max_elems > GP_MAX_ELEMS ? GP_MAX_ELEMS : c->max_elems;
		if (l < n)
			n = (__u32)l;
		if (l > n)
			flags |= GP_VAL_TRUNCATED;
		v->full_len = clamp32(l);
		__u32 max = c->max_len > GP_MAX_ELEM_STR ? GP_MAX_ELEM_STR : c->max_len;
		__u32 p = o;
#pragma clang loop unroll(disable)
		for (__u32 j = 0; j < GP_MAX_ELEMS; j++) {
			if (j >= n)
				break;
			__u64 src = w[0] + 16 * (__u64)j;
			__u32 got = kind == GP_CAP_STRS ? gp_str_elem(GP_S(s), p, src, max)
							: gp_iface_elem(GP_SC(s, c, GP_CI), p, src);
			/* Read back untracked: each element's outcomes do not multiply the next's. */
			p = untracked(s, p + (got & (GP_SCRATCH - 1)));
		}
		len = (p - o) & (GP_SCRATCH - 1);
	} else if (kind == GP_CAP_ERROR) {
		__u32 nodes = 0;
		len = error_value(s, c, o, w[0], w[1], &nodes, GP_CI);
		v->full_len = nodes;
	} else {
		flags |= GP_VAL_FAULT;
	}
	if (flags & GP_VAL_FAULT)
		len = 0;
	v->flags = flags;
	v->len = len;
	return sizeof(*v) + pad8(len);
}

/* A header capture (GP_CAP_HEADER, `Header["X"]`) at `off`, as gp_capture_value writes
 * the others: a function of its own, called by the hit itself, because the frames of the
 * map search (gomap.h) under gp_capture_value's would take more than the 512 bytes of
 * stack a program's frames share before Linux 6.13. */
GP_SUBPROG int gp_capture_header(GP_SC_PARAMS, __u32 off, __u32 i)
{
	GP_SC_LOAD
	off &= GP_DATA_MASK;
	struct gp_value *v = (struct gp_value *)(s->buf + off);
	__u64 w[2];
	__u32 left = 0;
	__u8 flags = cap_words(s->regs, c, w, &left);
	v->cap = i;
	v->full_len = 0;
	v->len = 0;
	if (flags) {
		v->flags = flags;
		v->full_len = left;
		return sizeof(*v);
	}
	/* A propagating entry searched this map already in this hit (propagate/spans.h). */
	int r = s->hdr_map && s->hdr_map == w[0] ? (int)s->hdr_res
						 : gp_header_lookup(GP_S(s), w[0], c->size);
	s->hdr_map = 0;
	__u32 len = 0;
	if (r < 0)
		s->incomplete++; /* counted by the probe: its join may have been missed */
	if (r == -2) {
		flags |= GP_VAL_TRUNCATED; /* not searched: len 0 */
	} else if (r < 0) {
		flags |= GP_VAL_FAULT;
	} else if (r == 1) {
		v->full_len = clamp32(s->hdr[1]);
		len = read_bytes(s, off + sizeof(*v), s->hdr[0], s->hdr[1], c->max_len, &flags);
	}
	if (flags & GP_VAL_FAULT)
		len = 0;
	v->flags = flags;
	v->len = len;
	return sizeof(*v) + pad8(len);
}

#endif
