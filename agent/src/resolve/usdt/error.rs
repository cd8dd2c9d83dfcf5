//! Why a `.note.stapsdt` section cannot be read, and why one site of a USDT probe cannot
//! be probed. Only error types are imported here (`elf_error.rs`), so that
//! `resolve/error.rs` can wrap these without importing the modules that produce them.

use crate::resolve::elf_error::NoteError;

/// What is wrong with a `.note.stapsdt` section: nothing in it can be trusted then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StapsdtError {
    #[error("the section (+{size:#x} bytes) is past the end of the file")]
    SectionPastEnd { size: usize },
    /// The section is not a well-formed list of notes.
    #[error(transparent)]
    Notes(#[from] NoteError),
    /// A stapsdt note whose descriptor is not three addresses and three strings.
    #[error("stapsdt note {index} at offset {offset:#x}: {problem}")]
    Note {
        index: usize,
        offset: usize,
        problem: NoteProblem,
    },
}

/// What is wrong with the descriptor of one stapsdt note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoteProblem {
    #[error("its descriptor has {len} bytes, less than its three addresses (24)")]
    ShortDescriptor { len: usize },
    #[error("its provider name has no terminating NUL")]
    ProviderUnterminated,
    #[error("its probe name has no terminating NUL")]
    NameUnterminated,
    #[error("its provider or probe name is empty")]
    EmptyName,
}

/// Why a site of a USDT probe cannot be probed: its pc or semaphore is not where it must
/// be, or its pc is not the start of the `nop` that sys/sdt.h puts there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteProblem {
    #[error("its pc {pc:#x} is in a segment that is not executable")]
    PcNotExecutable { pc: u64 },
    #[error("its pc {pc:#x} is outside every loadable segment")]
    PcUnmapped { pc: u64 },
    #[error("its semaphore {semaphore:#x} is in an executable segment")]
    SemaphoreExecutable { semaphore: u64 },
    #[error("its semaphore {semaphore:#x} is outside every loadable segment")]
    SemaphoreUnmapped { semaphore: u64 },
    #[error("gprobe decodes x86-64 code only")]
    NotX86,
    #[error("its pc {pc:#x} is not in an executable section of the file")]
    PcNotCode { pc: u64 },
    #[error(
        "no function symbol or unwind entry (.eh_frame) covers its pc {pc:#x}, so that an \
        instruction starts there cannot be proven by decoding from a function's start"
    )]
    NoFunction { pc: u64 },
    /// `function`: what said where the function is (its symbol, or the unwind entry).
    #[error("the function holding its pc ({function}, [{start:#x}, {end:#x})) is not in the file")]
    FunctionNotInFile {
        function: String,
        start: u64,
        end: u64,
    },
    #[error(
        "its pc {pc:#x} is the instruction [{}] of {function}, not the `nop` that sys/sdt.h \
        puts at a probe",
        hex(bytes)
    )]
    NotNop {
        pc: u64,
        bytes: Vec<u8>,
        function: String,
    },
    #[error(
        "its pc {pc:#x} is inside the instruction [{}] at {start:#x} of {function} (decoded \
        from its start {function_start:#x}): a breakpoint there would corrupt that instruction",
        hex(bytes)
    )]
    InsideInstruction {
        pc: u64,
        start: u64,
        bytes: Vec<u8>,
        function: String,
        function_start: u64,
    },
    #[error("no valid instruction starts at its pc {pc:#x} in {function} (decoded from its start {function_start:#x})")]
    Invalid {
        pc: u64,
        function: String,
        function_start: u64,
    },
}

/// Instruction bytes as messages show them: `0f 1f 44 00 00`.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
