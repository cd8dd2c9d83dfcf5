/* gprobe_propagate: writes the traceparent of a request made inside a propagating span
 * (remembered for its goroutine by http_out, and by the connection it was handed to by
 * http_conn, spans.h). A program of its own because it writes to the traced process's
 * memory (bpf_probe_write_user): loaded only when a spec asks for propagation, so the
 * kernel's warning about that helper is printed only then, and a kernel that forbids the
 * helper (lockdown) refuses this program alone.
 * GP_PROBE_HTTP_WRITE at net/http.Header.writeSubset(h, w io.Writer, ...), where the
 * connection's writer goroutine writes the request's headers: when w is the writer of a
 * connection a request was handed to, that request's round trip is still in progress and
 * h is its header map, "Traceparent: 00-<trace>-<span>-01\r\n" is written into w's
 * buffer (w must be the *bufio.Writer the transport writes through, with room), and its
 * count of buffered bytes moved past it. Whatever else w is, nothing is written to it.
 * HTTP/1 only: HTTP/2 encodes headers elsewhere.
 * Counts (gp_stats): emitted = headers written; lost = not written (a stale hand-off, no
 * room, another writer type). The program is built twice (propagate_write.h): with the
 * writes, and without them for `--propagate-dry-run`. */

static __always_inline void hex16(char *dst, __u64 v)
{
#pragma clang loop unroll(full)
	for (int i = 15; i >= 0; i--) {
		__u8 d = v & 15;
		dst[i] = d < 10 ? '0' + d : 'a' + d - 10;
		v >>= 4;
	}
}

#define GP_WRITE 1
#define GP_WRITE_FN http_write
#define GP_PROPAGATE_PROG gprobe_propagate
#include "propagate_write.h"
#undef GP_WRITE
#undef GP_WRITE_FN
#undef GP_PROPAGATE_PROG

#define GP_WRITE 0
#define GP_WRITE_FN http_write_dry
#define GP_PROPAGATE_PROG gprobe_propagate_dry
#include "propagate_write.h"
#undef GP_WRITE
#undef GP_WRITE_FN
#undef GP_PROPAGATE_PROG
