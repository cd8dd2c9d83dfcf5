/* A configuration's `when:` (GP_CFG_FILTER), decided on the record assembled in the scratch
 * buffer before it is written: each term's value is read back from its capture's value
 * there (the capture reads of captures.h, nil paths and faults included), or is the call's
 * duration, or was decided at the entry; filter.h evaluates the predicate. */
#ifndef GPROBE_WHEN_H
#define GPROBE_WHEN_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "filter.h"

/* Term `t`'s value into `v`, from the values assembled in `s` (or `duration`). */
static __always_inline void when_value(struct scratch *s, const struct gp_filter_term *t,
				       struct gp_fval *v, __u64 duration)
{
	__u8 c = t->cap;
	v->state = GP_FV_UNKNOWN;
	v->word = 0;
	v->len = 0;
	v->n = 0;
	if (c == GP_FCAP_DURATION) {
		v->state = GP_FV_KNOWN;
		v->word = duration;
		return;
	}
	if (c >= GP_MAX_CAPTURES)
		return; /* not known here (GP_FCAP_NONE), or decided at the entry */
	__u32 o = s->capoff[c & (GP_MAX_CAPTURES - 1)] & GP_DATA_MASK;
	const struct gp_value *gv = (const struct gp_value *)(s->buf + o);
	const __u8 *b = s->buf + ((o + sizeof(*gv)) & GP_DATA_MASK);
	__u8 fl = gv->flags;
	if (fl & (GP_VAL_FAULT | GP_VAL_INVALID)) {
		/* len(m) of a nil map or channel at the end of the path is 0; any other nil on
		 * the way, or a negative length, leaves a value every test of which is false. */
		if ((fl & GP_VAL_NIL) && gv->full_len == 0 && (t->flags & GP_FTF_NIL_ZERO)) {
			v->state = GP_FV_KNOWN;
			return;
		}
		/* Memory that could not be read (a page not faulted in yet): the value is not
		 * known, and never will be; the other terms may still decide (else undecided). */
		if ((fl & GP_VAL_FAULT) && !(fl & GP_VAL_NIL))
			return;
		v->state = GP_FV_UNREADABLE;
		return;
	}
	v->state = GP_FV_KNOWN;
	if (t->flags & GP_FTF_STR) {
		__u32 n = gv->len;
		if (n > GP_FILTER_STR)
			n = GP_FILTER_STR;
		/* The bytes past n are the next value's: never compared (filter.h looks at n). */
		__builtin_memcpy(v->bytes, b, GP_FILTER_STR);
		v->n = n;
		v->len = gv->full_len;
		return;
	}
	__u64 w = gv->len >= 8 ? *(const __u64 *)b : 0;
	__u32 bits = (__u32)(t->vsize & 0xf) * 8;
	if (bits && bits < 64) {
		__u32 sh = 64 - bits;
		w = (t->flags & GP_FTF_SIGNED) ? (__u64)(((__s64)(w << sh)) >> sh) : (w << sh) >> sh;
	}
	v->word = w;
}

/* Unknown, and no value read later can decide it (one it needs could not be read, and no
 * term waits for the return): the call is counted undecided, never recorded. */
#define GP_TRUTH_UNDECIDED 3

/* The truth of the `when:` of configuration slot `id` over the record in `s` (values from
 * 0 to `n` captures) and `duration`, with the terms decided at the entry in `pre`;
 * s->wbits gets the terms' truth (known: low 16 bits, true: high 16), for the return.
 * Unknown without a predicate. Global: verified once, on its own. */
GP_SUBPROG int gp_when(GP_S_PARAMS, __u32 id, __u64 duration, __u32 pre)
{
	GP_S_GET
	if (!s)
		return GP_TRUTH_UNKNOWN;
	s->wbits = 0;
	const struct gp_filter *f = bpf_map_lookup_elem(&filters, &id);
	if (!f)
		return GP_TRUTH_UNKNOWN;
	s->fout = f->n_out;
	for (__u32 i = 0; i < GP_FILTER_TERMS; i++) {
		if (i >= f->n_terms)
			break;
		when_value(s, &f->terms[i], &s->fv.v[i], duration);
	}
	__u32 t = filter_eval(f, &s->fv, &s->fst, pre);
	s->wbits = (s->fst.tk & 0xffff) | ((s->fst.tt & 0xffff) << 16);
	if (t != GP_TRUTH_UNKNOWN)
		return t;
	for (__u32 i = 0; i < GP_FILTER_TERMS; i++) {
		if (i >= f->n_terms)
			break;
		/* A result or the duration, read at the return. */
		if (f->terms[i].cap == GP_FCAP_NONE)
			return t;
	}
	return GP_TRUTH_UNDECIDED;
}

#endif
