/* The evaluator of a probe's `when:` predicate (struct gp_filter, compiled by the agent's
 * agent/src/filter) over the values of one call (struct gp_fvals, one per term), in
 * three-valued logic: GP_TRUTH_FALSE, GP_TRUTH_TRUE, or GP_TRUTH_UNKNOWN while a term it
 * needs is not read yet. The agent's Rust evaluator (gprobe_crds::when::When::eval) is
 * the reference; agent/src/attach/filter_run.rs runs this one in the kernel against it. */
#ifndef GPROBE_FILTER_H
#define GPROBE_FILTER_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"

/* Whether the first `len` bytes (len <= GP_FILTER_STR) of `a` and `b`, both GP_FILTER_STR
 * bytes and 8-byte aligned, are equal: compared a word at a time, the last one masked. */
static __always_inline int filter_bytes_eq(const __u8 *a, const __u8 *b, __u32 len)
{
	for (__u32 j = 0; j < GP_FILTER_STR / 8; j++) {
		__u32 at = j * 8;
		if (at >= len)
			break;
		__u64 x = *(const __u64 *)(a + at) ^ *(const __u64 *)(b + at);
		__u32 rest = len - at;
		if (rest < 8)
			x &= (1ULL << (rest * 8)) - 1;
		if (x)
			return 0;
	}
	return 1;
}

/* Whether value `v` passes term `t` (its value known or unreadable: an unreadable one passes
 * no test, not even one decided when compiled, as in the reference). */
static __always_inline int filter_term_passes(const struct gp_filter_term *t,
					      const struct gp_fval *v)
{
	if (v->state != GP_FV_KNOWN)
		return 0;
	__u64 w = v->word, lit = t->lit;
	int sgn = t->flags & GP_FTF_SIGNED;
	__u32 len = t->len;
	if (len > GP_FILTER_STR)
		len = GP_FILTER_STR;
	switch (t->test) {
	case GP_FT_EQ: return w == lit;
	case GP_FT_NE: return w != lit;
	case GP_FT_LT: return sgn ? (__s64)w < (__s64)lit : w < lit;
	case GP_FT_LE: return sgn ? (__s64)w <= (__s64)lit : w <= lit;
	case GP_FT_GT: return sgn ? (__s64)w > (__s64)lit : w > lit;
	case GP_FT_GE: return sgn ? (__s64)w >= (__s64)lit : w >= lit;
	/* A string read short of its length (n < len) equals no literal; its prefix is what
	 * was read. */
	case GP_FT_STR_EQ:
	case GP_FT_STR_NE: {
		int eq = v->len == len && v->n == len && filter_bytes_eq(v->bytes, t->str, len);
		return t->test == GP_FT_STR_EQ ? eq : !eq;
	}
	case GP_FT_PREFIX: return v->n >= len && filter_bytes_eq(v->bytes, t->str, len);
	case GP_FT_NIL: return w == 0;
	case GP_FT_NOT_NIL: return w != 0;
	case GP_FT_TRUE: return 1;
	default: return 0;
	}
}

/* What the evaluation carries from one step to the next, in map memory (a per-CPU scratch
 * value): the verifier does not track its contents, so the states at the head of each
 * loop's iterations are alike and it checks the body a few times, not once per path
 * through every earlier step. */
struct gp_filter_state {
	__u32 tk, tt; /* each term's truth: known, and true (bit i: term i) */
	__u32 sk, st; /* the postfix program's stack: known, and true (bit d: slot d) */
	__u32 depth;
	__u32 bad;    /* a malformed program (which the agent never writes) */
};

/* One step of the postfix program: op `op` on the stack in `fs`. */
static __always_inline void filter_step(volatile struct gp_filter_state *fs, __u32 op)
{
	__u32 sk = fs->sk, st = fs->st, depth = fs->depth, tk = fs->tk, tt = fs->tt;
	if (op < GP_FILTER_TERMS) {
		if (depth >= 31) {
			fs->bad = 1;
			return;
		}
		sk = (sk & ~(1U << depth)) | (((tk >> op) & 1) << depth);
		st = (st & ~(1U << depth)) | (((tt >> op) & 1) << depth);
		fs->sk = sk;
		fs->st = st;
		fs->depth = depth + 1;
		return;
	}
	if (depth == 0 || depth > 31) {
		fs->bad = 1;
		return;
	}
	__u32 top = depth - 1;
	if (op == GP_FOP_NOT) {
		if ((sk >> top) & 1)
			fs->st = st ^ (1U << top);
		return;
	}
	if (depth < 2 || (op != GP_FOP_AND && op != GP_FOP_OR)) {
		fs->bad = 1;
		return;
	}
	__u32 a = depth - 2;
	__u32 ak = (sk >> a) & 1, at = (st >> a) & 1;
	__u32 bk = (sk >> top) & 1, bt = (st >> top) & 1;
	__u32 rk, rt;
	if (op == GP_FOP_AND) {
		/* False if either is known false; true if both are known true. */
		__u32 f0 = (ak & (at ^ 1)) | (bk & (bt ^ 1));
		rk = f0 | (ak & bk);
		rt = (f0 ^ 1) & ak & bk & at & bt;
	} else {
		/* True if either is known true; false if both are known false. */
		__u32 t1 = (ak & at) | (bk & bt);
		rk = t1 | (ak & bk);
		rt = t1;
	}
	fs->sk = (sk & ~(1U << a)) | (rk << a);
	fs->st = (st & ~(1U << a)) | (rt << a);
	fs->depth = a + 1;
}

/* The predicate's truth over `vals` and the terms decided before (`pre`: known in the low
 * 16 bits, true in the high 16; their values are not read again); `fs` is scratch map
 * memory, and holds each term's truth after (tk, tt). A malformed program (which the agent
 * never writes) is unknown: the call is kept. */
static __always_inline __u32 filter_eval(const struct gp_filter *f, const struct gp_fvals *vals,
					 volatile struct gp_filter_state *fs, __u32 pre)
{
	fs->tk = pre & 0xffff;
	fs->tt = (pre >> 16) & pre & 0xffff;
	fs->sk = 0;
	fs->st = 0;
	fs->depth = 0;
	fs->bad = 0;
	for (__u32 i = 0; i < GP_FILTER_TERMS; i++) {
		if (i >= f->n_terms)
			break;
		const struct gp_fval *v = &vals->v[i];
		if (v->state == GP_FV_UNKNOWN || ((pre >> i) & 1))
			continue;
		fs->tk |= 1U << i;
		if (filter_term_passes(&f->terms[i], v))
			fs->tt |= 1U << i;
	}
	for (__u32 i = 0; i < GP_FILTER_OPS; i++) {
		if (i >= f->n_ops)
			break;
		filter_step(fs, f->ops[i]);
	}
	if (fs->bad || fs->depth != 1 || !(fs->sk & 1))
		return GP_TRUTH_UNKNOWN;
	return (fs->st & 1) ? GP_TRUTH_TRUE : GP_TRUTH_FALSE;
}

#endif
