//! The BPF read of one C value, wherever it is (a register, the stack, a USDT argument's
//! memory operand or constant), by its C type: shared by C functions and USDT probes.

use gprobe_crds::ctype::{CClass, CType};

use crate::abi::{self, GpCapture, GpLoc};
use crate::plan::{CapturePlan, Decode};
use crate::resolve::error::{CProblem, PlanError};

/// The size and sign the value has where it is read (a USDT argument's `N@`), where they
/// may differ from its C type's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Width {
    pub size: u8,
    pub signed: bool,
}

fn max_len(max_string_bytes: u32) -> u16 {
    max_string_bytes.min(abi::GP_MAX_STR as u32) as u16
}

/// The capture of `name`, of C type `ty` (or, without one, an integer of `width`), read at
/// `loc`.
pub(crate) fn value(
    symbol: &str,
    name: &str,
    ty: Option<&CType>,
    loc: GpLoc,
    width: Option<Width>,
    max_string_bytes: u32,
) -> Result<CapturePlan, PlanError> {
    let class = match (ty, width) {
        (Some(t), _) => t.class(),
        (None, Some(w)) => CClass::Int {
            size: w.size,
            signed: w.signed,
        },
        (None, None) => CClass::Int {
            size: 8,
            signed: false,
        },
    };
    let problem = |problem| PlanError::CUncapturable {
        symbol: symbol.to_string(),
        name: name.to_string(),
        type_name: ty.map_or_else(|| class.to_string(), |t| t.to_string()),
        problem,
    };
    let word = |size: u8, decode: Decode| CapturePlan {
        name: name.to_string(),
        decode,
        bpf: GpCapture {
            kind: abi::CAP_WORD,
            size,
            loc: [loc, GpLoc::default()],
            ..Default::default()
        },
    };
    // Where the value is narrower than its type says (a USDT `4@` for a long), the bytes
    // that are there are what can be read.
    let size_of = |type_size: u8| width.map_or(type_size, |w| w.size.min(type_size));
    match class {
        CClass::Void => Err(problem(CProblem::Void)),
        CClass::Bool => Ok(word(size_of(1), Decode::Bool)),
        CClass::Int { size, signed } if size <= 8 => {
            let size = size_of(size);
            Ok(word(size, Decode::Int { size, signed }))
        }
        CClass::Int { .. } => Err(problem(CProblem::TooWide)),
        CClass::Pointer => Ok(word(8, Decode::Pointer)),
        CClass::CString => Ok(CapturePlan {
            name: name.to_string(),
            // The record holds the string's bytes (up to its NUL) like a Go string's.
            decode: Decode::Str,
            bpf: GpCapture {
                kind: abi::CAP_CSTR,
                size: 8,
                max_len: max_len(max_string_bytes),
                loc: [loc, GpLoc::default()],
                ..Default::default()
            },
        }),
        CClass::Float {
            size: size @ (4 | 8),
        } => Ok(word(size, Decode::Float { size })),
        CClass::Float { .. } => Err(problem(CProblem::TooWide)),
        CClass::Aggregate { .. } => Err(problem(CProblem::Aggregate)),
        CClass::Unknown { .. } => Err(problem(CProblem::UnknownType)),
    }
}

/// The capture `NAME[:LEN]`: `LEN` bytes at the pointer at `ptr`, the length read at `len`
/// (`len_width.size` bytes of it). A signed length that is negative reads nothing: the
/// value is marked invalid (`CAPF_LEN_SIGNED`), never read as a huge unsigned one.
pub(crate) fn bytes(
    name: &str,
    ptr: GpLoc,
    len: GpLoc,
    len_width: Width,
    max_string_bytes: u32,
) -> CapturePlan {
    CapturePlan {
        name: name.to_string(),
        decode: Decode::Bytes,
        bpf: GpCapture {
            kind: abi::CAP_BYTES,
            size: len_width.size,
            max_len: max_len(max_string_bytes),
            flags: if len_width.signed {
                abi::CAPF_LEN_SIGNED
            } else {
                0
            },
            loc: [ptr, len],
            ..Default::default()
        },
    }
}

pub(crate) fn reg_loc(reg: u8) -> GpLoc {
    GpLoc {
        kind: abi::LOC_REG,
        reg,
        ..Default::default()
    }
}

pub(crate) fn mem_loc(reg: u8, off: i32) -> GpLoc {
    GpLoc {
        kind: abi::LOC_MEM,
        reg,
        off,
        ..Default::default()
    }
}

pub(crate) fn const_loc(value: i32) -> GpLoc {
    GpLoc {
        kind: abi::LOC_CONST,
        off: value,
        ..Default::default()
    }
}
