/* The header writer of propagate.h: all of what gprobe_propagate does at a header write.
 * With `write` 0 it is gprobe_propagate_dry's, the same without the two writes
 * (`--propagate-dry-run`: a kernel that forbids the writes still checks everything else,
 * and counts the headers that would have been written). Always inlined with a constant
 * `write`: the dry program has no bpf_probe_write_user call at all. */
#ifndef GPROBE_PROPAGATE_WRITE_H
#define GPROBE_PROPAGATE_WRITE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"
#include "spans.h"

/* A loop, not unrolled: unrolled, the compiler made all 64 digits before storing them and
 * spilled them to a 480-byte frame, over the 512 bytes of stack a program has with its
 * callers before Linux 6.13. */
static __always_inline void hex16(char *dst, __u64 v)
{
#pragma clang loop unroll(disable)
	for (int i = 15; i >= 0; i--) {
		__u8 d = v & 15;
		dst[i] = d < 10 ? '0' + d : 'a' + d - 10;
		v >>= 4;
	}
}

static __always_inline int http_write_line(struct x86_regs *r, const struct gp_probe_cfg *cfg,
					   struct gp_stats *st, const int write)
{
	/* writeSubset(h Header, w io.Writer, ...): h in RAX, w's itab and data in RBX, RCX. The
	 * data is looked up as a connection's writer a request was handed to (spans.h). */
	__u64 h = r->ax, tab = r->bx, data = r->cx, ty = 0;
	struct gp_out_key ck = { .writer = data, .tgid = bpf_get_current_pid_tgid() >> 32 };
	if (!h || !data)
		return 0;
	__u64 *g = bpf_map_lookup_elem(&conns, &ck);
	if (!g)
		return 0; /* not a connection sending a request made in a propagating span */
	struct gp_span_key k = { .goroutine = *g, .tgid = ck.tgid };
	struct gp_out *req = bpf_map_lookup_elem(&requests, &k);
	if (!req || req->writer != data) {
		/* Its round trip returned, or moved on: nothing of it is written here. */
		bpf_map_delete_elem(&conns, &ck);
		return 0;
	}
	if (req->map != h)
		return 0; /* another header of the request (the transport's extra ones, trailers) */
	struct gp_out out = *req;
	/* Written once: the request's headers are being written now. */
	req->writer = 0;
	bpf_map_delete_elem(&conns, &ck);
	if (bpf_ktime_get_ns() - out.ts > GP_OUT_MAX_AGE_NS) {
		st->lost++;
		return 0;
	}
	if (!tab || bpf_probe_read_user(&ty, 8, (void *)(tab + 8)) || ty != cfg->aux) {
		st->lost++; /* not the *bufio.Writer of a connection */
		return 0;
	}
	/* bufio.Writer {err error; buf []byte; n int; wr io.Writer} */
	__u64 bw[6];
	if (bpf_probe_read_user(bw, sizeof(bw), (void *)data) || bw[0]) {
		st->lost++;
		return 0;
	}
	__u64 buf = bw[2], len = bw[3], n = bw[5];
	if (!buf || n > len || len - n < TP_LINE) {
		st->lost++; /* no room: it would have to flush */
		return 0;
	}
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	char *line = (char *)s->buf;
	__builtin_memcpy(line, "Traceparent: 00-", 16);
	hex16(line + 16, out.trace[0]);
	hex16(line + 32, out.trace[1]);
	line[48] = '-';
	hex16(line + 49, out.span);
	line[65] = '-';
	line[66] = '0';
	line[67] = (out.flags & GP_SPAN_UNSAMPLED) ? '0' : '1';
	line[68] = '\r';
	line[69] = '\n';
	if (write) {
		if (bpf_probe_write_user((void *)(buf + n), line, TP_LINE)) {
			st->lost++;
			return 0;
		}
		n += TP_LINE;
		if (bpf_probe_write_user((void *)(data + 40), &n, 8)) {
			/* The bytes lie past the count: the writer overwrites them, as if never
			 * written. */
			st->lost++;
			return 0;
		}
	} else {
		/* The dry run: everything but the write. The line is made, the request goes out
		 * as it was; counted as if written. */
		if (line[65] != '-')
			return 0;
	}
	st->emitted++;
	if (out.flags & GP_SPAN_UNSAMPLED)
		st->filtered++; /* written as not sampled */
	return 0;
}

#endif
