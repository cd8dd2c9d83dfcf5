//! Rust mirror of agent-ebpf/include/gprobe.h. The sizes and offsets are checked at compile
//! time against the C header as the host compiler lays it out (build.rs measures them).
//! Reading the records themselves is decode.rs. A leaf module: the planners, the attacher,
//! the event reader and process discovery all import it, and it imports none of them.

#![allow(dead_code)]

mod layout;
use layout as c;
pub mod decode;
pub use c::{
    GP_COMM_LEN, GP_MAX_BUDGET_SLOTS, GP_MAX_CAPTURES, GP_MAX_DEPTH, GP_MAX_ELEMS, GP_MAX_ELEM_STR,
    GP_MAX_HOPS, GP_MAX_PROBES, GP_MAX_STR, GP_PATH_MAX, GP_SCRATCH,
};

/// The slot in the `probes` array of configuration `handle` (`GP_CFG_SLOT` in gprobe.h):
/// its low bits; the high ones are the slot's generation, bumped each time it is reused.
pub const fn cfg_slot(handle: u32) -> u32 {
    handle & ((1 << c::GP_CFG_SLOT_BITS) - 1)
}

/// The handle of the `generation`-th configuration given slot `slot`.
pub const fn cfg_handle(slot: u32, generation: u16) -> u32 {
    slot | (generation as u32) << c::GP_CFG_SLOT_BITS
}

const _: () = assert!(GP_MAX_PROBES <= 1 << c::GP_CFG_SLOT_BITS);

/// Bytes a probe's header and captures may fill (the BPF cursor mask).
pub const GP_DATA_LIMIT: usize = c::GP_DATA_MASK + 1;
/// Bytes one captured value may take, its `gp_value` header included: every value starts
/// below [`GP_DATA_LIMIT`] and must end inside the per-CPU scratch buffer.
pub const GP_MAX_VALUE: usize = c::GP_SCRATCH - GP_DATA_LIMIT;

pub const PROBE_CALL: u8 = 0;
pub const PROBE_ENTRY: u8 = 1;
pub const PROBE_RETURN: u8 = 2;
/// The dynamic loader's `_dl_debug_state` (called around every change of the list of
/// loaded objects): the BPF program stops the process (SIGSTOP, `held`) and reports
/// `EV_LOADER`, so probes on a library dlopen'd later attach before its first call.
pub const PROBE_LOADER: u8 = 3;
/// `net/http.(*Transport).roundTrip`'s entry: the open propagating span, remembered for the
/// goroutine making the request (caps[0], a `CAP_HEADER`, finds the request's header map)
/// until the round trip returns.
pub const PROBE_HTTP_OUT: u8 = c::GP_PROBE_HTTP_OUT as u8;
/// gprobe_propagate: `net/http.Header.writeSubset`, writing the `Traceparent` of the
/// request handed to that connection's writer.
pub const PROBE_HTTP_WRITE: u8 = c::GP_PROBE_HTTP_WRITE as u8;
/// `net/http.(*persistConn).roundTrip`'s entry: the connection writer (caps[0], a
/// `CAP_WORD` at the path `pc.bw`) the goroutine's request is handed to.
pub const PROBE_HTTP_CONN: u8 = c::GP_PROBE_HTTP_CONN as u8;
/// A RET of `net/http.(*Transport).roundTrip`: the goroutine's request is forgotten.
pub const PROBE_HTTP_DONE: u8 = c::GP_PROBE_HTTP_DONE as u8;
/// A freed configuration: links still running it (being detached) write nothing.
pub const PROBE_FREED: u8 = c::GP_PROBE_FREED as u8;

pub const EV_CALL: u16 = 0;
pub const EV_ENTRY: u16 = 1;
pub const EV_RETURN: u16 = 2;
/// A flag in `GpEvent::kind`: a record of the same CPU was lost just before this one.
pub const EV_AFTER_LOSS: u16 = c::GP_EV_AFTER_LOSS as u16;
/// A flag of a RETURN: the call failed its probe's `when:` at the return; drop its entry.
pub const EV_FILTERED: u16 = c::GP_EV_FILTERED as u16;
pub const EV_EXEC: u32 = 3;
pub const EV_EXIT: u32 = 4;
pub const EV_LOADER: u32 = 5;
pub const EV_FORK: u32 = 6;

/// `GpProbeCfg::flags`: every capture is a word, so each record of the configuration has
/// one size (48 + 16 per capture) and the program writes it in place in the ring buffer.
pub const CFG_WORDS: u8 = c::GP_CFG_WORDS as u8;
/// `GpProbeCfg::flags`: one capture, a string or bytes: written in place in a record of one
/// of a few sizes; `data_len` says how much of it the value fills.
pub const CFG_ONE_BYTES: u8 = c::GP_CFG_ONE_BYTES as u8;

/// `GpProbeCfg::flags`: pair entries and returns by thread id instead of by goroutine
/// (R14): C functions and USDT probes, where R14 is any value.
pub const CFG_PAIR_BY_THREAD: u8 = c::GP_CFG_PAIR_BY_THREAD as u8;

// Capture kinds (`GpCapture::kind`). The values of a record and how BPF reads them are
// described at [`GpCapture`].
pub const CAP_WORD: u8 = 1;
pub const CAP_BYTES: u8 = 2;
/// A NUL-terminated C string at the pointer at loc[0], at most max_len bytes (without the
/// NUL); TRUNCATED when no NUL came within them.
pub const CAP_CSTR: u8 = 3;
pub const CAP_IFACE: u8 = 4;
pub const CAP_SLICE: u8 = 5;
pub const CAP_STRS: u8 = 6;
pub const CAP_IFACES: u8 = 7;
/// An `http.Header`: the word is the map pointer; the value is the first string under the
/// key `Traceparent`, at most `max_len` bytes (`len` 0 when absent; TRUNCATED with `len` 0
/// when the map is too big to search). `size` is the map layout, `MAP_*`.
pub const CAP_HEADER: u8 = c::GP_CAP_HEADER as u8;
/// The span a propagating probe's entry opened (`CFG_PROPAGATE`), made in BPF: 32 bytes,
/// the trace id (high, low u64), the span id, the parent span id (0: a root).
pub const CAP_SPAN: u8 = c::GP_CAP_SPAN as u8;
/// An `error` read with the layouts of the standard library's error types
/// (`resolve/go/types/errtable.rs`): words (itab, data) like `CAP_IFACE`; the record is
/// the error and the values it holds, breadth first, as nodes (see [`GpCapture`]).
pub const CAP_ERROR: u8 = c::GP_CAP_ERROR as u8;
/// The kinds of an error type's fields (`GpErrType::kind`).
pub const EF_STR: u8 = c::GP_EF_STR as u8;
pub const EF_IFACE: u8 = c::GP_EF_IFACE as u8;
pub const EF_WORD: u8 = c::GP_EF_WORD as u8;
pub use c::{GP_ERR_FIELDS, GP_ERR_NODES, GP_ERR_STRS};
/// `GpProbeCfg::flags`: a Go latency probe with `propagate`: its open spans are kept per
/// goroutine in BPF (ids made there, recorded by a `CAP_SPAN`), for the requests made in them.
pub const CFG_PROPAGATE: u8 = c::GP_CFG_PROPAGATE as u8;
/// The configuration has a `when:` predicate (map `filters`, keyed by its slot).
pub const CFG_FILTER: u8 = c::GP_CFG_FILTER as u8;
pub const CFG_WHEN_RETURN: u8 = c::GP_CFG_WHEN_RETURN as u8;
/// `GpProbeCfg::flags`: runtime.newproc1 (gprobe's own probe): at entry BPF notes the
/// propagating span open in the starting goroutine (callergp, RBX); at return the new
/// goroutine (RAX) is in that span (while it is open), and in nothing its reused `g` had.
pub const CFG_NEWPROC: u8 = c::GP_CFG_NEWPROC as u8;
/// Go's map layouts (`CAP_HEADER`'s `size`): agent-ebpf/src/gomap.h describes each.
pub const MAP_HMAP: u8 = c::GP_MAP_HMAP as u8;
pub const MAP_SWISS: u8 = c::GP_MAP_SWISS as u8;
pub const MAP_SWISS_SPLIT: u8 = c::GP_MAP_SWISS_SPLIT as u8;

// Capture flags (`GpCapture::flags`).
/// The value is in memory at the end of a path (base `loc[0]`, `hops`, `off`), not in
/// `loc[0]`/`loc[1]`.
pub const CAPF_PATH: u8 = 1;
/// IFACE, IFACES: the interface is non-empty: its first word is an itab; read the dynamic
/// type at itab + 8 (`ITab.Type`, at 8 in Go 1.18 to 1.27) and record that instead.
pub const CAPF_ITAB: u8 = 2;
/// IFACE, IFACES: also read the string header at the data pointer (`data + 0`) and up to
/// `max_len` of its bytes, whatever the dynamic type (the decoder keeps it for error types
/// whose first field is the message, [`crate::plan::ERROR_TYPES_WITH_MESSAGE`]).
pub const CAPF_DATA_STR: u8 = 4;
/// BYTES: the length (`size` bytes) is a signed integer (a C `int`/`ssize_t`, Go's `int`):
/// BPF sign-extends it from its size, and a negative one reads nothing (`VAL_INVALID`).
pub const CAPF_LEN_SIGNED: u8 = c::GP_CAPF_LEN_SIGNED as u8;

/// Where a map's element count is in the map header its value points to: `hmap.count`
/// (Go 1.18-1.23) and the swiss map's `Map.used` (Go 1.24-1.27) are both the first word.
pub const MAP_COUNT_OFFSET: i32 = 0;
/// Where a channel's element count is: `hchan.qcount`, the first word (Go 1.18-1.27).
pub const CHAN_COUNT_OFFSET: i32 = 0;

pub const LOC_NONE: u8 = 0;
pub const LOC_REG: u8 = 1;
pub const LOC_MEM: u8 = 2;
pub const LOC_CONST: u8 = 3;

/// Register numbers of `GpLoc::reg`: the x86-64 encoding.
pub mod reg {
    pub const RAX: u8 = 0;
    pub const RCX: u8 = 1;
    pub const RDX: u8 = 2;
    pub const RBX: u8 = 3;
    pub const RSP: u8 = 4;
    pub const RBP: u8 = 5;
    pub const RSI: u8 = 6;
    pub const RDI: u8 = 7;
    pub const R8: u8 = 8;
    pub const R9: u8 = 9;
    pub const R10: u8 = 10;
    pub const R11: u8 = 11;
    pub const R12: u8 = 12;
    pub const R13: u8 = 13;
    pub const R14: u8 = 14;
    pub const R15: u8 = 15;
}

/// Why a process is held (`GpHold::kind`): stopped at exec, a traced process's child
/// stopped at fork, or stopped in its dynamic loader.
pub const HOLD_EXEC: u32 = c::GP_HOLD_EXEC as u32;
pub const HOLD_FORK: u32 = c::GP_HOLD_FORK as u32;
pub const HOLD_LOADER: u32 = c::GP_HOLD_LOADER as u32;

pub const VAL_TRUNCATED: u8 = 1;
pub const VAL_FAULT: u8 = 2;
/// A pointer on the way of a path was nil; set together with VAL_FAULT (a decoder that
/// knows only FAULT shows null either way). No bytes follow; `full_len` is the number of
/// hops not taken (see [`GpCapture`]).
pub const VAL_NIL: u8 = 4;
/// A length or element count was negative (a signed C length, or a Go length in torn or
/// foreign memory): nothing was read, `len` is 0. The value shows as invalid, never as
/// bytes past the buffer.
pub const VAL_INVALID: u8 = c::GP_VAL_INVALID as u8;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpLoc {
    pub kind: u8,
    pub reg: u8,
    pub _pad: u16,
    pub off: i32,
}

/// One value to capture: where it is, and what to read there.
///
/// # Where the value is
/// Without `CAPF_PATH` the value's words are `loc[0]` and `loc[1]` (a register, the 8
/// bytes at register + off, or a constant), as for flat arguments: WORD reads `loc[0]`;
/// the two-word kinds read their first word from `loc[0]` and their second from `loc[1]`.
///
/// With `CAPF_PATH` the value is in memory at the end of a field path (`r.URL.Path`):
/// ```text
/// v = word(loc[0])                        // the base: a register's value, or the 8
///                                         // bytes at register + off (LOC_MEM)
/// for i in 0..n_hops:                     // each hop follows one pointer
///     if v == 0: emit NIL; done
///     v = *(u64 *)(v + hops[i])           // unreadable: emit FAULT; done
/// if v == 0: emit NIL; done
/// a = v + off                             // the value's address
/// ```
/// and the kind's words are read at `a` (first word at `a`, second at `a + 8`; WORD
/// reads exactly `size` bytes at `a`). Stack-resident arguments are paths from the
/// register RSP (its value, LOC_REG) with `off` their stack offset.
///
/// # What is read (after the words), and the value's bytes in the record
/// Every value is a [`GpValue`] header (`cap`, `flags`, `len` bytes that follow,
/// `full_len`) and `len` bytes padded to 8. FAULT and NIL values have `len` 0; a NIL
/// value's `full_len` is the number of hops not taken when the nil pointer was met (0:
/// the pointer after the last hop, e.g. the map of `len(o.Meta)`, was nil).
/// - `CAP_WORD`: `size` (1..8) bytes of the word, zero-extended to 8: `len` 8.
/// - `CAP_BYTES` (string, []byte): words (ptr, len); `min(len, max_len)` bytes at ptr;
///   `full_len` = len, TRUNCATED when longer. With `CAPF_LEN_SIGNED` the length is
///   sign-extended from `size` bytes, and a negative one reads nothing: INVALID, `len` 0.
///   Go lengths (strings, slices, element strings) are always taken as signed: a negative
///   one (memory that is not what the type says) is INVALID as well.
/// - `CAP_IFACE` (interface, error): words (tab, data). `tab` 0 is a nil interface:
///   16 zero bytes. With `CAPF_ITAB` (non-empty interfaces), `type = *(u64 *)(tab + 8)`,
///   else `type = tab`. Bytes: `type` (u64), `data` (u64); with `CAPF_DATA_STR` and
///   `data != 0`, then the string header at `data` (sptr = the u64 at `data`, slen = the
///   u64 at `data + 8`): `slen` (u64) and `min(slen, max_len)` bytes at sptr (`full_len` =
///   slen, TRUNCATED when longer); `len` is 16 when that header or those bytes cannot be
///   read.
/// - `CAP_SLICE` (slice of scalars): words (ptr, len); `n = min(len, max_elems)` elements
///   of `size` bytes, contiguous at ptr (`n * size` bytes); `full_len` = len (elements),
///   TRUNCATED when len > n.
/// - `CAP_STRS` ([]string): words (ptr, len); `n = min(len, max_elems)` string headers at
///   ptr (16 bytes each: ptr, len); for each, an element record: u32 its full length, u16
///   bytes kept `k = min(len, max_len)`, u8 flags (FAULT, TRUNCATED), u8 0, then `k` bytes
///   padded to 8. `full_len` = len (elements), TRUNCATED when len > n.
/// - `CAP_IFACES` ([]any, []error): words (ptr, len); `n = min(len, max_elems)` interfaces
///   at ptr (16 bytes each: tab, data); for each an element record: u64 type (as IFACE:
///   through the itab with `CAPF_ITAB`; 0 when nil), u64 data, u64 `w0` and u64 `w1` (the
///   words at data and data + 8, each 0 where unreadable: a boxed integer or bool is
///   `w0`), u16 bytes kept `k`, u8 flags, 5 bytes 0, then with `CAPF_DATA_STR` `k =
///   min(w1, max_len)` bytes at `w0` (0 when unreadable: a boxed string is (w0, w1)),
///   padded to 8. `full_len` = len (elements), TRUNCATED when len > n.
/// - `CAP_ERROR` (error): words (itab, data), the first node. `full_len` = the nodes
///   recorded. Each node: u64 its dynamic type (`*(itab + 8)`; 0 for nil), u32 its hash
///   (`*(itab + 16)`), u8 `nf`, u8 flags (FAULT: the itab was unreadable), u16 0; then,
///   where the `errtypes` map has a layout for (`table`, hash) and data is not nil, one
///   field record per field of that layout (`nf` of them): u8 kind (`EF_*`), u8 offset,
///   u8 flags (FAULT; TRUNCATED: a string cut, or no room for its bytes or its node; NIL:
///   a nil interface; INVALID: a negative length), u8 child (IFACE: the index of the node
///   it was queued as, 0xff none), u32 bytes kept `k`, u64 w (STR: the full length; WORD:
///   the 8 bytes at data + offset), then (STR: the (ptr, len) at data + offset) `k =
///   min(len, max_len, GP_MAX_ELEM_STR)` bytes padded to 8. IFACE fields queue their
///   interface as the next node (at most `GP_ERR_NODES` in all); at most `GP_ERR_STRS`
///   strings have their bytes read.
///
/// [`GpCapture::max_record`] is the most bytes a value of the capture takes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpCapture {
    pub kind: u8,
    /// WORD: bytes read (1..8). SLICE: bytes per element (1, 2, 4, 8).
    pub size: u8,
    /// BYTES, IFACE/IFACES with DATA_STR, STRS: bytes kept of each string.
    pub max_len: u16,
    /// `CAPF_*`.
    pub flags: u8,
    /// PATH: pointers followed (0..=GP_MAX_HOPS).
    pub n_hops: u8,
    /// SLICE, STRS, IFACES: elements kept (1..=GP_MAX_ELEMS).
    pub max_elems: u8,
    pub _pad: u8,
    pub loc: [GpLoc; 2],
    /// PATH: the offset added before each dereference.
    pub hops: [i32; GP_MAX_HOPS],
    /// PATH: the value's offset from the last pointer (or from the base).
    pub off: i32,
    /// `CAP_ERROR`: the table of its error types in the `errtypes` map
    /// ([`crate::plan::ErrTable`]'s id).
    pub table: u32,
}

impl GpCapture {
    /// The most bytes a value of this capture takes in a record, its header included.
    pub fn max_record(&self) -> usize {
        let pad = |n: usize| n.div_ceil(8) * 8;
        let hdr = std::mem::size_of::<GpValue>();
        let (max_len, elems) = (self.max_len as usize, self.max_elems as usize);
        let data_str = self.flags & CAPF_DATA_STR != 0;
        hdr + match self.kind {
            CAP_WORD => 8,
            CAP_IFACE => 16 + if data_str { 8 + pad(max_len) } else { 0 },
            CAP_SLICE => pad(elems * self.size as usize),
            CAP_STRS => elems * (8 + pad(max_len)),
            CAP_IFACES => elems * (40 + if data_str { pad(max_len) } else { 0 }),
            CAP_SPAN => 32,
            CAP_ERROR => {
                let nodes = c::GP_ERR_NODES;
                let strs = c::GP_ERR_STRS * pad(max_len.min(GP_MAX_ELEM_STR));
                nodes * 16 + nodes * c::GP_ERR_FIELDS * 16 + strs
            }
            // BYTES and kinds that read one string.
            _ => pad(max_len.max(8)),
        }
    }
}

/// `errtypes`'s key: an error table and a dynamic type's hash.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpErrKey {
    pub table: u32,
    pub hash: u32,
}

/// `errtypes`'s value: which fields of a dynamic type an error capture reads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpErrType {
    pub n: u8,
    pub kind: [u8; GP_ERR_FIELDS],
    pub off: [u8; GP_ERR_FIELDS],
    pub _pad: [u8; 5],
}

/// `spanctx`'s key: a goroutine of a process (gprobe.bpf.c's propagate/spans.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpSpanKey {
    pub goroutine: u64,
    pub tgid: u32,
    pub _pad: u32,
}

/// `sites`' key: a probe's address in a process, where kernels without BPF cookies find
/// which probe fired (agent-ebpf/src/cookie.h; filled by attach/sites.rs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpSiteKey {
    pub tgid: u32,
    pub _pad: u32,
    pub addr: u64,
}

/// `inflight`'s key: one goroutine's (or thread's) calls of one probed function in one
/// process (`func_id`: the probe's first entry configuration).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpInflightKey {
    pub goroutine: u64,
    pub tgid: u32,
    pub func_id: u32,
}

/// `inflight`'s value: the stack of calls entered and not yet returned.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GpInflight {
    pub depth: u32,
    pub overflow: u32,
    pub ts: [u64; GP_MAX_DEPTH],
    pub call_id: [u64; GP_MAX_DEPTH],
    pub fbits: [u32; GP_MAX_DEPTH],
}

/// `requests`' value: a request made inside a propagating span (`gp_out`, propagate/spans.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpOut {
    pub trace: [u64; 2],
    pub span: u64,
    pub map: u64,
    pub writer: u64,
    pub ts: u64,
    pub flags: u64,
}

/// `conns`' key: a connection's writer in a process (`gp_out_key`, propagate/spans.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpOutKey {
    pub writer: u64,
    pub tgid: u32,
    pub _pad: u32,
}

/// `spanctx`'s value: the propagating spans open on a goroutine (`gp_span_ctx`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpSpanCtx {
    pub depth: u32,
    pub flags: u32,
    pub trace: [u64; 2],
    pub span: [u64; GP_MAX_DEPTH],
    pub call_id: [u64; GP_MAX_DEPTH],
    pub parent_g: u64,
    pub parent_span: u64,
    pub parent_trace: [u64; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpProbeCfg {
    pub func_id: u32,
    pub kind: u8,
    pub n_captures: u8,
    pub flags: u8,
    /// Entry site on Go's stack-check jump: 1 + its condition code; 0: any other site.
    pub jcc: u8,
    pub rate_limit: u32,
    /// What a hit here costs the process (ns, its site's class measured at start): added to
    /// the budget slot in the attach cookie's high half.
    pub cost_ns: u32,
    /// `PROBE_HTTP_WRITE`: the link-time address of the `*bufio.Writer` type descriptor.
    pub aux: u64,
    /// A propagating entry with `sample:`: the bound its new traces' ids are sampled
    /// under (`crate::plan::sample_bound`); 0: every trace.
    pub sample_bound: u64,
    pub caps: [GpCapture; GP_MAX_CAPTURES],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpEvent {
    pub ts_ns: u64,
    pub call_id: u64,
    pub goroutine: u64,
    pub duration_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub probe_id: u32,
    pub kind: u16,
    pub data_len: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpValue {
    pub cap: u8,
    pub flags: u8,
    pub len: u16,
    pub full_len: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpStats {
    pub hits: u64,
    pub emitted: u64,
    pub lost: u64,
    pub throttled: u64,
    pub unpaired: u64,
    pub too_deep: u64,
    pub incomplete: u64,
    pub filtered: u64,
    pub undecided: u64,
}

/// A record or map value that crosses the boundary: a `repr(C)` struct of integers and
/// byte arrays mirrored from gprobe.h (its layout checked below), so that any bytes of its
/// size are a valid value.
///
/// # Safety
/// Implement it only for such structs.
pub unsafe trait Record: Copy + 'static {}

/// Implements [`Record`] for each mirrored struct, and lists them for attach/ (which lets aya
/// read and write them in maps).
#[macro_export]
macro_rules! for_each_record {
    ($m:ident) => {
        $m!(
            GpEvent,
            GpProbeCfg,
            GpStats,
            GpControl,
            GpHold,
            GpProcStats,
            GpSpanKey,
            GpSiteKey,
            GpInflightKey,
            GpInflight,
            GpSpanCtx,
            GpErrKey,
            GpErrType,
            GpOut,
            GpOutKey,
            GpProcEvent,
            GpProcExec,
            GpFilter,
            GpFvals,
            GpDurations
        );
    };
}

macro_rules! impl_record {
    ($($t:ident),*) => {
        // SAFETY: plain-old-data repr(C) structs of integers and byte arrays, checked
        // against the C header's layout below.
        $( unsafe impl Record for $t {} )*
    };
}
for_each_record!(impl_record);

macro_rules! check_layout {
    ($ty:ty, $size:ident, $( $field:ident => $off:ident ),* ) => {
        const _: () = assert!(std::mem::size_of::<$ty>() == c::$size);
        $( const _: () = assert!(std::mem::offset_of!($ty, $field) == c::$off); )*
    };
}
pub mod filter;
pub use filter::{GpFilter, GpFilterTerm, GpFval, GpFvals};
mod procs;
pub use procs::{GpControl, GpHold, GpProcEvent, GpProcExec, GpProcStats};

check_layout!(GpLoc, SIZEOF_GP_LOC, kind => OFFSETOF_GP_LOC_KIND, reg => OFFSETOF_GP_LOC_REG,
    off => OFFSETOF_GP_LOC_OFF);
check_layout!(GpCapture, SIZEOF_GP_CAPTURE, kind => OFFSETOF_GP_CAPTURE_KIND, size => OFFSETOF_GP_CAPTURE_SIZE,
    max_len => OFFSETOF_GP_CAPTURE_MAX_LEN, flags => OFFSETOF_GP_CAPTURE_FLAGS, n_hops => OFFSETOF_GP_CAPTURE_N_HOPS,
    max_elems => OFFSETOF_GP_CAPTURE_MAX_ELEMS, loc => OFFSETOF_GP_CAPTURE_LOC, hops => OFFSETOF_GP_CAPTURE_HOPS,
    off => OFFSETOF_GP_CAPTURE_OFF, table => OFFSETOF_GP_CAPTURE_TABLE);
check_layout!(GpErrKey, SIZEOF_GP_ERR_KEY, table => OFFSETOF_GP_ERR_KEY_TABLE,
    hash => OFFSETOF_GP_ERR_KEY_HASH);
check_layout!(GpErrType, SIZEOF_GP_ERR_TYPE, n => OFFSETOF_GP_ERR_TYPE_N,
    kind => OFFSETOF_GP_ERR_TYPE_KIND, off => OFFSETOF_GP_ERR_TYPE_OFF);
check_layout!(GpProbeCfg, SIZEOF_GP_PROBE_CFG, func_id => OFFSETOF_GP_PROBE_CFG_FUNC_ID,
    kind => OFFSETOF_GP_PROBE_CFG_KIND, n_captures => OFFSETOF_GP_PROBE_CFG_N_CAPTURES,
    flags => OFFSETOF_GP_PROBE_CFG_FLAGS, jcc => OFFSETOF_GP_PROBE_CFG_JCC,
    rate_limit => OFFSETOF_GP_PROBE_CFG_RATE_LIMIT, cost_ns => OFFSETOF_GP_PROBE_CFG_COST_NS,
    aux => OFFSETOF_GP_PROBE_CFG_AUX, sample_bound => OFFSETOF_GP_PROBE_CFG_SAMPLE_BOUND,
    caps => OFFSETOF_GP_PROBE_CFG_CAPS);
check_layout!(GpEvent, SIZEOF_GP_EVENT, ts_ns => OFFSETOF_GP_EVENT_TS_NS, call_id => OFFSETOF_GP_EVENT_CALL_ID,
    goroutine => OFFSETOF_GP_EVENT_GOROUTINE, duration_ns => OFFSETOF_GP_EVENT_DURATION_NS,
    pid => OFFSETOF_GP_EVENT_PID, tid => OFFSETOF_GP_EVENT_TID, probe_id => OFFSETOF_GP_EVENT_PROBE_ID,
    kind => OFFSETOF_GP_EVENT_KIND, data_len => OFFSETOF_GP_EVENT_DATA_LEN);
check_layout!(GpValue, SIZEOF_GP_VALUE, cap => OFFSETOF_GP_VALUE_CAP, flags => OFFSETOF_GP_VALUE_FLAGS,
    len => OFFSETOF_GP_VALUE_LEN, full_len => OFFSETOF_GP_VALUE_FULL_LEN);
/// Buckets of `gp_durations`: bucket i holds the durations in [2^i, 2^(i+1)) ns.
pub const DUR_BUCKETS: usize = c::GP_DUR_BUCKETS;

/// `left_out`'s value: the durations of the calls a probe's `when:` left out, by
/// floor(log2(ns)).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpDurations {
    pub n: [u64; DUR_BUCKETS],
}

impl Default for GpDurations {
    fn default() -> Self {
        Self {
            n: [0; DUR_BUCKETS],
        }
    }
}

check_layout!(GpDurations, SIZEOF_GP_DURATIONS, n => OFFSETOF_GP_DURATIONS_N);

check_layout!(GpStats, SIZEOF_GP_STATS, hits => OFFSETOF_GP_STATS_HITS, emitted => OFFSETOF_GP_STATS_EMITTED,
    lost => OFFSETOF_GP_STATS_LOST, throttled => OFFSETOF_GP_STATS_THROTTLED, unpaired => OFFSETOF_GP_STATS_UNPAIRED,
    too_deep => OFFSETOF_GP_STATS_TOO_DEEP, incomplete => OFFSETOF_GP_STATS_INCOMPLETE,
    filtered => OFFSETOF_GP_STATS_FILTERED, undecided => OFFSETOF_GP_STATS_UNDECIDED);

const _: () = assert!(std::mem::size_of::<GpEvent>() == 48);
const _: () = assert!(std::mem::size_of::<GpValue>() == 8);

check_layout!(GpSiteKey, SIZEOF_GP_SITE_KEY, tgid => OFFSETOF_GP_SITE_KEY_TGID, addr => OFFSETOF_GP_SITE_KEY_ADDR);
check_layout!(GpSpanKey, SIZEOF_GP_SPAN_KEY, goroutine => OFFSETOF_GP_SPAN_KEY_GOROUTINE,
    tgid => OFFSETOF_GP_SPAN_KEY_TGID);
check_layout!(GpInflightKey, SIZEOF_GP_INFLIGHT_KEY, goroutine => OFFSETOF_GP_INFLIGHT_KEY_GOROUTINE,
    tgid => OFFSETOF_GP_INFLIGHT_KEY_TGID, func_id => OFFSETOF_GP_INFLIGHT_KEY_FUNC_ID);
check_layout!(GpInflight, SIZEOF_GP_INFLIGHT, depth => OFFSETOF_GP_INFLIGHT_DEPTH,
    overflow => OFFSETOF_GP_INFLIGHT_OVERFLOW, ts => OFFSETOF_GP_INFLIGHT_TS,
    call_id => OFFSETOF_GP_INFLIGHT_CALL_ID, fbits => OFFSETOF_GP_INFLIGHT_FBITS);
check_layout!(GpOut, SIZEOF_GP_OUT, trace => OFFSETOF_GP_OUT_TRACE, span => OFFSETOF_GP_OUT_SPAN,
    map => OFFSETOF_GP_OUT_MAP, writer => OFFSETOF_GP_OUT_WRITER, ts => OFFSETOF_GP_OUT_TS,
    flags => OFFSETOF_GP_OUT_FLAGS);
check_layout!(GpOutKey, SIZEOF_GP_OUT_KEY, writer => OFFSETOF_GP_OUT_KEY_WRITER,
    tgid => OFFSETOF_GP_OUT_KEY_TGID);
check_layout!(GpSpanCtx, SIZEOF_GP_SPAN_CTX, depth => OFFSETOF_GP_SPAN_CTX_DEPTH,
    flags => OFFSETOF_GP_SPAN_CTX_FLAGS,
    trace => OFFSETOF_GP_SPAN_CTX_TRACE, span => OFFSETOF_GP_SPAN_CTX_SPAN,
    call_id => OFFSETOF_GP_SPAN_CTX_CALL_ID);
