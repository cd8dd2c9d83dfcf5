/* The in-place record writers of gprobe.bpf.c: configurations of words only
 * (GP_CFG_WORDS) and of one string/bytes value (GP_CFG_ONE_BYTES), whose records are
 * reserved in the ring buffer and written there, without the scratch buffer. */
#ifndef GPROBE_INPLACE_H
#define GPROBE_INPLACE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"
#include "record.h"

/* Records of configurations whose captures are all words (GP_CFG_WORDS): N values of 8
 * bytes, so the record's size is a constant per N, and it is written in place in the ring
 * buffer (reserve/submit: no copy out of a scratch buffer). Returns -1 when the ring is
 * full. */
static __always_inline int emit_words(const struct x86_regs *r, const struct gp_probe_cfg *cfg,
				      const struct hit *h, const __u32 n, __u64 wake)
{
	struct gp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e) + n * 16, 0);
	if (!e)
		return -1;
	fill_header(e, h, r, n * 16);
	/* Not unrolled: nine copies of this function (one per n) stay small. */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < n; i++) {
		struct gp_value *v = (struct gp_value *)((__u8 *)(e + 1) + i * 16);
		v->cap = i;
		v->len = 8;
		v->full_len = 0;
		v->flags = read_word_direct(r, &cfg->caps[i].loc[0], cfg->caps[i].size, (__u64 *)(v + 1))
				   ? GP_VAL_FAULT
				   : 0;
	}
	bpf_ringbuf_submit(e, wake);
	return 0;
}

static __always_inline int emit_words_n(const struct x86_regs *r, const struct gp_probe_cfg *cfg,
					const struct hit *h, __u32 n, struct scratch *s)
{
	if (n > GP_MAX_CAPTURES)
		n = GP_MAX_CAPTURES;
	__u64 wake = wake_flag(s, sizeof(struct gp_event) + n * 16);
	switch (n) {
	case 0: return emit_words(r, cfg, h, 0, wake);
	case 1: return emit_words(r, cfg, h, 1, wake);
	case 2: return emit_words(r, cfg, h, 2, wake);
	case 3: return emit_words(r, cfg, h, 3, wake);
	case 4: return emit_words(r, cfg, h, 4, wake);
	case 5: return emit_words(r, cfg, h, 5, wake);
	case 6: return emit_words(r, cfg, h, 6, wake);
	case 7: return emit_words(r, cfg, h, 7, wake);
	default: return emit_words(r, cfg, h, GP_MAX_CAPTURES, wake);
	}
}

/* Records of configurations with one capture, a string/bytes (GP_CFG_ONE_BYTES), written
 * in place too: the value's n bytes go at a constant offset, so a reservation of a constant
 * size C is safe once n <= C - 56. The program picks the smallest of the sizes 56 + 2^k
 * (k = 3..12) that holds the value, so at most half of what a record reserves beyond its
 * header is unused, and a value of exactly 8, 16, ..., 4096 bytes fills its record. */
#define GP_BYTES_REC(n) (sizeof(struct gp_event) + sizeof(struct gp_value) + (n))

static __always_inline int emit_bytes(const struct x86_regs *r, const struct hit *h,
				      const __u32 size, __u64 wake, __u64 ptr, __u64 len, __u32 n,
				      __u8 flags)
{
	struct gp_event *e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e)
		return -1;
	struct gp_value *v = (struct gp_value *)(e + 1);
	/* The caller chose size >= GP_BYTES_REC(n); bounded again on the register passed (a
	 * 32-bit copy of n kept on the stack loses its bound in verifiers before 6.x). */
	__u64 m = n;
	GP_AT_MOST(m, size - GP_BYTES_REC(0));
	n = m;
	if (m && bpf_probe_read_user(v + 1, m, (void *)ptr)) {
		flags |= GP_VAL_FAULT;
		n = 0;
	}
	v->cap = 0;
	v->flags = flags;
	v->len = n;
	v->full_len = len > 0xffffffffULL ? 0xffffffffU : (__u32)len;
	fill_header(e, h, r, sizeof(*v) + ((n + 7) & ~7U));
	bpf_ringbuf_submit(e, wake);
	return 0;
}

static __always_inline int emit_one_bytes(const struct x86_regs *r, const struct gp_probe_cfg *cfg,
					  const struct hit *h, struct scratch *s)
{
	const struct gp_capture *c = &cfg->caps[0];
	__u64 ptr = 0, len = 0;
	__u8 flags = 0;
	if (read_word_direct(r, &c->loc[0], 8, &ptr) | read_word_direct(r, &c->loc[1], 8, &len))
		flags |= GP_VAL_FAULT;
	len = len_of(len, c->size, c->flags, &flags);
	__u32 n = len > c->max_len ? c->max_len : (__u32)len;
	if (n > GP_MAX_STR)
		n = GP_MAX_STR;
	if (len > n)
		flags |= GP_VAL_TRUNCATED;
	__u32 size = GP_BYTES_REC(8);
	if (n > 8)
		size = GP_BYTES_REC(1U << (64 - __builtin_clzll((__u64)n - 1)));
	__u64 wake = wake_flag(s, size);
	switch (size) {
	case GP_BYTES_REC(8): return emit_bytes(r, h, GP_BYTES_REC(8), wake, ptr, len, n, flags);
	case GP_BYTES_REC(16): return emit_bytes(r, h, GP_BYTES_REC(16), wake, ptr, len, n, flags);
	case GP_BYTES_REC(32): return emit_bytes(r, h, GP_BYTES_REC(32), wake, ptr, len, n, flags);
	case GP_BYTES_REC(64): return emit_bytes(r, h, GP_BYTES_REC(64), wake, ptr, len, n, flags);
	case GP_BYTES_REC(128): return emit_bytes(r, h, GP_BYTES_REC(128), wake, ptr, len, n, flags);
	case GP_BYTES_REC(256): return emit_bytes(r, h, GP_BYTES_REC(256), wake, ptr, len, n, flags);
	case GP_BYTES_REC(512): return emit_bytes(r, h, GP_BYTES_REC(512), wake, ptr, len, n, flags);
	case GP_BYTES_REC(1024): return emit_bytes(r, h, GP_BYTES_REC(1024), wake, ptr, len, n, flags);
	case GP_BYTES_REC(2048): return emit_bytes(r, h, GP_BYTES_REC(2048), wake, ptr, len, n, flags);
	default: return emit_bytes(r, h, GP_BYTES_REC(GP_MAX_STR), wake, ptr, len, n, flags);
	}
}

#endif
