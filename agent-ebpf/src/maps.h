/* The maps of the uprobe object (gprobe.bpf.c and the headers it includes), and the per-CPU
 * scratch buffer records are assembled in; procmaps.h has those it shares with the process
 * hooks (procs.bpf.c). */
#ifndef GPROBE_MAPS_H
#define GPROBE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "filter.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* the agent sets it before load (--ring-buffer-size) */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct gp_probe_cfg);
} probes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct gp_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct gp_rate);
} rates SEC(".maps");

/* What one spec's probes cost one process (ns of traps, estimated: each hit adds its
 * configuration's cost_ns), by budget slot: the attach cookie's high half, given by the
 * agent per (process, spec); slot 0 is none. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GP_MAX_BUDGET_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} budget SEC(".maps");

/* Budget slots whose return probes were taken off for their cost (non-zero: off). Their
 * entries record whole calls without a duration and leave the in-flight stacks alone, and
 * a return still attached while its link is being closed is ignored: it could otherwise
 * pop an entry pushed before the switch for a later call's return. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GP_MAX_BUDGET_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} returns_off SEC(".maps");

/* Calls in flight, by goroutine: LRU so abandoned entries (panics) cannot grow it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct gp_inflight_key);
	__type(value, struct gp_inflight);
} inflight SEC(".maps");

/* Holds an unrecorded call's place on the in-flight stack `in`, so that its return pops it
 * and the calls around it still pair with their own returns. */
static __always_inline void inflight_hold_place(struct gp_inflight *in)
{
	if (in->depth >= GP_MAX_DEPTH) {
		in->overflow++;
		return;
	}
	__u32 d = in->depth & (GP_MAX_DEPTH - 1);
	in->ts[d] = 0;
	in->call_id[d] = GP_CALL_UNRECORDED;
	in->fbits[d] = 0;
	in->depth = d + 1;
}

#include "procmaps.h"

/* Error types of the Go binaries probed: see struct gp_err_type. The agent adds a table's
 * entries when a probe with an error capture is added; a table is named by its contents,
 * so probes of binaries of one Go release share one. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct gp_err_key);
	__type(value, struct gp_err_type);
} errtypes SEC(".maps");

#ifdef GP_NO_COOKIE
/* Kernels before 5.15 (the object without cookies): 5.10's verifier refuses hash maps
 * allocated on update in programs of the kprobe type ("trace type programs with run-time
 * allocated hash maps are unsafe"; 6.1 allows them), so these are preallocated, and
 * left_out, per CPU, smaller (512 slots of 512 bytes a CPU).
 */
#define GP_ALLOC_ON_UPDATE 0
#define GP_LEFT_OUT_MAX 512
#else
#define GP_ALLOC_ON_UPDATE BPF_F_NO_PREALLOC
#define GP_LEFT_OUT_MAX 4096
#endif

/* The `when:` predicates of the configurations that have one (GP_CFG_FILTER), by slot:
 * allocated as the agent adds them (most configurations have none). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, GP_ALLOC_ON_UPDATE);
	__type(key, __u32);
	__type(value, struct gp_filter);
} filters SEC(".maps");

/* What the calls left out by a `when:` took (struct gp_durations), by the slot of the
 * probe's return configuration: added by the agent with the configuration. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, GP_LEFT_OUT_MAX);
	__uint(map_flags, GP_ALLOC_ON_UPDATE);
	__type(key, __u32);
	__type(value, struct gp_durations);
} left_out SEC(".maps");

/* What every record of one hit carries in its header. */
struct hit {
	__u64 now;
	__u64 call_id;
	__u64 duration;
	__u64 pid_tgid;
	__u64 goroutine; /* or the thread id, for configurations that pair by thread */
	__u32 id;
	__u16 kind;
	__u32 fpre;  /* a RETURN's `when:` terms decided at its entry (gp_inflight.fbits) */
	__u32 fbits; /* an ENTRY's `when:` terms decided here, for its return */
	__u32 drop;  /* EMIT_FILTERED, EMIT_THROTTLED or EMIT_UNDECIDED: why it was left out */
	__u32 whole; /* an entry that records the whole call (its returns are off) */
};

struct scratch {
	__u64 seq;
	__u64 unwoken; /* bytes written since the last forced wake-up, on this CPU */
	__u64 nested;  /* this hit's entry found calls of its function in flight on its goroutine */
	__u64 lost;    /* the last record of this CPU could not be written (GP_EV_AFTER_LOSS) */
	__u64 cursor;  /* captures.h: a record offset read back from here is one the verifier
			* no longer tracks, so the paths that computed it converge */
	__u64 regs[16];
	__u64 hdr[2]; /* gomap.h: the string header of the header value found */
	__u64 ovf;    /* gomap.h: the overflow bucket after the one searched */
	__u64 scan[6]; /* gomap.h: a slot's key header, value header and key bytes: kept off the
			* stack, whose frames must add up to 512 bytes before Linux 6.13 */
	__u64 walk[14]; /* gomap.h: the search in progress (struct gp_walk), in map memory
			 * whose contents the verifier does not track: its counters then do
			 * not make each visit of bpf_loop's callback a state of its own */
	/* propagate/spans.h: the header map a propagating entry searched in this hit, and the outcome,
	 * for its record's header capture (0: none) */
	__u64 hdr_map;
	__s64 hdr_res;
	__u64 incomplete; /* captures.h: header maps this hit could not search to the end */
	__u8 grp[512 + 16]; /* gomap.h: a map bucket or group being searched (up to 336 bytes;
			     * offsets masked below 512, a word read past them stays inside) */
	__u64 span[4]; /* propagate/spans.h: the span this hit opened (trace high, low, span, parent) */
	struct gp_span_ctx fresh; /* propagate/spans.h: a goroutine's first, zeroed */
	__u64 eq[8][2]; /* captures.h: the interfaces of an error capture still to read */
	__u32 enq;      /* how many eq holds */
	__u32 estrs;    /* strings of the error capture read */
	struct gp_err_type et; /* captures.h: the layout of the error node being read, in map
				* memory: read at each field, not kept in (spilled) registers */
	__u32 capoff[GP_MAX_CAPTURES]; /* when.h: where each capture's value starts in buf */
	struct gp_fvals fv;            /* when.h: the values of the terms of a `when:` */
	struct gp_filter_state fst;    /* when.h: its evaluation */
	__u32 fout;                    /* when.h: the captures the record keeps (n_out) */
	__u32 wbits;                   /* when.h: the terms' truth gp_when found */
	struct gp_inflight fresh_in;   /* gprobe.bpf.c: a new in-flight stack, being made */
	struct hit h;                  /* gprobe.bpf.c: the hit under way */
	struct gp_inflight_key ik;     /* gprobe.bpf.c: its in-flight key */
	struct gp_out out;             /* propagate/spans.h: the request http_out remembers */
	__u8 buf[GP_SCRATCH];
	/* Never part of a record: lets the verifier accept writes at masked offsets below
	 * GP_SCRATCH of up to one string's bytes (captures.h). */
	__u8 slack[GP_MAX_STR + 64];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* Wake the reader only once about this much data was written on one CPU; it also polls on
 * a short timer, so quiet periods still flush. 0 = let the kernel decide for every record. */
volatile const __u64 wakeup_bytes = 0;

/* gprobe's BPF functions (GP_SUBPROG) are global: the verifier checks each once, on its own
 * (captures.h). 5.10's verifier takes only scalars and the context as a global function's
 * arguments ("Arg#0 type PTR in gp_header_lookup() is not supported yet"; 5.12 takes
 * pointers to memory), and verifying them at each call instead exceeds its million
 * instructions. So the object for kernels before 5.15 (GP_NO_COOKIE) passes them numbers
 * and each looks its memory up again: the scratch map, and a capture by its
 * configuration's slot and index (`ci`: slot << 8 | index). Elsewhere they take pointers,
 * the lookups saved.
 *
 *   GP_S_PARAMS / GP_S_LOAD / GP_S(s): a function of the scratch map `s` (GP_S_GET: `s`
 *   at hand, maybe NULL);
 *   GP_SC_PARAMS / GP_SC_LOAD / GP_SC(s, c, ci): of `s` and capture `c` (`ci` names it);
 *   GP_CI: inside a GP_SC function, its own `ci`, to pass on. */
#define GP_SUBPROG __attribute__((noinline))
/* In a GP_S function: `s` at hand, or 0 returned. */
#define GP_S_LOAD                                                                                  \
	GP_S_GET                                                                                   \
	if (!s)                                                                                    \
		return 0;

static __always_inline struct scratch *gp_scratch(__u32 key)
{
	return bpf_map_lookup_elem(&scratch, &key);
}

static __always_inline const struct gp_probe_cfg *gp_cfg_of(__u32 slot)
{
	return bpf_map_lookup_elem(&probes, &slot);
}


#define GP_CAP_REF(slot, i) (((slot) << 8) | ((i) & (GP_MAX_CAPTURES - 1)))

#ifdef GP_NO_COOKIE
/* The scratch map's key (0) is passed: an argument the callee ignored, clang would not set. */
#define GP_S_PARAMS __u32 s_key_
#define GP_S_GET struct scratch *s = gp_scratch(s_key_);
#define GP_S(s) 0
#define GP_SC_PARAMS __u32 ci_
#define GP_SC_LOAD                                                                                 \
	struct scratch *s = gp_scratch(0);                                                         \
	const struct gp_probe_cfg *cfg_ = gp_cfg_of(ci_ >> 8);                                     \
	if (!s || !cfg_)                                                                           \
		return 0;                                                                          \
	/* Indexed only once checked: clang would compute it before, refused on a maybe-NULL */ \
	asm volatile("" : "+r"(cfg_));                                                             \
	const struct gp_capture *c = &cfg_->caps[ci_ & (GP_MAX_CAPTURES - 1)];
#define GP_SC(s, c, ci) (ci)
#define GP_CI ci_
#else
#define GP_S_PARAMS struct scratch *s
#define GP_S_GET
#define GP_S(s) (s)
#define GP_SC_PARAMS struct scratch *s, const struct gp_capture *c
#define GP_SC_LOAD                                                                                 \
	if (!s || !c)                                                                              \
		return 0;
#define GP_SC(s, c, ci) (s), (c)
#define GP_CI 0
#endif

#endif
