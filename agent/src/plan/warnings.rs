//! What the user should know about a plan that still attaches: the planners' warnings.

use std::fmt;

use crate::gosym::go_package;

/// Something the user should know about a plan that still attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanWarning {
    /// The function exists, but the compiler also inlined it at `count` call sites: calls
    /// through those run a copy of its body and are not seen.
    InlinedCallSites { symbol: String, count: usize },
    /// A handler's captures leave no room for the hidden one that reads the incoming
    /// traceparent: its spans start their own traces.
    NoRoomForTraceparent { symbol: String },
    /// The probe's signature and the binary's DWARF describe different parameters or
    /// results; DWARF was used.
    SignatureDisagreesWithDwarf {
        symbol: String,
        differences: Vec<SignatureDifference>,
    },
    /// A USDT probe's signature gives an argument a type of another size than its note:
    /// the note's size is read (at most the type's).
    UsdtArgSize {
        point: String,
        name: String,
        type_name: String,
        type_size: u8,
        note_size: u8,
    },
}

/// One way a probe's signature differs from DWARF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureDifference {
    ParamCount {
        signature: usize,
        dwarf: usize,
    },
    ResultCount {
        signature: usize,
        dwarf: usize,
    },
    /// Parameter `index` (0-based) is laid out differently (registers, stack slots or size).
    Param {
        index: usize,
        signature: String,
        dwarf: String,
    },
    Result {
        index: usize,
        signature: String,
        dwarf: String,
    },
}

impl fmt::Display for SignatureDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureDifference::ParamCount { signature, dwarf } => write!(
                f,
                "the signature has {signature} parameter(s), DWARF {dwarf}"
            ),
            SignatureDifference::ResultCount { signature, dwarf } => {
                write!(f, "the signature has {signature} result(s), DWARF {dwarf}")
            }
            SignatureDifference::Param {
                index,
                signature,
                dwarf,
            } => write!(
                f,
                "parameter {index} is {signature} in the signature but {dwarf} in DWARF"
            ),
            SignatureDifference::Result {
                index,
                signature,
                dwarf,
            } => write!(
                f,
                "result {index} is {signature} in the signature but {dwarf} in DWARF"
            ),
        }
    }
}

impl fmt::Display for PlanWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanWarning::NoRoomForTraceparent { symbol } => write!(
                f,
                "{symbol}: the incoming traceparent is not read (its spans start their own \
                 traces): the probe's captures leave no room for it; capture fewer values or \
                 lower limits.maxStringBytes"
            ),
            PlanWarning::InlinedCallSites { symbol, count } => write!(
                f,
                "{symbol}: the compiler also inlined it at {count} call site(s); calls through \
                 those run a copy of its body and are not seen (rebuild with \
                 -gcflags='{}=-l' to see them)",
                go_package(symbol)
            ),
            PlanWarning::SignatureDisagreesWithDwarf {
                symbol,
                differences,
            } => {
                write!(f, "{symbol}: the probe's signature disagrees with DWARF (")?;
                for (i, d) in differences.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("); DWARF was used, capture names of the signature map to DWARF's parameters by position")
            }
            PlanWarning::UsdtArgSize {
                point,
                name,
                type_name,
                type_size,
                note_size,
            } => write!(
                f,
                "{point}: argument {name} is {type_name} ({type_size} bytes) in the signature but \
                {note_size} bytes in the probe's note; {} bytes are read",
                type_size.min(note_size)
            ),
        }
    }
}
