/* Spans of propagating probes (GP_CFG_PROPAGATE), kept per goroutine here because a
 * request made inside one must carry its ids at once, before the agent has read a record:
 * the entry makes the span's id (and a new trace's), records them (GP_CAP_SPAN) and
 * pushes the span; its return pops it. The nesting of all other spans is the agent's. */
#ifndef GPROBE_SPANS_H
#define GPROBE_SPANS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"
#include "captures.h"

/* Goroutines with propagating spans open; LRU: one whose returns never come (a panic)
 * cannot grow it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gp_span_key);
	__type(value, struct gp_span_ctx);
} spanctx SEC(".maps");

/* runtime.newproc1 in progress, by thread (it runs on the system stack, entry and return
 * on one thread): the span the new goroutine will start inside. */
struct gp_spawn {
	__u64 g;
	__u64 span;
	__u64 trace[2];
	__u32 unsampled; /* the trace is not sampled */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct gp_spawn);
} spawning SEC(".maps");

/* The innermost propagating span open for goroutine `k`: its own, else, for a goroutine
 * started inside one, that span while it is still open in its goroutine. 1 when there is
 * one (*trace, *span; *unsampled: its trace is not sampled). */
static __always_inline int span_current(struct gp_span_ctx *sc, __u32 tgid, __u64 *trace,
					__u64 *span, __u32 *unsampled)
{
	if (!sc)
		return 0;
	if (sc->depth > 0 && sc->depth <= GP_MAX_DEPTH) {
		trace[0] = sc->trace[0];
		trace[1] = sc->trace[1];
		*span = sc->span[(sc->depth - 1) & (GP_MAX_DEPTH - 1)];
		*unsampled = sc->flags & GP_SPAN_UNSAMPLED;
		return 1;
	}
	if (!sc->parent_g)
		return 0;
	struct gp_span_key pk = { .goroutine = sc->parent_g, .tgid = tgid };
	struct gp_span_ctx *p = bpf_map_lookup_elem(&spanctx, &pk);
	if (!p)
		return 0;
	__u32 depth = p->depth;
	__u64 want = sc->parent_span;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < GP_MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		if (p->span[i & (GP_MAX_DEPTH - 1)] == want) {
			trace[0] = sc->parent_trace[0];
			trace[1] = sc->parent_trace[1];
			*span = want;
			*unsampled = !!(sc->flags & GP_SPAN_PARENT_UNSAMPLED);
			return 1;
		}
	}
	return 0;
}

/* newproc1's entry: the span the starting goroutine (callergp) is in, noted by thread. */
static __always_inline void spawn_enter(const struct x86_regs *r, __u64 pid_tgid)
{
	struct gp_span_key k = { .goroutine = r->bx, .tgid = pid_tgid >> 32 };
	struct gp_span_ctx *sc = bpf_map_lookup_elem(&spanctx, &k);
	struct gp_spawn sp = {};
	if (span_current(sc, k.tgid, sp.trace, &sp.span, &sp.unsampled)) {
		/* A grandchild inherits what its parent inherited: the same span. */
		sp.g = sc->depth > 0 ? k.goroutine : sc->parent_g;
		bpf_map_update_elem(&spawning, &pid_tgid, &sp, BPF_ANY);
	} else {
		bpf_map_delete_elem(&spawning, &pid_tgid);
	}
}

static __always_inline __u64 rand64(void)
{
	__u64 v = ((__u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32();
	return v ? v : 1;
}

/* The n (at most 16) lower-case hex digits at p; sets *bad on any other character. */
static __always_inline __u64 hexn(const char *p, __u32 n, __u8 *bad)
{
	__u64 v = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < 16; i++) {
		if (i >= n)
			break;
		__u8 ch = p[i];
		__u8 dig = (__u8)(ch - '0') < 10, low = (__u8)(ch - 'a') < 6;
		*bad |= !(dig | low);
		v = (v << 4) | (dig ? ch - '0' : ch - 'a' + 10);
	}
	return v;
}

/* The caller's span from the W3C traceparent (version 00) of the request this hit's
 * handler serves, read by `c`, the configuration's GP_CAP_HEADER capture (caps[aux - 1]):
 * s->span[0..1] (trace) and s->span[3] (parent). 1 when there is a valid one whose
 * sampled flag is set, 3 when it is clear; 0 when there is none. */
GP_SUBPROG int gp_remote_ctx(GP_SC_PARAMS)
{
	GP_SC_LOAD
	if (c->kind != GP_CAP_HEADER)
		return 0;
	__u64 w[2];
	__u32 left = 0;
	if (cap_words(s->regs, c, w, &left))
		return 0;
	/* As W3C trace context reads it (and the agent's parser): version 00 is exactly 55
	 * bytes; a later version may be longer, with a '-' after the flags; version ff is
	 * invalid. */
	int found = gp_header_lookup(GP_S(s), w[0], c->size);
	/* The record's header capture, next in this hit, takes this outcome (captures.h). */
	s->hdr_map = w[0];
	s->hdr_res = found;
	if (found != 1 || s->hdr[1] < 55)
		return 0;
	char *t = (char *)s->buf; /* free: the record is assembled after this */
	/* The byte after a longer one's flags; only the header's own bytes are read. */
	__u32 n = s->hdr[1] > 55 ? 56 : 55;
	if (bpf_probe_read_user(t, n, (void *)s->hdr[0]))
		return 0;
	if (t[2] != '-' || t[35] != '-' || t[52] != '-')
		return 0;
	__u8 bad = 0;
	__u64 version = hexn(t, 2, &bad);
	__u64 hi = hexn(t + 3, 16, &bad), lo = hexn(t + 19, 16, &bad);
	__u64 span = hexn(t + 36, 16, &bad);
	__u64 flags = hexn(t + 53, 2, &bad);
	if (bad || !(hi | lo) || !span || version == 0xff)
		return 0;
	if ((version == 0 && s->hdr[1] != 55) || (s->hdr[1] > 55 && t[55] != '-'))
		return 0;
	s->span[0] = hi;
	s->span[1] = lo;
	s->span[3] = span;
	return (flags & 1) ? 1 : 3;
}

/* A propagating probe's entry: its span, in s->span, and pushed on its goroutine's. Its
 * trace and parent are those of the innermost propagating span open on the goroutine;
 * else the caller's (an incoming traceparent); else a new trace. */
static __always_inline void span_enter(const struct x86_regs *r, const struct gp_probe_cfg *cfg,
				       struct scratch *s, __u32 tgid, __u64 g, __u64 call_id)
{
	struct gp_span_key k = { .goroutine = g, .tgid = tgid };
	struct gp_span_ctx *sc = bpf_map_lookup_elem(&spanctx, &k);
	__u32 unsampled = 0;
	if (span_current(sc, tgid, s->span, &s->span[3], &unsampled)) {
		if (sc->depth == 0 || sc->depth > GP_MAX_DEPTH) {
			/* The goroutine's first: in the span it was started inside. */
			sc->depth = 0;
			sc->trace[0] = s->span[0];
			sc->trace[1] = s->span[1];
			sc->flags = (sc->flags & ~GP_SPAN_UNSAMPLED) | unsampled;
		}
	} else {
		save_regs(s->regs, r);
		int remote = 0;
		if (cfg->aux && cfg->aux <= GP_MAX_CAPTURES) {
			__u32 ai = (cfg->aux - 1) & (GP_MAX_CAPTURES - 1);
			/* s->h: the hit under way (gprobe.bpf.c), whose configuration this is. */
			remote = gp_remote_ctx(
				GP_SC(s, &cfg->caps[ai], GP_CAP_REF(GP_CFG_SLOT(s->h.id), ai)));
		}
		if (remote) {
			/* The caller decided. */
			unsampled = remote == 3;
		} else {
			s->span[0] = rand64();
			s->span[1] = rand64();
			s->span[3] = 0;
			/* A new trace: sampled as the agent's reader decides for its calls. */
			unsampled = cfg->sample_bound && (s->span[1] >> 1) >= cfg->sample_bound;
		}
		if (!sc) {
			s->fresh.depth = 0;
			s->fresh.flags = 0;
			s->fresh.parent_g = 0;
			if (bpf_map_update_elem(&spanctx, &k, &s->fresh, BPF_NOEXIST) &&
			    bpf_map_update_elem(&spanctx, &k, &s->fresh, BPF_ANY))
				goto out;
			sc = bpf_map_lookup_elem(&spanctx, &k);
			if (!sc)
				goto out;
		}
		sc->depth = 0;
		sc->trace[0] = s->span[0];
		sc->trace[1] = s->span[1];
		sc->flags = (sc->flags & ~GP_SPAN_UNSAMPLED) | unsampled;
	}
	if (sc->depth < GP_MAX_DEPTH) {
		__u32 d = sc->depth & (GP_MAX_DEPTH - 1);
		s->span[2] = rand64();
		sc->span[d] = s->span[2];
		sc->call_id[d] = call_id;
		sc->depth = d + 1;
		return;
	}
out:
	s->span[2] = rand64();
}

/* newproc1's return: goroutine g was started. Its g may be a dead goroutine's, whose
 * spans are not its own; it is in the span its starter was in, if any (spawn_enter). */
static __always_inline void span_spawned(struct scratch *s, __u64 pid_tgid, __u64 g)
{
	struct gp_span_key k = { .goroutine = g, .tgid = pid_tgid >> 32 };
	struct gp_spawn *sp = bpf_map_lookup_elem(&spawning, &pid_tgid);
	if (!sp) {
		bpf_map_delete_elem(&spanctx, &k);
		return;
	}
	s->fresh.depth = 0;
	s->fresh.flags = sp->unsampled ? GP_SPAN_PARENT_UNSAMPLED : 0;
	s->fresh.parent_g = sp->g;
	s->fresh.parent_span = sp->span;
	s->fresh.parent_trace[0] = sp->trace[0];
	s->fresh.parent_trace[1] = sp->trace[1];
	bpf_map_delete_elem(&spawning, &pid_tgid);
	bpf_map_update_elem(&spanctx, &k, &s->fresh, BPF_ANY);
}

/* A propagating probe's return: its span and any left open above it (a panic unwound
 * them) are popped. */
static __always_inline void span_exit(__u32 tgid, __u64 g, __u64 call_id)
{
	struct gp_span_key k = { .goroutine = g, .tgid = tgid };
	struct gp_span_ctx *sc = bpf_map_lookup_elem(&spanctx, &k);
	if (!sc)
		return;
	__u32 depth = sc->depth;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < GP_MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		__u32 d = (depth - 1 - i) & (GP_MAX_DEPTH - 1);
		if (sc->call_id[d] == call_id) {
			sc->depth = d;
			break;
		}
	}
	if (sc->depth == 0 && !sc->parent_g)
		bpf_map_delete_elem(&spanctx, &k);
}

/* Outgoing requests made inside propagating spans, by the goroutine making each
 * (GP_PROBE_HTTP_OUT), while its round trip is in progress: a goroutine makes one request
 * at a time, whatever header map it shares with others. LRU: a round trip whose return
 * never comes (a panic) cannot grow it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gp_span_key);
	__type(value, struct gp_out);
} requests SEC(".maps");

/* The same requests by the connection writer each was handed to (GP_PROBE_HTTP_CONN):
 * value, the goroutine. An HTTP/1 connection sends one request at a time. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gp_out_key);
	__type(value, __u64);
} conns SEC(".maps");

#define TP_LINE 70 /* "Traceparent: " 13 + 55 + "\r\n" 2 */

/* GP_PROBE_HTTP_OUT at net/http.(*Transport).roundTrip(t, req), on the goroutine that
 * makes the request: if a propagating span is open on it, and the request has no
 * Traceparent of its own, the span's ids are remembered for the goroutine until the round
 * trip returns. Counts (gp_stats): emitted = requests remembered; throttled = requests
 * that had a traceparent of their own; incomplete = requests whose header map could not
 * be searched to the end (sent as they were: they may have had one); lost = an unreadable
 * request. */
static __always_inline int http_out(struct x86_regs *r, const struct gp_probe_cfg *cfg,
				    struct gp_stats *st, struct gp_span_key *k)
{
	/* What an earlier round trip of this goroutine left (its return unseen: a panic) is
	 * not this request's. */
	bpf_map_delete_elem(&requests, k);
	struct gp_span_ctx *sc = bpf_map_lookup_elem(&spanctx, k);
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	/* In the scratch map, not on the stack: see struct scratch's out. */
	struct gp_out *out = &s->out;
	*out = (struct gp_out){};
	__u32 unsampled = 0;
	if (!span_current(sc, k->tgid, out->trace, &out->span, &unsampled))
		return 0; /* no propagating span open: nothing to carry */
	out->flags = unsampled ? GP_SPAN_UNSAMPLED : 0;
	const struct gp_capture *c = &cfg->caps[0];
	if (c->kind != GP_CAP_HEADER)
		return 0;
	save_regs(s->regs, r);
	__u64 w[2];
	__u32 left = 0;
	if (cap_words(s->regs, c, w, &left) || !w[0]) {
		st->lost++;
		return 0;
	}
	int found = gp_header_lookup(GP_S(s), w[0], c->size);
	if (found != 0) {
		if (found == 1)
			st->throttled++; /* its own traceparent */
		else
			st->incomplete++;
		return 0;
	}
	out->map = w[0];
	if (bpf_map_update_elem(&requests, k, out, BPF_ANY)) {
		st->lost++;
		return 0;
	}
	st->emitted++;
	return 0;
}

/* The connection writer goroutine `k` handed its request to, if its entry still says so. */
static __always_inline void forget_conn(struct gp_span_key *k, __u64 writer)
{
	struct gp_out_key ck = { .writer = writer, .tgid = k->tgid };
	__u64 *g = bpf_map_lookup_elem(&conns, &ck);
	if (g && *g == k->goroutine)
		bpf_map_delete_elem(&conns, &ck);
}

/* GP_PROBE_HTTP_CONN at net/http.(*persistConn).roundTrip(pc, treq), on the same
 * goroutine: its request goes out on pc, written through pc.bw (caps[0]). A retry on
 * another connection moves it there. Counts: emitted = requests handed to a connection;
 * lost = pc.bw unreadable. */
static __always_inline int http_conn(struct x86_regs *r, const struct gp_probe_cfg *cfg,
				     struct gp_stats *st, struct gp_span_key *k)
{
	struct gp_out *req = bpf_map_lookup_elem(&requests, k);
	if (!req)
		return 0; /* not a request made in a propagating span */
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	const struct gp_capture *c = &cfg->caps[0];
	if (c->kind != GP_CAP_WORD)
		return 0;
	save_regs(s->regs, r);
	__u64 w[2];
	__u32 left = 0;
	if (cap_words(s->regs, c, w, &left) || !w[0]) {
		st->lost++;
		return 0;
	}
	if (req->writer && req->writer != w[0])
		forget_conn(k, req->writer);
	struct gp_out_key ck = { .writer = w[0], .tgid = k->tgid };
	if (bpf_map_update_elem(&conns, &ck, &k->goroutine, BPF_ANY)) {
		req->writer = 0;
		st->lost++;
		return 0;
	}
	req->writer = w[0];
	req->ts = bpf_ktime_get_ns();
	st->emitted++;
	return 0;
}

/* GP_PROBE_HTTP_DONE at a RET of net/http.(*Transport).roundTrip: the goroutine's request
 * is answered (or failed); nothing of it is written any more. */
static __always_inline int http_done(struct gp_span_key *k)
{
	struct gp_out *req = bpf_map_lookup_elem(&requests, k);
	if (!req)
		return 0;
	if (req->writer)
		forget_conn(k, req->writer);
	bpf_map_delete_elem(&requests, k);
	return 0;
}

/* gprobe's own probes of net/http's client (GP_PROBE_HTTP_OUT, _CONN, _DONE), on the
 * goroutine that makes the request. */
static __attribute__((noinline)) int http_request(struct x86_regs *r,
						  const struct gp_probe_cfg *cfg,
						  struct gp_stats *st)
{
	struct gp_span_key k = { .goroutine = r->r14,
				 .tgid = bpf_get_current_pid_tgid() >> 32 };
	if (cfg->kind == GP_PROBE_HTTP_OUT)
		return http_out(r, cfg, st, &k);
	if (cfg->kind == GP_PROBE_HTTP_CONN)
		return http_conn(r, cfg, st, &k);
	return http_done(&k);
}

#endif
