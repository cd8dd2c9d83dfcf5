/* gprobe event ABI: the one definition of what the BPF programs and the agent exchange.
 * agent/src/abi/mod.rs mirrors these structs and asserts their sizes and offsets at
 * compile time; change both together. */
#ifndef GPROBE_H
#define GPROBE_H

#ifdef __BPF__
#include <linux/types.h>
#else
#include <stdint.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int32_t __s32;
#endif

#define GP_MAX_CAPTURES 8
#define GP_MAX_STR 4096       /* cap on limits.maxStringBytes */
#define GP_MAX_DEPTH 16       /* nested (recursive) calls paired per goroutine and function */
#define GP_MAX_PROBES 16384   /* probe configurations (entry and return count separately) */
/* A configuration's handle, in the low half of an attach cookie and in each record's
 * probe_id: its slot in the `probes` array (low 16 bits) and the generation of that slot,
 * which the agent bumps each time it gives the slot to another configuration (high 16).
 * A record then names the configuration that wrote it, not whichever holds the slot when
 * the record is read. */
#define GP_CFG_SLOT_BITS 16
#define GP_CFG_SLOT(handle) ((handle) & ((1U << GP_CFG_SLOT_BITS) - 1))
_Static_assert(GP_MAX_PROBES <= (1U << GP_CFG_SLOT_BITS), "a slot fits a handle's low bits");
#define GP_MAX_BUDGET_SLOTS 16384 /* (process, spec) pairs whose probes' cost is summed */
#define GP_SCRATCH 16384      /* per-CPU buffer an event is assembled in (per-CPU values max 32 KiB) */
#define GP_DATA_MASK 0x1fff   /* every capture starts below 8 KiB; with GP_MAX_STR it ends below GP_SCRATCH */
#define GP_PATH_MAX 256       /* bytes of the executed path carried by an exec event */
#define GP_MAX_HOPS 8         /* pointers a capture path follows */
#define GP_MAX_ELEMS 16       /* elements kept of a captured slice */
#define GP_MAX_ELEM_STR 256   /* bytes kept of each string of a []string or []any */
#define GP_COMM_LEN 16

/* How a probe configuration behaves when its uprobe fires. */
enum gp_probe_kind {
	GP_PROBE_CALL = 0,   /* function entry, no return tracking: one CALL event */
	GP_PROBE_ENTRY = 1,  /* entry of a latency probe: ENTRY event, remembered for the return */
	GP_PROBE_RETURN = 2, /* a RET of a latency probe: RETURN event paired to its entry */
	GP_PROBE_LOADER = 3, /* the dynamic loader's _dl_debug_state: the process is held and a
			      * GP_EV_LOADER event tells the agent to look at its libraries */
	/* In processes with a `propagate` probe (propagate/spans.h, propagate/propagate.h): */
	GP_PROBE_HTTP_OUT = 4,   /* net/http.(*Transport).roundTrip's entry: a request made in a
				  * propagating span, remembered for its goroutine until the round
				  * trip returns; caps[0], a GP_CAP_HEADER, finds its header map */
	GP_PROBE_HTTP_WRITE = 5, /* program gprobe_propagate: net/http.Header.writeSubset: writes
				  * the traceparent of the request handed to that connection's
				  * *bufio.Writer (type descriptor: aux) into it */
	GP_PROBE_HTTP_CONN = 6,  /* net/http.(*persistConn).roundTrip's entry: the connection the
				  * goroutine's request goes out on; caps[0], a GP_CAP_WORD at the
				  * path pc.bw, its *bufio.Writer */
	GP_PROBE_HTTP_DONE = 7,  /* a RET of net/http.(*Transport).roundTrip: the goroutine's
				  * request is forgotten */
	GP_PROBE_FREED = 8, /* a freed configuration: its links are detached in the background
			     * and may still fire meanwhile; they must write nothing (zeroed, it
			     * read as a CALL probe without captures: records with no values) */
};

enum gp_event_kind {
	GP_EV_CALL = 0,
	GP_EV_ENTRY = 1,
	GP_EV_RETURN = 2,
	GP_EV_EXEC = 3,
	GP_EV_EXIT = 4,
	GP_EV_LOADER = 5, /* proc_events: a process changed its list of libraries */
	GP_EV_FORK = 6,   /* proc_events: a process forked a new one (pid: the child) */
	/* A flag in gp_event.kind: a record of this CPU could not be written just before this
	 * one (the ring was full), so a RETURN may be missing: the reader's nesting restarts. */
	GP_EV_AFTER_LOSS = 0x8000,
	/* A flag in a RETURN's kind: the call failed its probe's `when:` at the return (a
	 * result or its duration): the reader drops its entry; the record has no values. */
	GP_EV_FILTERED = 0x4000,
};

/* What a capture reads, and the bytes of its value in a record. agent/src/abi/mod.rs
 * (GpCapture) documents each kind exactly: where the words are (loc[0]/loc[1], or at the
 * end of a path with GP_CAPF_PATH), what is read after them, and the record's layout. */
enum gp_cap_kind {
	GP_CAP_WORD = 1,   /* up to 8 bytes from loc[0] */
	GP_CAP_BYTES = 2,  /* string / []byte: pointer at loc[0], length at loc[1] (of `size`
			    * bytes, 0 = 8) */
	GP_CAP_CSTR = 3,   /* NUL-terminated string at the pointer at loc[0], max_len bytes at most */
	GP_CAP_IFACE = 4,  /* interface: (type or itab, data) words; the type, data, and with
			    * GP_CAPF_DATA_STR the string header at data and its bytes */
	GP_CAP_SLICE = 5,  /* slice of scalars: (ptr, len) words; max_elems elements of size bytes */
	GP_CAP_STRS = 6,   /* []string: (ptr, len) words; max_elems strings of max_len bytes */
	GP_CAP_IFACES = 7, /* []any, []error: (ptr, len) words; max_elems interfaces */
	GP_CAP_HEADER = 8, /* http.Header: the map pointer word; the first value of its
			    * "Traceparent", max_len bytes; `size` is the map layout (GP_MAP_*) */
	GP_CAP_SPAN = 9,   /* no location: the span the hit opened (GP_CFG_PROPAGATE), 32
			    * bytes: trace id (high, low), span id, parent span id (0: none) */
	GP_CAP_ERROR = 10, /* error: (itab, data) words; the error and the errors, addresses
			    * and strings it holds, as the layouts of its table say (errtypes,
			    * `table`): nodes of struct gp_err_type's fields (captures.h) */
};

/* An error capture (GP_CAP_ERROR) reads at most GP_ERR_NODES interfaces (the error and
 * what it wraps, breadth first), GP_ERR_FIELDS fields of each, and the bytes of at most
 * GP_ERR_STRS of their strings (each up to min(max_len, GP_MAX_ELEM_STR)). */
#define GP_ERR_NODES 6
#define GP_ERR_FIELDS 5
#define GP_ERR_STRS 10

/* What a field of an error type is (gp_err_type.kind). */
#define GP_EF_STR 1   /* a string or []byte: its (ptr, len) at data + off, and its bytes */
#define GP_EF_IFACE 2 /* a non-empty interface at data + off: read as a node of its own */
#define GP_EF_WORD 3  /* the 8 bytes at data + off */

/* The layout of one dynamic type of an error table: map errtypes, keyed by the table (a
 * capture's `table`) and the type's hash (runtime._type.hash, copied into every itab at
 * +16: the same in every process, whatever its load address). */
struct gp_err_key {
	__u32 table;
	__u32 hash;
};

struct gp_err_type {
	__u8 n; /* fields */
	__u8 kind[GP_ERR_FIELDS];
	__u8 off[GP_ERR_FIELDS];
	__u8 _pad[5];
};

/* Go map layouts (GP_CAP_HEADER's size): gomap.h. */
#define GP_MAP_HMAP 1
#define GP_MAP_SWISS 2
#define GP_MAP_SWISS_SPLIT 3

/* Flags of a capture. */
#define GP_CAPF_PATH 1     /* the words are in memory at the end of the path loc[0], hops, off */
#define GP_CAPF_ITAB 2     /* IFACE(S): the first word is an itab: record *(itab + 8), the type */
#define GP_CAPF_DATA_STR 4 /* IFACE(S): also read the string header at data and its bytes */
#define GP_CAPF_LEN_SIGNED 8 /* BYTES: the length (`size` bytes) is a signed integer (C int,
			      * ssize_t; Go's int): a negative one reads nothing (GP_VAL_INVALID) */

enum gp_loc_kind {
	GP_LOC_NONE = 0,
	GP_LOC_REG = 1,   /* a general-purpose register, by its x86 encoding (RAX=0 ... R15=15) */
	GP_LOC_MEM = 2,   /* the `size` bytes at register + off (Go stack arguments: RSP + off;
			   * USDT memory operands); a location of a GP_CAP_BYTES/CSTR: 8 bytes */
	GP_LOC_CONST = 3, /* the constant off */
};

struct gp_loc {
	__u8 kind;
	__u8 reg;
	__u16 _pad;
	__s32 off;
};

struct gp_capture {
	__u8 kind;
	__u8 size;      /* GP_CAP_WORD: bytes read (1..8); GP_CAP_SLICE: bytes per element */
	__u16 max_len;  /* bytes kept of each string (BYTES, STRS, DATA_STR) */
	__u8 flags;     /* GP_CAPF_* */
	__u8 n_hops;    /* GP_CAPF_PATH: pointers followed (0..GP_MAX_HOPS) */
	__u8 max_elems; /* SLICE, STRS, IFACES: elements kept (1..GP_MAX_ELEMS) */
	__u8 _pad;
	struct gp_loc loc[2];
	/* GP_CAPF_PATH: v = word(loc[0]); for each hop: nil check, v = *(u64 *)(v + hops[i]);
	 * nil check; the value is at v + off. */
	__s32 hops[GP_MAX_HOPS];
	__s32 off;
	__u32 table; /* GP_CAP_ERROR: the table of its error types (errtypes) */
};

struct gp_probe_cfg {
	__u32 func_id;    /* pairs the entry and return configurations of one probe: the
			   * handle of its first entry configuration, unique over time */
	__u8 kind;        /* enum gp_probe_kind */
	__u8 n_captures;
	__u8 flags;       /* GP_CFG_* */
	__u8 jcc;         /* entry site on Go's stack-check jump: 1 + its condition (the Jcc
			   * opcode's low nibble); a hit where the jump is taken is no call (the
			   * function restarts after morestack). 0: any other site */
	__u32 rate_limit; /* calls per second admitted at entry; 0 = unlimited */
	__u32 cost_ns;    /* what a hit here costs the process (its site's class, measured at
			   * start): added to the process's budget slot (the cookie's high half) */
	__u64 aux;        /* GP_PROBE_HTTP_WRITE: the *bufio.Writer type descriptor's address;
			   * GP_CFG_PROPAGATE entry: 1 + the index of its GP_CAP_HEADER, or 0 */
	__u64 sample_bound; /* GP_CFG_PROPAGATE entry with `sample:`: a trace it starts is
			     * sampled when the low 64 bits of its id, shifted right once, are
			     * below this (OpenTelemetry's TraceIdRatioBased); 0: every trace */
	struct gp_capture caps[GP_MAX_CAPTURES];
};

/* Flags of a probe configuration, set by the agent. */
#define GP_CFG_WORDS 1     /* every capture is a GP_CAP_WORD: each record is 48 + 16 * n_captures
			    * bytes, written in place in the ring buffer */
#define GP_CFG_ONE_BYTES 2 /* one capture, a GP_CAP_BYTES: written in place in a record of one of
			    * ten sizes (see gprobe.bpf.c), data_len telling what it holds */
#define GP_CFG_PAIR_BY_THREAD 4 /* pair entries and returns by thread id, not goroutine (R14):
				 * C functions and USDT probes, where R14 is any value */
#define GP_CFG_NEWPROC 16  /* runtime.newproc1 (gprobe's own probe): its entry notes the
			    * propagating span open in the starting goroutine (callergp, RBX), its
			    * return gives it to the new one (RAX), whose g may be a dead
			    * goroutine's: nothing else of it is kept */
#define GP_CFG_FILTER 32   /* the configuration has a `when:` predicate (map filters, same key):
			    * its records are assembled in the scratch buffer and written only
			    * when it holds */
#define GP_CFG_WHEN_RETURN 64 /* an ENTRY without a `when:` of its own whose probe's `when:` is
			       * decided at the return: with its returns off (overhead budget),
			       * its calls are undecided, not recorded */
#define GP_CFG_PROPAGATE 8 /* a Go latency probe whose spans outgoing requests carry: BPF
			    * keeps its open spans per goroutine (span ids made here) */

/* Flags of one captured value. */
#define GP_VAL_TRUNCATED 1 /* a string/bytes value longer than max_len */
#define GP_VAL_FAULT 2     /* the memory could not be read */
#define GP_VAL_NIL 4       /* a pointer on a path was nil (set with GP_VAL_FAULT); full_len:
			    * the hops not taken */
#define GP_VAL_INVALID 8   /* a length (or element count) was negative: nothing was read, len 0 */

/* Header of every record in the events ring buffer; captured values follow, each a
 * gp_value and `len` bytes, packed. */
struct gp_event {
	__u64 ts_ns;       /* bpf_ktime_get_ns() at the probe */
	__u64 call_id;     /* ENTRY/RETURN: pairs them; 0 for CALL */
	__u64 goroutine;   /* runtime.g pointer (R14) */
	__u64 duration_ns; /* RETURN: ts - entry ts */
	__u32 pid;         /* tgid, as seen from the root pid namespace */
	__u32 tid;
	__u32 probe_id;    /* the handle of the configuration that fired (GP_CFG_SLOT) */
	__u16 kind;        /* enum gp_event_kind */
	__u16 data_len;    /* bytes of values after the header */
};

struct gp_value {
	__u8 cap;   /* index in the configuration's caps */
	__u8 flags; /* GP_VAL_* */
	__u16 len;
	__u32 full_len; /* BYTES: the value's real length (before truncation) */
};

/* Per configuration and CPU. */
struct gp_stats {
	__u64 hits;      /* uprobe hits */
	__u64 emitted;   /* events written to the ring buffer */
	__u64 lost;      /* events dropped: ring buffer full */
	__u64 throttled; /* calls over limits.eventsPerSecond */
	__u64 unpaired;  /* returns with no remembered entry (entry dropped or before attach) */
	__u64 too_deep;  /* calls nested deeper than GP_MAX_DEPTH in one goroutine: not recorded */
	__u64 incomplete; /* requests whose header map could not be searched to the end (gomap.h):
			   * a handler's traceparent may have been missed; GP_PROBE_HTTP_OUT: a
			   * request sent without one, as it may have had its own */
	__u64 filtered;  /* calls that failed the probe's `when:` (at the entry, or at the return:
			  * then its entry was recorded, and the RETURN says GP_EV_FILTERED);
			  * GP_PROBE_HTTP_WRITE: traceparents written as not sampled */
	__u64 undecided; /* calls whose `when:` nothing left to read can decide (a value it needs
			  * could not be read, or the returns are off): never recorded */
};

/* A probe's address in a process: the key of `sites`, where kernels without BPF cookies
 * find which probe fired (agent-ebpf/src/cookie.h). */
struct gp_site_key {
	__u32 tgid;
	__u32 _pad;
	__u64 addr;
};

struct gp_inflight_key {
	__u64 goroutine;
	__u32 tgid;
	__u32 func_id;
};

struct gp_inflight {
	__u32 depth;
	__u32 overflow; /* calls entered beyond GP_MAX_DEPTH, not yet returned */
	__u64 ts[GP_MAX_DEPTH];
	__u64 call_id[GP_MAX_DEPTH]; /* GP_CALL_UNRECORDED set: its entry was not recorded */
	__u32 fbits[GP_MAX_DEPTH];   /* the truth of the entry's `when:` terms, for its return:
				      * known (low 16 bits, bit i: term i) and true (high 16) */
};

/* Marks a place on the in-flight stack held by an entry that was not recorded (throttled:
 * no id; its record lost: the id it had, so that its span still closes): its return pops
 * the place, and records nothing, instead of taking an outer call's entry. */
#define GP_CALL_UNRECORDED (1ULL << 63)
/* With GP_CALL_UNRECORDED: the entry failed its probe's `when:`; its return counts its
 * duration in `left_out`. */
#define GP_CALL_FILTERED (1ULL << 62)

/* The durations of the calls a probe's `when:` left out, by floor(log2(ns)) (bucket i:
 * [2^i, 2^(i+1)) ns; bucket 0 also holds 0): map left_out, per CPU, keyed by the slot of
 * the probe's return configuration. */
#define GP_DUR_BUCKETS 64
struct gp_durations {
	__u64 n[GP_DUR_BUCKETS];
};

/* A goroutine of a process: the key of the spans open on it. */
struct gp_span_key {
	__u64 goroutine;
	__u32 tgid;
	__u32 _pad;
};

/* The propagating spans open on a goroutine (GP_CFG_PROPAGATE), innermost last. */
struct gp_span_ctx {
	__u32 depth;
	__u32 flags; /* GP_SPAN_UNSAMPLED: the trace of its spans is not sampled;
		      * GP_SPAN_PARENT_UNSAMPLED: nor parent_trace */
	__u64 trace[2]; /* the trace of them all: high, low */
	__u64 span[GP_MAX_DEPTH];
	__u64 call_id[GP_MAX_DEPTH];
	/* The goroutine was started inside a propagating span: that span (in goroutine
	 * parent_g), in trace parent_trace, while it is still open there. 0: none. */
	__u64 parent_g;
	__u64 parent_span;
	__u64 parent_trace[2];
};

/* A request made inside a propagating span (GP_PROBE_HTTP_OUT), kept for the goroutine that
 * makes it (key: gp_span_key) while its round trip is in progress. */
struct gp_out {
	__u64 trace[2];
	__u64 span;
	__u64 map;    /* the request's header map (req.Header) */
	__u64 writer; /* the *bufio.Writer of the connection it was handed to; 0: none yet */
	__u64 ts;     /* when it was handed to that connection */
	__u64 flags;  /* GP_SPAN_UNSAMPLED: its traceparent says not sampled */
};

#define GP_SPAN_UNSAMPLED 1
#define GP_SPAN_PARENT_UNSAMPLED 2

/* A connection's *bufio.Writer in a process: where the header writer finds the goroutine
 * whose request that connection is sending (value: its runtime.g). */
struct gp_out_key {
	__u64 writer;
	__u32 tgid;
	__u32 _pad;
};

/* A request's headers are written right after it is handed to its connection: a hand-off
 * older than this is one whose round trip never returned (a panic), not written to. */
#define GP_OUT_MAX_AGE_NS 30000000000ULL

struct gp_rate {
	__u64 window_start;
	__u64 count;
};

/* What the agent tells the process hooks (map `control`). */
struct gp_control {
	/* Hold (SIGSTOP) a process only before this time: the agent pushes it forward while it
	 * runs, so a stopped or stuck agent holds nothing new. */
	__u64 holds_until_ns;
	/* The agent's tgid: the hooks hold only while this process lives, and the exit hook
	 * resumes every held process when it dies. 0: hold nothing. */
	__u32 agent;
	__u32 _pad;
};

/* Why a process is held. */
#define GP_HOLD_EXEC 1   /* stopped at exec, before its first instruction */
#define GP_HOLD_FORK 2   /* a child of a traced process, stopped before its first instruction */
#define GP_HOLD_LOADER 3 /* stopped in its dynamic loader's _dl_debug_state */

/* A held process (map `held`, by pid). */
struct gp_hold {
	__u64 since_ns; /* bpf_ktime_get_ns() when it was held: names this hold */
	__u32 holder;   /* the tgid of the agent that holds it */
	__u32 kind;     /* GP_HOLD_* */
	__u32 ppid;     /* GP_HOLD_FORK: the parent */
	__u32 _pad;
};

/* Records of the process ring buffer: exec, fork and exit of any process on the host, and
 * the dynamic loader hook of traced ones. Every record starts with a gp_proc_event; exit,
 * fork and loader records are one, an exec record is a gp_proc_exec. */
struct gp_proc_event {
	__u32 kind;  /* GP_EV_EXEC, GP_EV_EXIT, GP_EV_FORK or GP_EV_LOADER */
	__u32 pid;
	__u32 ppid;  /* GP_EV_FORK: the parent */
	__u32 _pad;
	__u64 hold;  /* the process is held: its gp_hold.since_ns; 0: it is not */
};

/* GP_EV_EXEC: a process executed a file. */
struct gp_proc_exec {
	struct gp_proc_event ev;
	__u64 ino;                  /* inode number of the executed file */
	char filename[GP_PATH_MAX]; /* the path given to execve (may be relative) */
};

/* Counters of the process hooks (per CPU). */
struct gp_proc_stats {
	__u64 lost;        /* process events that found the ring buffer full */
	__u64 hold_failed; /* holds the kernel refused (the stop signal could not be sent) */
	__u64 released;    /* held processes the exit hook resumed because the agent died */
};

/* A probe's `when:` predicate, compiled by the agent (agent/src/filter): up to
 * GP_FILTER_TERMS terms, each a test of one value of the call, and a postfix program over
 * them (GP_FILTER_OPS steps: push term i (0..GP_FILTER_TERMS-1), NOT, AND, OR). Evaluated
 * by filter.h in three-valued logic: a term whose value is not read yet (a result or the
 * duration, at the entry) is unknown, and the predicate is decided once the known terms
 * suffice. */
#define GP_FILTER_TERMS 16
#define GP_FILTER_OPS 32
#define GP_FILTER_STR 64 /* bytes of a string literal, and of a value compared with one */

enum gp_filter_test {
	GP_FT_EQ = 0, /* integers (signed with GP_FTF_SIGNED), bools (0/1), durations (ns) */
	GP_FT_NE = 1,
	GP_FT_LT = 2,
	GP_FT_LE = 3,
	GP_FT_GT = 4,
	GP_FT_GE = 5,
	GP_FT_STR_EQ = 6, /* the whole string, read to its end, equals the literal */
	GP_FT_STR_NE = 7,
	GP_FT_PREFIX = 8, /* the string starts with the literal */
	GP_FT_NIL = 9,    /* a pointer-like word is 0 */
	GP_FT_NOT_NIL = 10,
	GP_FT_TRUE = 11,  /* decided when compiled (an unsigned value against a negative, ...),
			   * for a value that was read */
	GP_FT_FALSE = 12,
};

#define GP_FTF_SIGNED 1 /* compare the word and the literal as signed */
#define GP_FTF_STR 2    /* the value is a string: its bytes, not its word */
#define GP_FTF_NIL_ZERO 4 /* len(x) of a nil map or channel (VAL_NIL, no hop left) is 0 */

/* gp_filter_term.cap: where a term's value is at the configuration's site. Below
 * GP_MAX_CAPTURES: the value of that capture (its record's value, read in the scratch
 * buffer before the record is written). */
#define GP_FCAP_DURATION 0xfd /* the call's duration (a RETURN) */
#define GP_FCAP_ENTRY 0xfe    /* decided at the entry: its truth comes from gp_inflight.fbits */
#define GP_FCAP_NONE 0xff     /* not known at this site (a result, at the entry): unknown */

#define GP_FOP_NOT 0x80
#define GP_FOP_AND 0x81
#define GP_FOP_OR 0x82

struct gp_filter_term {
	__u8 test;  /* enum gp_filter_test */
	__u8 flags; /* GP_FTF_* */
	__u8 len;   /* string tests: bytes of `str` used (at most GP_FILTER_STR) */
	__u8 cap;   /* where the value is: GP_FCAP_* or a capture's index */
	__u8 vsize; /* integers: the value's bytes (1, 2, 4, 8), sign- or zero-extended */
	__u8 _pad[3];
	__u64 lit;  /* integer tests: the literal's bits */
	__u8 str[GP_FILTER_STR];
};

struct gp_filter {
	__u8 n_terms;
	__u8 n_ops;
	__u8 n_out; /* captures the record keeps: those after it are read for the terms only */
	__u8 _pad[5];
	__u8 ops[GP_FILTER_OPS];
	struct gp_filter_term terms[GP_FILTER_TERMS];
};

/* The truth of a predicate or a term (filter.h). */
#define GP_TRUTH_FALSE 0
#define GP_TRUTH_TRUE 1
#define GP_TRUTH_UNKNOWN 2

enum gp_fval_state {
	GP_FV_UNKNOWN = 0,    /* not read yet: the term is unknown */
	GP_FV_KNOWN = 1,
	GP_FV_UNREADABLE = 2, /* a path crossed nil, or the memory could not be read: every
			       * test of it is false */
};

/* The value one term tests. */
struct gp_fval {
	__u64 word;  /* integers (sign-extended when signed), bools, pointers, durations */
	__u32 len;   /* strings: the full length */
	__u8 state;  /* enum gp_fval_state */
	__u8 n;      /* strings: bytes read into `bytes` (at most GP_FILTER_STR) */
	__u8 _pad[2];
	__u8 bytes[GP_FILTER_STR];
};

struct gp_fvals {
	struct gp_fval v[GP_FILTER_TERMS]; /* v[i]: term i's value */
};

#endif
