//! What an entry probe's site costs the traced program, and where the cheap site is.
//!
//! A uprobe traps on every call; what the trap costs depends on the instruction under it.
//! The kernel emulates a few instructions (branches since uprobes began, `push` and `nop`
//! on recent kernels: about 1 µs per call) and single-steps every other one out of line
//! (10-20 µs). Which ones this kernel emulates is measured when gprobe starts (a uprobe on
//! each kind of instruction in gprobe's own code, `attach/selftest.rs`), not assumed: until
//! it is known, every site stays where it always was (the instruction after Go's stack
//! check, a C function's first byte), and a site's class says "unmeasured".
//!
//! The sites that move (docs/DESIGN.md, "Probe sites"):
//! - A Go function with a stack check: the check's conditional jump, when the kernel
//!   emulates branches. The jump is taken when the stack must grow; the function then
//!   restarts after `morestack` and reaches the jump again, so BPF skips a hit where the
//!   flags say it is taken (`gp_probe_cfg.jcc`): one record per call. The registers and the
//!   stack pointer at the jump are those at the entry (the check reads them, it changes
//!   none the Go ABI passes arguments in).
//! - A C function that starts with `endbr64` (CET): the instruction after it, when that one
//!   is emulated and no branch of the function jumps to it (a loop the compiler made of a
//!   tail call would enter there, and each turn would count as a call). `endbr64` changes
//!   no register nor memory, so the arguments and the return address read the same.

use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use std::sync::OnceLock;

/// Where uprobes go in one function. All offsets are file offsets (what a uprobe takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSites {
    /// The first instruction.
    pub entry_offset: u64,
    /// The first instruction after Go's stack-growth check (`CMP ..., [R14+0x10]; Jcc`);
    /// equal to `entry_offset` when the function has none. A probe here fires once per
    /// call, where the entry fires again after the stack grows.
    pub body_offset: u64,
    /// Every RET (C3 / C2 iw) of the function.
    pub ret_offsets: Vec<u64>,
    /// Where the entry probe goes on this kernel (this module): the stack check's jump when
    /// the kernel emulates branches, else `body_offset`.
    pub entry: EntryProbe,
    /// How the kernel runs a RET probe (the same for every RET).
    pub ret_class: SiteClass,
}

/// The site of an entry probe and what a hit there costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryProbe {
    /// File offset.
    pub offset: u64,
    /// The site is the stack check's conditional jump, of this condition (0-15): a hit
    /// where it is taken is no call (the function restarts after `morestack`).
    pub jcc: Option<u8>,
    pub class: SiteClass,
}

// The classes and costs are part of the plan (`crate::plan`); classifying sites is done here.
pub use crate::plan::costs::{KernelSites, SiteClass, SiteCosts};

static KERNEL: OnceLock<KernelSites> = OnceLock::new();

/// Records what the start-up measurement found (once per process; later calls are
/// ignored: sites already planned must not change under the probes).
pub fn set_kernel(k: KernelSites) {
    let _ = KERNEL.set(k);
}

/// What was measured, or `None` before (and without) a measurement.
pub fn kernel() -> Option<KernelSites> {
    KERNEL.get().copied()
}

/// "entry emulated ~900 ns a call, return single-stepped ~4400 ns a call": for the attach
/// log.
pub fn describe(c: SiteCosts, k: Option<KernelSites>) -> String {
    let one = |what: &str, class: SiteClass| match class.cost_ns(k) {
        0 => format!("{what} {}", class.as_str()),
        ns => format!("{what} {} ~{ns} ns a call", class.as_str()),
    };
    match c.ret {
        Some(r) => format!("{}, {}", one("entry", c.entry), one("return", r)),
        None => one("entry", c.entry),
    }
}

/// What gprobe's program costs per hit beyond the trap, for overhead budgets: about 256 ns
/// for a probe with an integer capture, less the 63 ns of an empty program that the
/// self-test's trap already includes (BENCHMARKS.md, "BPF run time per hit").
pub const PROGRAM_NS: u32 = 200;

/// The instruction kinds whose emulation is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Jcc,
    Push,
    Nop,
    Other,
}

fn kind_of(insn: &Instruction) -> Kind {
    if is_jcc(insn.mnemonic()) {
        Kind::Jcc
    } else if insn.code() == Code::Push_r64 {
        Kind::Push
    } else if insn.code() == Code::Nopd && insn.len() == 1 {
        Kind::Nop
    } else {
        Kind::Other
    }
}

pub(crate) fn is_jcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Ja | Jae | Jb | Jbe | Je | Jne | Jg | Jge | Jl | Jle | Jo | Jno | Jp | Jnp | Js | Jns
    )
}

/// The class of the instruction at `site` of `code` (a function from its first byte) on
/// the kernel described by `k`.
pub fn class_at(code: &[u8], site: u64, k: Option<KernelSites>) -> SiteClass {
    let Some(k) = k else {
        return SiteClass::Unmeasured;
    };
    let Some(insn) = decode_at(code, site) else {
        return SiteClass::SingleStepped;
    };
    match kind_of(&insn) {
        Kind::Jcc if k.jcc => SiteClass::Emulated,
        Kind::Push if k.push => SiteClass::Emulated,
        Kind::Nop if k.nop => SiteClass::Emulated,
        _ => SiteClass::SingleStepped,
    }
}

/// The instruction at offset `site`, decoded on its own (the caller checked that `site` is
/// an instruction boundary).
fn decode_at(code: &[u8], site: u64) -> Option<Instruction> {
    let bytes = code.get(site as usize..)?;
    let mut d = Decoder::with_ip(64, bytes, site, DecoderOptions::NONE);
    let insn = d.decode();
    (!insn.is_invalid()).then_some(insn)
}

/// The condition code (0-15, as in the Jcc opcode's low nibble) of a conditional jump.
pub fn jcc_condition(code: &[u8], site: u64) -> Option<u8> {
    let insn = decode_at(code, site)?;
    if kind_of(&insn) != Kind::Jcc {
        return None;
    }
    // The condition is the opcode's low nibble: 70+cc (rel8) or 0F 80+cc (rel32), the last
    // opcode byte before the displacement, after any prefixes.
    let b = code.get(site as usize..site as usize + insn.len())?;
    let disp = if insn.op0_kind() == OpKind::NearBranch64 && b.len() >= 6 && b[b.len() - 6] == 0x0f
    {
        4
    } else {
        1
    };
    let op = *b.get(b.len().checked_sub(disp + 1)?)?;
    let opcodes = if disp == 4 { 0x80..=0x8f } else { 0x70..=0x7f };
    opcodes.contains(&op).then_some(op & 0x0f)
}

/// Whether a direct branch (jump, conditional jump or call) of `code` targets `site`.
pub fn branched_to(code: &[u8], site: u64) -> bool {
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut insn);
        let branch =
            is_jcc(insn.mnemonic()) || matches!(insn.mnemonic(), Mnemonic::Jmp | Mnemonic::Call);
        let direct = branch && insn.op0_kind() == OpKind::NearBranch64;
        if direct && insn.near_branch_target() == site {
            return true;
        }
    }
    false
}

/// Where a C function's entry probe goes: after a leading `endbr64` when the instruction
/// after it is one this kernel emulates and no branch of the function enters there; else
/// the first byte. Returns the offset from the function's first byte.
pub fn c_entry(code: &[u8], k: Option<KernelSites>) -> u64 {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    if !code.starts_with(&ENDBR64) || code.len() <= ENDBR64.len() {
        return 0;
    }
    let after = ENDBR64.len() as u64;
    if class_at(code, after, k) == SiteClass::Emulated && !branched_to(code, after) {
        after
    } else {
        0
    }
}

/// The flags-register bits a condition reads.
const CF: u64 = 1 << 0;
const PF: u64 = 1 << 2;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;

/// Whether a Jcc of condition `cc` jumps with `flags` (x86 EFLAGS). The BPF program
/// decides the same (`jcc_taken` in gprobe.bpf.c); the e2e tests hold both to real calls.
pub fn jcc_taken(cc: u8, flags: u64) -> bool {
    let f = |bit: u64| flags & bit != 0;
    let taken = match cc >> 1 {
        0 => f(OF),
        1 => f(CF),
        2 => f(ZF),
        3 => f(CF) || f(ZF),
        4 => f(SF),
        5 => f(PF),
        6 => f(SF) != f(OF),
        _ => f(ZF) || f(SF) != f(OF),
    };
    taken != (cc & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Option<KernelSites> = Some(KernelSites {
        jcc: true,
        push: true,
        nop: true,
        emulated_ns: 1000,
        single_step_ns: 15000,
    });

    #[test]
    fn conditions_of_short_and_near_jumps() {
        // JBE rel8 (76), JBE rel32 (0F 86), JO rel8 (70), JG rel32 (0F 8F).
        assert_eq!(jcc_condition(&[0x76, 0x20], 0), Some(6));
        assert_eq!(jcc_condition(&[0x0f, 0x86, 0x10, 0, 0, 0], 0), Some(6));
        assert_eq!(jcc_condition(&[0x70, 0x00], 0), Some(0));
        assert_eq!(jcc_condition(&[0x0f, 0x8f, 0x10, 0, 0, 0], 0), Some(15));
        // JMP rel8 and PUSH RBP are no conditional jumps.
        assert_eq!(jcc_condition(&[0xeb, 0x00], 0), None);
        assert_eq!(jcc_condition(&[0x55], 0), None);
    }

    #[test]
    fn every_condition_against_its_definition() {
        // The flag combinations of a CMP, and what each condition means on them.
        for flags in 0..(1u64 << 12) {
            let f = |b: u64| flags & b != 0;
            let want = [
                f(OF),
                !f(OF),
                f(CF),
                !f(CF),
                f(ZF),
                !f(ZF),
                f(CF) || f(ZF),
                !f(CF) && !f(ZF),
                f(SF),
                !f(SF),
                f(PF),
                !f(PF),
                f(SF) != f(OF),
                f(SF) == f(OF),
                f(ZF) || f(SF) != f(OF),
                !f(ZF) && f(SF) == f(OF),
            ];
            for (cc, w) in want.iter().enumerate() {
                assert_eq!(jcc_taken(cc as u8, flags), *w, "cc {cc} flags {flags:#x}");
            }
        }
    }

    #[test]
    fn classes_follow_the_measurement() {
        let code = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x55, 0x90, 0xc3];
        assert_eq!(class_at(&code, 0, K), SiteClass::SingleStepped);
        assert_eq!(class_at(&code, 7, K), SiteClass::Emulated);
        assert_eq!(class_at(&code, 8, K), SiteClass::SingleStepped);
        assert_eq!(class_at(&code, 4, K), SiteClass::Emulated);
        assert_eq!(class_at(&code, 6, K), SiteClass::Emulated);
        assert_eq!(class_at(&code, 4, None), SiteClass::Unmeasured);
        let no_push = Some(KernelSites {
            push: false,
            ..K.unwrap()
        });
        assert_eq!(class_at(&code, 6, no_push), SiteClass::SingleStepped);
    }

    #[test]
    fn a_c_entry_moves_past_endbr64_only_onto_an_emulated_instruction_nothing_jumps_to() {
        // ENDBR64; PUSH RBP; MOV RBP,RSP; POP RBP; RET
        let framed = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        assert_eq!(c_entry(&framed, K), 4);
        assert_eq!(c_entry(&framed, None), 0);
        // ENDBR64; CMP EDI,1; JLE +3; DEC EDI; JMP -9 (back to the CMP at 4); RET
        let looped = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x83, 0xff, 0x01, 0x7e, 0x04, 0xff, 0xcf, 0xeb, 0xf7, 0xc3,
        ];
        assert!(branched_to(&looped, 4));
        assert_eq!(c_entry(&looped, K), 0);
        // A PUSH RBP entered by a loop.
        let loop_to_push = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x5d, 0xeb, 0xfc, 0xc3];
        assert!(branched_to(&loop_to_push, 4));
        assert_eq!(c_entry(&loop_to_push, K), 0);
        // No ENDBR64: the first byte.
        assert_eq!(c_entry(&[0x55, 0xc3], K), 0);
        // ENDBR64 then a single-stepped SUB RSP,8.
        assert_eq!(
            c_entry(&[0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08, 0xc3], K),
            0
        );
    }
}
