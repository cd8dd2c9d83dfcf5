//! Go's stack-growth check: `CMP reg, [R14+0x10]` (the goroutine's stack guard) then a
//! Jcc to the morestack call, within a function's first instructions. A probe after it
//! fires once per call; one at the entry fires again when the stack grows and the
//! function restarts.

use crate::resolve::sites::is_jcc;
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, Register};

/// How many leading instructions may hold the check.
const PROLOGUE_INSNS: usize = 8;

/// Go's stack-growth check in a function: where its conditional jump is, and the first
/// instruction after it. Offsets from the function's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StackCheck {
    pub jcc: u64,
    pub body: u64,
}

/// The stack-growth check of `code`, or `None` when the function has none (leaf
/// functions, `//go:nosplit`, non-Go code).
pub(crate) fn stack_check(code: &[u8]) -> Option<StackCheck> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut seen_cmp = false;
    for _ in 0..PROLOGUE_INSNS {
        if !decoder.can_decode() {
            break;
        }
        decoder.decode_out(&mut insn);
        if !seen_cmp {
            seen_cmp = insn.mnemonic() == Mnemonic::Cmp
                && insn.memory_base() == Register::R14
                && insn.memory_index() == Register::None
                && insn.memory_displacement64() == 0x10;
        } else if is_jcc(insn.mnemonic()) {
            return Some(StackCheck {
                jcc: insn.ip(),
                body: insn.next_ip(),
            });
        }
    }
    None
}

/// The offset of the first instruction after the stack-growth check of `code`, or 0 when
/// the function has none.
pub(crate) fn body_offset(code: &[u8]) -> u64 {
    stack_check(code).map_or(0, |c| c.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_frame_check() {
        // CMP RSP,[R14+0x10]; JBE +0x20; PUSH RBP; MOV RBP,RSP; POP RBP; RET
        let code = [
            0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3,
        ];
        assert_eq!(body_offset(&code), 6);
        assert_eq!(stack_check(&code), Some(StackCheck { jcc: 4, body: 6 }));
    }

    #[test]
    fn large_frame_check() {
        // LEA R12,[RSP-0x1000]; CMP R12,[R14+0x10]; JBE rel32; NOP; RET 8
        let code = [
            0x4c, 0x8d, 0xa4, 0x24, 0x00, 0xf0, 0xff, 0xff, // lea r12,[rsp-0x1000]
            0x4d, 0x3b, 0x66, 0x10, // cmp r12,[r14+0x10]
            0x0f, 0x86, 0x10, 0x00, 0x00, 0x00, // jbe
            0x90, // nop
            0xc2, 0x08, 0x00, // ret 8
        ];
        assert_eq!(body_offset(&code), 18);
        assert_eq!(stack_check(&code), Some(StackCheck { jcc: 12, body: 18 }));
    }

    #[test]
    fn no_check() {
        // MOV EAX,0xC3C3C3C3; RET
        assert_eq!(body_offset(&[0xb8, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3]), 0);
        // TEST RAX,RAX; JE +2; RET: a Jcc without the CMP is not a check.
        assert_eq!(body_offset(&[0x48, 0x85, 0xc0, 0x74, 0x02, 0xc3]), 0);
    }
}
