/* gprobe_propagate: writes the traceparent of a request made inside a propagating span
 * (remembered for its goroutine by http_out, and by the connection it was handed to by
 * http_conn, spans.h). A program of its own because it writes to the traced process's
 * memory (bpf_probe_write_user): loaded only when a spec asks for propagation, so the
 * kernel's warning about that helper is printed only then, and a kernel that forbids the
 * helper (lockdown) refuses this program alone.
 * GP_PROBE_HTTP_WRITE at net/http.Header.writeSubset(h, w io.Writer, ...), where the
 * connection's writer goroutine writes the request's headers: when w is the writer of a
 * connection a request was handed to, that request's round trip is still in progress and
 * h is its header map, "Traceparent: 00-<trace>-<span>-01\r\n" (-00 for a trace not
 * sampled) is written into w's buffer (w must be the *bufio.Writer the transport writes
 * through, with room), and its count of buffered bytes moved past it. Whatever else w
 * is, nothing is written to it.
 * HTTP/1 only: HTTP/2 encodes headers elsewhere.
 * Counts (gp_stats): emitted = headers written; lost = not written (a stale hand-off, no
 * room, another writer type). The program comes twice: with the writes, and without them
 * for `--propagate-dry-run` (propagate_write.h). */
#ifndef GPROBE_PROPAGATE_H
#define GPROBE_PROPAGATE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"
#include "propagate_write.h"
#include "oncpu.h"

static __attribute__((noinline)) int http_write(struct x86_regs *r, const struct gp_probe_cfg *cfg,
						struct gp_stats *st)
{
	return http_write_line(r, cfg, st, 1);
}

static __attribute__((noinline)) int http_write_dry(struct x86_regs *r,
						    const struct gp_probe_cfg *cfg,
						    struct gp_stats *st)
{
	return http_write_line(r, cfg, st, 0);
}

static __noinline int propagate_hit(struct x86_regs *r, const int write)
{
	__u32 id = GP_CFG_SLOT((__u32)gp_cookie(r, GP_HIT_SITE()));
	struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &id);
	if (!cfg)
		return 0;
	struct gp_stats *st = bpf_map_lookup_elem(&stats, &id);
	if (!st)
		return 0;
	st->hits++;
	if (cfg->kind == GP_PROBE_HTTP_WRITE)
		return write ? http_write(r, cfg, st) : http_write_dry(r, cfg, st);
	return 0;
}

SEC("uprobe")
int gprobe_propagate(struct x86_regs *r)
{
	/* One run at a time on each CPU: see oncpu.h. */
	GP_ONE_PER_CPU(r, propagate_hit(r, 1));
}

SEC("uprobe")
int gprobe_propagate_dry(struct x86_regs *r)
{
	/* One run at a time on each CPU: see oncpu.h. */
	GP_ONE_PER_CPU(r, propagate_hit(r, 0));
}

#endif
