// SPDX-License-Identifier: GPL-2.0
/* gprobe's uprobe programs: one generic uprobe program for every probe (configured through
 * the `probes` map, selected by the attach cookie). The process hooks (exec, fork, exit)
 * are in procs.bpf.c; the maps they share with this object are in procmaps.h.
 *
 * Uprobes are attached per process (perf events with a pid): the kernel inserts their
 * breakpoints only into the processes the agent selected, so this program needs no pid
 * filter of its own. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"

char LICENSE[] SEC("license") = "GPL";

#include "maps.h"
#include "regs.h"
#include "cookie.h"

static __always_inline int over_rate(__u32 id, __u32 limit, __u64 now)
{
	struct gp_rate *rt = bpf_map_lookup_elem(&rates, &id);
	if (!rt)
		return 0;
	/* A fixed one-second window; a racing reset may admit a few extra calls. */
	if (now - rt->window_start >= 1000000000ULL) {
		rt->window_start = now;
		rt->count = 0;
	}
#ifdef GP_NO_COOKIE
	/* No atomic fetch on these kernels (cookie.h): the count read after the add may hold
	 * other CPUs' adds too, so a racing call can be throttled one early, never admitted
	 * over the limit. */
	__sync_fetch_and_add(&rt->count, 1);
	return rt->count > limit;
#else
	return __sync_fetch_and_add(&rt->count, 1) >= limit;
#endif
}

/* The in-flight stack of one goroutine (or thread) and function pairs each entry with its
 * own return: an entry pushes its time and call id, its return pops them. `in` is the stack
 * if the caller already looked it up, else NULL (one is created). */
static __always_inline void inflight_push(struct scratch *s, const struct gp_inflight_key *ik,
					  struct gp_inflight *in, __u64 ts, __u64 call_id,
					  __u32 fbits)
{
	if (!in) {
		/* Made in map memory: too large for the stack with the rest of the hit. */
		struct gp_inflight *fresh = &s->fresh_in;
		__builtin_memset(fresh, 0, sizeof(*fresh));
		fresh->depth = 1;
		fresh->ts[0] = ts;
		fresh->call_id[0] = call_id;
		fresh->fbits[0] = fbits;
		if (bpf_map_update_elem(&inflight, ik, fresh, BPF_NOEXIST) == 0)
			return;
		/* It exists after all (created meanwhile). */
		in = bpf_map_lookup_elem(&inflight, ik);
		if (!in)
			return;
	}
	__u32 d = in->depth & (GP_MAX_DEPTH - 1);
	in->ts[d] = ts;
	in->call_id[d] = call_id;
	in->fbits[d] = fbits;
	in->depth = d + 1;
}

/* Takes the top of the non-empty stack `in` (of key `ik`): returns its call id, and its
 * entry's time in `ts` and `when:` terms in `fbits`; an emptied stack is deleted. */
static __always_inline __u64 inflight_pop(const struct gp_inflight_key *ik,
					  struct gp_inflight *in, __u64 *ts, __u32 *fbits)
{
	__u32 d = (in->depth - 1) & (GP_MAX_DEPTH - 1);
	__u64 call_id = in->call_id[d];
	*ts = in->ts[d];
	*fbits = in->fbits[d];
	in->depth--;
	if (in->depth == 0)
		bpf_map_delete_elem(&inflight, ik);
	return call_id;
}

/* An entry that records nothing (over the rate limit) still holds its place on a stack
 * its goroutine has open, so that its return pops that place and not an outer call's
 * entry. Without an open stack its return finds none and is counted unpaired. */
static __always_inline void inflight_skip(const struct gp_inflight_key *ik)
{
	struct gp_inflight *in = bpf_map_lookup_elem(&inflight, ik);
	if (in)
		inflight_hold_place(in);
}

#include "record.h"

/* A call its `when:` left out returned after `ns`: counted in its bucket (map left_out,
 * entry `id`: the return configuration's slot). */
static __always_inline void count_left_out(__u32 id, __u64 ns)
{
	struct gp_durations *d = bpf_map_lookup_elem(&left_out, &id);
	if (!d)
		return;
	__u32 b = 0;
	if (ns >> 32) { ns >>= 32; b += 32; }
	if (ns >> 16) { ns >>= 16; b += 16; }
	if (ns >> 8) { ns >>= 8; b += 8; }
	if (ns >> 4) { ns >>= 4; b += 4; }
	if (ns >> 2) { ns >>= 2; b += 2; }
	if (ns >> 1) { b += 1; }
	d->n[b & (GP_DUR_BUCKETS - 1)]++;
}

#include "inplace.h"

#include "captures.h"

#include "when.h"

#include "propagate/spans.h"

/* What emit_any did besides writing the record (0) or finding the ring full (-1). */
#define EMIT_FILTERED 1  /* the call failed its `when:` at the entry: nothing written */
#define EMIT_THROTTLED 2 /* it passed, over limits.eventsPerSecond: nothing written */
#define EMIT_UNDECIDED 3 /* its `when:` cannot be decided (GP_TRUTH_UNDECIDED, or needs the
			  * return of an entry whose returns are off): nothing written */

/* A capture of a register or stack word, a C string or bytes with a length, at `off`: its
 * gp_value header and bytes. Returns the bytes written (header included, padded to 8). */
static __always_inline __u32 capture_plain(struct scratch *s, const struct gp_capture *c,
					   __u32 off, __u32 i)
{
	off &= GP_DATA_MASK;
	__u32 wrote = 0;
	struct gp_value *v = (struct gp_value *)(s->buf + off);
	__u8 flags = 0;
	v->cap = i;
	v->full_len = 0;
	if (c->kind == GP_CAP_WORD) {
		__u64 w;
		if (read_word(s->regs, &c->loc[0], c->size, &w))
			flags |= GP_VAL_FAULT;
		*(__u64 *)(s->buf + off + sizeof(*v)) = w;
		v->len = 8;
		wrote = sizeof(*v) + 8;
	} else if (c->kind == GP_CAP_CSTR) {
		/* max_len + 2 bytes: a string of more than max_len bytes (the helper returns
		 * max_len + 2, NUL included) is told from one of exactly max_len. */
		__u64 ptr = 0;
		long got = -1;
		__u64 room = (__u64)c->max_len + 2;
		GP_AT_MOST(room, GP_MAX_STR + 2);
		int e = read_word(s->regs, &c->loc[0], 8, &ptr);
		if (!e && ptr)
			got = bpf_probe_read_user_str(s->buf + off + sizeof(*v), room, (void *)ptr);
		__u32 n = 0;
		if (got <= 0) {
			/* NULL is a null value; a string not read is unreadable. */
			flags |= GP_VAL_FAULT | (!e && !ptr ? GP_VAL_NIL : 0);
		} else {
			n = (__u32)got - 1; /* without the NUL */
			if (n > c->max_len) {
				n = c->max_len;
				flags |= GP_VAL_TRUNCATED;
			}
		}
		if (n > GP_MAX_STR)
			n = GP_MAX_STR;
		v->full_len = n + ((flags & GP_VAL_TRUNCATED) ? 1 : 0);
		v->len = n;
		wrote = sizeof(*v) + ((n + 7) & ~7U);
	} else {
		__u64 ptr = 0, len = 0;
		if (read_word(s->regs, &c->loc[0], 8, &ptr) | read_word(s->regs, &c->loc[1], 8, &len))
			flags |= GP_VAL_FAULT;
		len = len_of(len, c->size, c->flags, &flags);
		__u64 n = len > c->max_len ? c->max_len : len;
		GP_AT_MOST(n, GP_MAX_STR);
		if (len > n)
			flags |= GP_VAL_TRUNCATED;
		v->full_len = len > 0xffffffffULL ? 0xffffffffU : (__u32)len;
		if (n && bpf_probe_read_user(s->buf + off + sizeof(*v), n, (void *)ptr)) {
			flags |= GP_VAL_FAULT;
			n = 0;
		}
		v->len = n;
		wrote = sizeof(*v) + ((n + 7) & ~7U);
	}
	v->flags = flags;
	return wrote;
}

/* The same, a function verified once: the object for kernels before 5.15 (GP_NO_COOKIE)
 * calls it for every capture, as 5.10's verifier, taking the eight captures' kinds and
 * sizes path by path inline, did not finish in minutes. */
GP_SUBPROG int gp_capture_plain(GP_SC_PARAMS, __u32 off, __u32 i)
{
	GP_SC_LOAD
	return capture_plain(s, c, off, i);
}

/* Records with string/bytes captures, whose size depends on the values, and those of
 * configurations with a `when:` (decided on the values assembled): assembled in the
 * per-CPU scratch buffer, then copied into the ring buffer. Returns -1 when it is full. */
static __always_inline int emit_any(const struct x86_regs *r, const struct gp_probe_cfg *cfg,
				    struct hit *h, struct scratch *s)
{
	save_regs(s->regs, r);
	struct gp_event *e = (struct gp_event *)s->buf;
	__u32 off = sizeof(struct gp_event);
#pragma clang loop unroll(full)
	for (int i = 0; i < GP_MAX_CAPTURES; i++) {
		if (i >= cfg->n_captures)
			break;
		const struct gp_capture *c = &cfg->caps[i];
		off &= GP_DATA_MASK;
		s->capoff[i & (GP_MAX_CAPTURES - 1)] = off;
		if ((c->flags & GP_CAPF_PATH) || c->kind >= GP_CAP_IFACE) {
			/* Field paths and Go's composite kinds: a function verified once. */
			int n = c->kind == GP_CAP_HEADER
					? gp_capture_header(GP_SC(s, c, GP_CAP_REF(GP_CFG_SLOT(h->id), i)),
							    off, i)
					: gp_capture_value(GP_SC(s, c, GP_CAP_REF(GP_CFG_SLOT(h->id), i)),
							   off, i);
			off = untracked(s, off + n);
			continue;
		}
#ifdef GP_NO_COOKIE
		int n = gp_capture_plain(GP_SC(s, c, GP_CAP_REF(GP_CFG_SLOT(h->id), i)), off, i);
		off = untracked(s, off + n);
#else
		off += capture_plain(s, c, off, i);
#endif
	}
	off &= (GP_SCRATCH - 1);
	if (cfg->flags & GP_CFG_FILTER) {
		s->fout = GP_MAX_CAPTURES;
		int t = gp_when(GP_S(s), GP_CFG_SLOT(h->id), h->duration, h->fpre);
		h->fbits = s->wbits;
		/* The rate limit counts the calls kept, not all of them: a probe whose `when:` is
		 * decided at the return is limited there. */
		if (t == GP_TRUTH_FALSE)
			h->drop = EMIT_FILTERED;
		else if (t == GP_TRUTH_UNDECIDED || (t == GP_TRUTH_UNKNOWN && h->whole))
			h->drop = EMIT_UNDECIDED;
		else if (cfg->rate_limit && over_rate(GP_CFG_SLOT(h->id), cfg->rate_limit, h->now))
			h->drop = EMIT_THROTTLED;
		if (h->drop) {
			if (cfg->kind != GP_PROBE_RETURN)
				return h->drop;
			/* The return of a recorded entry: its record says so, without values. */
			h->kind |= GP_EV_FILTERED;
			off = sizeof(struct gp_event);
		} else {
			/* The values read for the terms only are not written. */
			__u32 keep = s->fout;
			if (keep < cfg->n_captures && keep < GP_MAX_CAPTURES)
				off = s->capoff[keep & (GP_MAX_CAPTURES - 1)] & GP_DATA_MASK;
		}
	}
	fill_header(e, h, r, off - sizeof(struct gp_event));
	return bpf_ringbuf_output(&events, s->buf, off, wake_flag(s, off)) ? -1 : 0;
}

#include "loader/loader.h"

#include "jcc.h"

/* What every hit does first: nothing on Go's stack-check jump; its cost counted against
 * its process's budget; for a latency probe, whether its returns are taken off (in
 * *no_returns). Returns 0 when the hit ends here. */
static __always_inline int hit_start(struct x86_regs *r, const struct gp_probe_cfg *cfg,
				     __u32 slot, __u32 *no_returns)
{
	/* On Go's stack-check jump: taken, the stack grows and the function restarts, to come
	 * here again with the jump not taken. That second hit is the call. */
	if (cfg->jcc && jcc_taken(cfg->jcc - 1, r->flags))
		return 0;
	if (slot) {
		if (cfg->cost_ns) {
			__u64 *spent = bpf_map_lookup_elem(&budget, &slot);
			if (spent)
				*spent += cfg->cost_ns;
		}
		/* Only a latency probe's entries and returns read the switch: a CALL has none. */
		if (cfg->kind == GP_PROBE_ENTRY || cfg->kind == GP_PROBE_RETURN) {
			__u32 *off = bpf_map_lookup_elem(&returns_off, &slot);
			if (off)
				*no_returns = *off;
		}
	}
	return 1;
}

/* gprobe's own probes of net/http's client (GP_PROBE_HTTP_OUT, _CONN, _DONE): a function
 * the program calls itself, not gprobe_hit, because the header map search under
 * http_request (gomap.h) with gprobe_hit's frame above it would take more than the 512
 * bytes of stack a program's frames share before Linux 6.13. */
static __noinline int gprobe_http(struct x86_regs *r)
{
	__u64 cookie = gp_cookie(r, GP_HIT_SITE());
	__u32 id = GP_CFG_SLOT((__u32)cookie);
	struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &id);
	__u32 no_returns = 0;
	if (!cfg || cfg->kind < GP_PROBE_HTTP_OUT || cfg->kind == GP_PROBE_HTTP_WRITE ||
	    cfg->kind == GP_PROBE_FREED || !hit_start(r, cfg, cookie >> 32, &no_returns))
		return 0;
	struct gp_stats *st = bpf_map_lookup_elem(&stats, &id);
	if (!st)
		return 0;
	st->hits++;
	return http_request(r, cfg, st);
}

/* One hit, never two at once on a CPU (gprobe_uprobe, oncpu.h): it uses the per-CPU scratch
 * map and, on kernels that give it one, the per-CPU private stack. */
static __noinline int gprobe_hit(struct x86_regs *r)
{
	__u64 cookie = gp_cookie(r, GP_HIT_SITE());
	__u32 handle = (__u32)cookie;
	__u32 id = GP_CFG_SLOT(handle);
	struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &id);
	/* Freed, or gprobe_http's (the configuration changed since the program looked). */
	if (!cfg || cfg->kind >= GP_PROBE_HTTP_OUT)
		return 0;
	__u32 no_returns = 0;
	if (!hit_start(r, cfg, cookie >> 32, &no_returns))
		return 0;
	if (cfg->kind == GP_PROBE_LOADER)
		return loader_hit();
	struct gp_stats *st = bpf_map_lookup_elem(&stats, &id);
	if (!st)
		return 0;
	st->hits++;

	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	/* The hit and its in-flight key live in the scratch map, not on the stack: on kernels
	 * without a private stack (before 6.13) the frames of a hit share 512 bytes. */
	struct hit *h = &s->h;
	*h = (struct hit){
		.pid_tgid = bpf_get_current_pid_tgid(),
		.now = bpf_ktime_get_ns(),
		.id = handle,
		.kind = GP_EV_CALL,
		.whole = cfg->kind == GP_PROBE_ENTRY && no_returns,
	};
	/* Go pairs a call's entry and return by goroutine (runtime.g in R14); C functions by
	 * thread, R14 being any value there. */
	struct gp_inflight_key *ik = &s->ik;
	*ik = (struct gp_inflight_key){
		.goroutine = (cfg->flags & GP_CFG_PAIR_BY_THREAD) ? (__u32)h->pid_tgid : r->r14,
		.tgid = h->pid_tgid >> 32,
		.func_id = cfg->func_id,
	};
	h->goroutine = ik->goroutine;

	if (cfg->kind == GP_PROBE_RETURN) {
		if (no_returns)
			return 0; /* taken off for their cost: see returns_off */
		struct gp_inflight *in = bpf_map_lookup_elem(&inflight, ik);
		if (in && in->overflow > 0) {
			/* The return of a call nested too deep to be recorded (counted at its entry). */
			in->overflow--;
			return 0;
		}
		if (!in || in->depth == 0 || in->depth > GP_MAX_DEPTH) {
			/* Its entry was throttled, dropped, or came before we attached. */
			st->unpaired++;
			return 0;
		}
		__u64 entered;
		h->call_id = inflight_pop(ik, in, &entered, &h->fpre);
		__u64 unrecorded = h->call_id & GP_CALL_UNRECORDED;
		__u64 left = h->call_id & GP_CALL_FILTERED;
		h->call_id &= ~(GP_CALL_UNRECORDED | GP_CALL_FILTERED);
		h->duration = h->now - entered;
		h->kind = GP_EV_RETURN;
		if (h->call_id && (cfg->flags & GP_CFG_PROPAGATE))
			span_exit(ik->tgid, ik->goroutine, h->call_id);
		if (h->call_id && (cfg->flags & GP_CFG_NEWPROC))
			span_spawned(s, h->pid_tgid, r->ax);
		if (unrecorded) {
			/* Counted at its entry (filtered, throttled or lost); a call its `when:`
			 * left out still has its duration counted. */
			if (left)
				count_left_out(id, h->duration);
			return 0;
		}
	} else {
		if (no_returns && (cfg->flags & GP_CFG_WHEN_RETURN)) {
			/* Its `when:` needed the return, taken off for its cost. */
			st->undecided++;
			return 0;
		}
		/* With a `when:`, the limit applies to the calls it keeps (emit_any). */
		if (cfg->rate_limit && !(cfg->flags & GP_CFG_FILTER) &&
		    over_rate(id, cfg->rate_limit, h->now)) {
			st->throttled++;
			if (cfg->kind == GP_PROBE_ENTRY && !no_returns)
				inflight_skip(ik);
			return 0;
		}
		/* With its returns taken off, an entry records the whole call (GP_EV_CALL). */
		if (cfg->kind == GP_PROBE_ENTRY && !no_returns) {
			struct gp_inflight *in = bpf_map_lookup_elem(&inflight, ik);
			if (in && in->depth >= GP_MAX_DEPTH) {
				/* Deeper than the pairing stack: counted, not recorded, and its return
				 * skipped so the outer calls still pair exactly. */
				in->overflow++;
				st->too_deep++;
				return 0;
			}
			s->nested = in != NULL;
			s->seq++;
			h->call_id = (s->seq << 10) | (bpf_get_smp_processor_id() & 0x3ff);
			h->kind = GP_EV_ENTRY;
			if (cfg->flags & GP_CFG_PROPAGATE)
				span_enter(r, cfg, s, ik->tgid, ik->goroutine, h->call_id);
			if (cfg->flags & GP_CFG_NEWPROC)
				spawn_enter(r, h->pid_tgid);
		}
	}

	if (s->lost)
		h->kind |= GP_EV_AFTER_LOSS;
	int err;
	if (cfg->flags & GP_CFG_WORDS)
		err = emit_words_n(r, cfg, h, cfg->n_captures, s);
	else if (cfg->flags & GP_CFG_ONE_BYTES)
		err = emit_one_bytes(r, cfg, h, s);
	else
		err = emit_any(r, cfg, h, s);
	if (s->incomplete) {
		st->incomplete += s->incomplete;
		s->incomplete = 0;
	}
	s->hdr_map = 0;
	/* Left out by its `when:` (or over the rate limit after it): at the entry, nothing was
	 * written; at the return, a record that drops the entry, counted once it is written
	 * (lost, the entry is delivered without its return, as any call whose RETURN was). */
	if (err == EMIT_FILTERED || err == EMIT_THROTTLED || err == EMIT_UNDECIDED) {
		if (err == EMIT_FILTERED)
			st->filtered++;
		else if (err == EMIT_THROTTLED)
			st->throttled++;
		else
			st->undecided++;
		/* Its return pops its place and records nothing (but the duration of a call
		 * left out by its `when:`). */
		h->call_id |= GP_CALL_UNRECORDED | (err == EMIT_FILTERED ? GP_CALL_FILTERED : 0);
	} else if (err) {
		st->lost++;
		s->lost = 1;
		/* An entry whose record was lost still holds its place for its return. */
		h->call_id |= GP_CALL_UNRECORDED;
	} else {
		s->lost = 0;
		st->emitted++;
		if (h->drop == EMIT_FILTERED) {
			st->filtered++;
			count_left_out(id, h->duration);
		} else if (h->drop == EMIT_THROTTLED) {
			st->throttled++;
		} else if (h->drop == EMIT_UNDECIDED) {
			st->undecided++;
		}
	}

	/* Decided on values read back from maps, not on this hit's own constants (kind, what
	 * the entry's lookup found): the verifier then checks the record writing above once,
	 * not once for each. */
	if (cfg->kind == GP_PROBE_ENTRY && !no_returns) {
		/* Remembered for the return: pushed on the in-flight stack of this goroutine and
		 * function if the entry found one (a nested call), else on a new one. Either way
		 * is right whatever s->nested says; it only picks the cheaper order. */
		struct gp_inflight *in = s->nested ? bpf_map_lookup_elem(&inflight, ik) : NULL;
		inflight_push(s, ik, in, h->now, h->call_id, h->fbits);
	}
	return 0;
}

#include "oncpu.h"

SEC("uprobe")
int gprobe_uprobe(struct x86_regs *r)
{
	GP_ONE_PER_CPU(r, oncpu_is_http(r, &c->lv[0]) ? gprobe_http(r) : gprobe_hit(r));
}

#include "propagate/propagate.h"
