//! The mirror of a compiled `when:` predicate (`struct gp_filter` in gprobe.h) and of the
//! values its terms test (`struct gp_fvals`), checked against the C layout like the rest
//! of the ABI. agent/src/filter compiles predicates into these; filter.h evaluates them.

use super::layout as c;

pub const FILTER_TERMS: usize = c::GP_FILTER_TERMS;
pub const FILTER_OPS: usize = c::GP_FILTER_OPS;
pub const FILTER_STR: usize = c::GP_FILTER_STR;

// The parser of `when:` refuses what the BPF program cannot hold, in every mode (and
// without a binary): its limits are these.
const _: () = assert!(FILTER_TERMS == gprobe_crds::when::MAX_TERMS);
const _: () = assert!(FILTER_OPS == gprobe_crds::when::MAX_STEPS);
const _: () = assert!(FILTER_STR == gprobe_crds::when::MAX_STRING_BYTES);

/// `gp_filter_term.test`.
pub const FT_EQ: u8 = c::GP_FT_EQ as u8;
pub const FT_NE: u8 = c::GP_FT_NE as u8;
pub const FT_LT: u8 = c::GP_FT_LT as u8;
pub const FT_LE: u8 = c::GP_FT_LE as u8;
pub const FT_GT: u8 = c::GP_FT_GT as u8;
pub const FT_GE: u8 = c::GP_FT_GE as u8;
pub const FT_STR_EQ: u8 = c::GP_FT_STR_EQ as u8;
pub const FT_STR_NE: u8 = c::GP_FT_STR_NE as u8;
pub const FT_PREFIX: u8 = c::GP_FT_PREFIX as u8;
pub const FT_NIL: u8 = c::GP_FT_NIL as u8;
pub const FT_NOT_NIL: u8 = c::GP_FT_NOT_NIL as u8;
pub const FT_TRUE: u8 = c::GP_FT_TRUE as u8;
pub const FT_FALSE: u8 = c::GP_FT_FALSE as u8;
/// `gp_filter_term.flags`: compare as signed.
pub const FTF_SIGNED: u8 = c::GP_FTF_SIGNED as u8;
/// `gp_filter_term.flags`: the value is a string (its bytes).
pub const FTF_STR: u8 = c::GP_FTF_STR as u8;
/// `gp_filter_term.flags`: `len(x)` of a nil map or channel is 0.
pub const FTF_NIL_ZERO: u8 = c::GP_FTF_NIL_ZERO as u8;

/// `gp_filter_term.cap`: the call's duration (at the return).
pub const FCAP_DURATION: u8 = c::GP_FCAP_DURATION as u8;
/// `gp_filter_term.cap`: decided at the entry (its truth carried to the return).
pub const FCAP_ENTRY: u8 = c::GP_FCAP_ENTRY as u8;
/// `gp_filter_term.cap`: not known at this site.
pub const FCAP_NONE: u8 = c::GP_FCAP_NONE as u8;

/// `gp_filter.ops`: below [`FILTER_TERMS`], push that term's truth.
pub const FOP_NOT: u8 = c::GP_FOP_NOT as u8;
pub const FOP_AND: u8 = c::GP_FOP_AND as u8;
pub const FOP_OR: u8 = c::GP_FOP_OR as u8;

/// What filter.h's evaluation returns.
pub const TRUTH_FALSE: u32 = c::GP_TRUTH_FALSE as u32;
pub const TRUTH_TRUE: u32 = c::GP_TRUTH_TRUE as u32;
pub const TRUTH_UNKNOWN: u32 = c::GP_TRUTH_UNKNOWN as u32;

/// `gp_fval.state`.
pub const FV_UNKNOWN: u8 = c::GP_FV_UNKNOWN as u8;
pub const FV_KNOWN: u8 = c::GP_FV_KNOWN as u8;
pub const FV_UNREADABLE: u8 = c::GP_FV_UNREADABLE as u8;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpFilterTerm {
    pub test: u8,
    pub flags: u8,
    pub len: u8,
    pub cap: u8,
    pub vsize: u8,
    pub _pad: [u8; 3],
    pub lit: u64,
    pub str: [u8; FILTER_STR],
}

impl Default for GpFilterTerm {
    fn default() -> Self {
        Self {
            test: FT_FALSE,
            flags: 0,
            len: 0,
            cap: FCAP_NONE,
            vsize: 8,
            _pad: [0; 3],
            lit: 0,
            str: [0; FILTER_STR],
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpFilter {
    pub n_terms: u8,
    pub n_ops: u8,
    pub n_out: u8,
    pub _pad: [u8; 5],
    pub ops: [u8; FILTER_OPS],
    pub terms: [GpFilterTerm; FILTER_TERMS],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpFval {
    pub word: u64,
    pub len: u32,
    pub state: u8,
    pub n: u8,
    pub _pad: [u8; 2],
    pub bytes: [u8; FILTER_STR],
}

impl Default for GpFval {
    fn default() -> Self {
        Self {
            word: 0,
            len: 0,
            state: FV_UNKNOWN,
            n: 0,
            _pad: [0; 2],
            bytes: [0; FILTER_STR],
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpFvals {
    pub v: [GpFval; FILTER_TERMS],
}

check_layout!(GpFilterTerm, SIZEOF_GP_FILTER_TERM, test => OFFSETOF_GP_FILTER_TERM_TEST,
    flags => OFFSETOF_GP_FILTER_TERM_FLAGS, len => OFFSETOF_GP_FILTER_TERM_LEN,
    cap => OFFSETOF_GP_FILTER_TERM_CAP, vsize => OFFSETOF_GP_FILTER_TERM_VSIZE,
    lit => OFFSETOF_GP_FILTER_TERM_LIT, str => OFFSETOF_GP_FILTER_TERM_STR);
check_layout!(GpFilter, SIZEOF_GP_FILTER, n_terms => OFFSETOF_GP_FILTER_N_TERMS,
    n_ops => OFFSETOF_GP_FILTER_N_OPS, n_out => OFFSETOF_GP_FILTER_N_OUT, ops => OFFSETOF_GP_FILTER_OPS,
    terms => OFFSETOF_GP_FILTER_TERMS);
check_layout!(GpFval, SIZEOF_GP_FVAL, word => OFFSETOF_GP_FVAL_WORD, len => OFFSETOF_GP_FVAL_LEN,
    state => OFFSETOF_GP_FVAL_STATE, n => OFFSETOF_GP_FVAL_N, bytes => OFFSETOF_GP_FVAL_BYTES);
check_layout!(GpFvals, SIZEOF_GP_FVALS, v => OFFSETOF_GP_FVALS_V);
