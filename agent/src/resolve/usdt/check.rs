//! The check a USDT note's pc passes before a uprobe goes there: sys/sdt.h puts a `nop` at
//! the probe's place and records its address, so the pc must be code, be the start of an
//! instruction of the function holding it (decoded from that function's start, as every
//! probe site of gprobe is), and that instruction must be a `nop`. A note that says
//! otherwise was not written by sys/sdt.h for this code (forged, or the file was rewritten):
//! a breakpoint at a byte inside an instruction changes what the program computes.

use crate::resolve::elf::ElfFile;
use crate::resolve::unwind::FunctionStarts;
use crate::resolve::x86::{self, AtSite};

/// Ok when a uprobe at `pc` replaces a `nop` at an instruction boundary; else the reason.
pub(super) fn probe_instruction(
    elf: &ElfFile,
    starts: &FunctionStarts,
    pc: u64,
) -> Result<(), String> {
    if elf.check_x86_64().is_err() {
        return Err("gprobe decodes x86-64 code only".into());
    }
    if !elf.is_code(pc) {
        return Err(format!(
            "its pc {pc:#x} is not in an executable section of the file"
        ));
    }
    let Some(f) = starts.enclosing(elf, pc) else {
        return Err(format!(
            "no function symbol or unwind entry (.eh_frame) covers its pc {pc:#x}, so that \
             an instruction starts there cannot be proven by decoding from a function's start"
        ));
    };
    let Some((_, code)) = elf.code(f.start, f.end - f.start) else {
        return Err(format!(
            "the function holding its pc ({}, [{:#x}, {:#x})) is not in the file",
            f.what, f.start, f.end
        ));
    };
    let bytes = |at: u64, len: usize| {
        let i = (at - f.start) as usize;
        code.get(i..i + len)
            .unwrap_or_default()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match x86::at_site(code, pc - f.start) {
        AtSite::Starts { nop: true, .. } => Ok(()),
        AtSite::Starts { len, nop: false } => Err(format!(
            "its pc {pc:#x} is the instruction [{}] of {}, not the `nop` that sys/sdt.h puts \
             at a probe",
            bytes(pc, len),
            f.what
        )),
        AtSite::Inside { start, len } => {
            let start = f.start + start;
            Err(format!(
                "its pc {pc:#x} is inside the instruction [{}] at {start:#x} of {} (decoded from \
             its start {:#x}): a breakpoint there would corrupt that instruction",
                bytes(start, len),
                f.what,
                f.start
            ))
        }
        AtSite::Invalid => Err(format!(
            "no valid instruction starts at its pc {pc:#x} in {} (decoded from its start {:#x})",
            f.what, f.start
        )),
    }
}
