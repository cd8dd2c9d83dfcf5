//! The check a USDT note's pc passes before a uprobe goes there: sys/sdt.h puts a `nop` at
//! the probe's place and records its address, so the pc must be code, be the start of an
//! instruction of the function holding it (decoded from that function's start, as every
//! probe site of gprobe is), and that instruction must be a `nop`. A note that says
//! otherwise was not written by sys/sdt.h for this code (forged, or the file was rewritten):
//! a breakpoint at a byte inside an instruction changes what the program computes.

use super::error::SiteProblem;
use crate::resolve::elf::ElfFile;
use crate::resolve::unwind::FunctionStarts;
use crate::resolve::x86::{self, AtSite};

/// Ok when a uprobe at `pc` replaces a `nop` at an instruction boundary; else the reason.
pub(super) fn probe_instruction(
    elf: &ElfFile,
    starts: &FunctionStarts,
    pc: u64,
) -> Result<(), SiteProblem> {
    if elf.check_x86_64().is_err() {
        return Err(SiteProblem::NotX86);
    }
    if !elf.is_code(pc) {
        return Err(SiteProblem::PcNotCode { pc });
    }
    let Some(f) = starts.enclosing(elf, pc) else {
        return Err(SiteProblem::NoFunction { pc });
    };
    let Some((_, code)) = elf.code(f.start, f.end - f.start) else {
        return Err(SiteProblem::FunctionNotInFile {
            function: f.what,
            start: f.start,
            end: f.end,
        });
    };
    let bytes = |at: u64, len: usize| {
        let i = (at - f.start) as usize;
        code.get(i..i + len).unwrap_or_default().to_vec()
    };
    match x86::at_site(code, pc - f.start) {
        AtSite::Starts { nop: true, .. } => Ok(()),
        AtSite::Starts { len, nop: false } => Err(SiteProblem::NotNop {
            pc,
            bytes: bytes(pc, len),
            function: f.what,
        }),
        AtSite::Inside { start, len } => {
            let start = f.start + start;
            Err(SiteProblem::InsideInstruction {
                pc,
                start,
                bytes: bytes(start, len),
                function: f.what,
                function_start: f.start,
            })
        }
        AtSite::Invalid => Err(SiteProblem::Invalid {
            pc,
            function: f.what,
            function_start: f.start,
        }),
    }
}
