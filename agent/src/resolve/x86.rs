//! x86-64 instruction decoding for probe sites: every RET of a function (Go return probes
//! are uprobes on RETs, never uretprobes), and the check that a site is an instruction
//! boundary. The Go stack-growth check lives in `go/prologue.rs`.

use iced_x86::{Code, Decoder, DecoderOptions, Instruction};

/// Calls `on_ret(offset)` for every RET (C3 or C2 iw) of the x86-64 function `code`,
/// decoded linearly from its first byte; offsets are relative to that byte.
///
/// Most instructions are walked with [`fast_len`], a length decoder for the common
/// encodings; iced-x86 decodes anything else (VEX/EVEX, prefixed RETs, rare opcodes).
/// [`rets_iced`] is the reference it is checked against.
pub(crate) fn rets(code: &[u8], mut on_ret: impl FnMut(u64)) {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut pos = 0;
    while pos < code.len() {
        if let Some((len, ret)) = fast_len(&code[pos..]) {
            if ret {
                on_ret(pos as u64);
            }
            pos += len;
            continue;
        }
        if decoder.set_position(pos).is_err() {
            break;
        }
        decoder.set_ip(pos as u64);
        decoder.decode_out(&mut insn);
        if is_ret(&insn) {
            on_ret(pos as u64);
        }
        pos += insn.len().max(1);
    }
}

/// The reference RET scan: iced-x86 for every instruction.
pub(crate) fn rets_iced(code: &[u8], mut on_ret: impl FnMut(u64)) {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if is_ret(&insn) {
            on_ret(insn.ip());
        }
    }
}

fn is_ret(insn: &Instruction) -> bool {
    matches!(insn.code(), Code::Retnq | Code::Retnq_imm16)
}

/// Why probe sites of a function are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SiteError {
    /// The site (an offset into the code) is not where an instruction starts.
    NotBoundary(u64),
    /// The last instruction runs past the end of the function, to this offset.
    PastEnd(u64),
    /// An instruction starts at the site but does not decode (not code, or cut short).
    Invalid(u64),
}

/// Decodes `code` linearly from its first byte with iced-x86 and checks that every one of
/// `sites` (offsets into `code`) is where a valid instruction starts, and with `exact_end`
/// that the last instruction ends where the code does. A breakpoint inside an instruction
/// corrupts it; a function table that points a few bytes off decodes into a different
/// instruction stream, which often straddles the function's end (compilers pad functions
/// with whole instructions, INT3 for Go). Every probe site gprobe attaches to (Go entries,
/// bodies and RETs, C entries, USDT notes) passes here.
pub(crate) fn check_sites(code: &[u8], sites: &[u64], exact_end: bool) -> Result<(), SiteError> {
    let mut sorted = sites.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut pending = sorted.into_iter().peekable();
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        let at = decoder.position() as u64;
        let mut is_site = false;
        while let Some(&s) = pending.peek() {
            if s < at {
                return Err(SiteError::NotBoundary(s));
            }
            if s > at {
                break;
            }
            is_site = true;
            pending.next();
        }
        decoder.decode_out(&mut insn);
        if is_site && insn.is_invalid() {
            return Err(SiteError::Invalid(at));
        }
        if pending.peek().is_none() && !exact_end {
            return Ok(());
        }
    }
    // Sites at or past the end of the code.
    if let Some(s) = pending.next() {
        return Err(SiteError::NotBoundary(s));
    }
    // The decoder stops at the end of the buffer; an instruction cut there is invalid
    // and spans what was left.
    let end = decoder.position() as u64;
    if exact_end && (insn.is_invalid() || end != code.len() as u64) {
        return Err(SiteError::PastEnd(end.max(code.len() as u64 + 1)));
    }
    Ok(())
}

/// The instruction at a site, decoded linearly from the first byte of the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtSite {
    /// A valid instruction starts there.
    Starts { len: usize, nop: bool },
    /// The site is inside the instruction that starts at `start` and is `len` bytes long.
    Inside { start: u64, len: usize },
    /// What starts there does not decode (or the site is at or past the end of the code).
    Invalid,
}

/// What is at offset `site` of `code` (a function, from its first byte), decoded linearly.
pub(crate) fn at_site(code: &[u8], site: u64) -> AtSite {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        let at = decoder.position() as u64;
        decoder.decode_out(&mut insn);
        let next = decoder.position() as u64;
        if at == site {
            return if insn.is_invalid() {
                AtSite::Invalid
            } else {
                AtSite::Starts {
                    len: insn.len(),
                    nop: matches!(
                        insn.code(),
                        Code::Nopw
                            | Code::Nopd
                            | Code::Nopq
                            | Code::Nop_rm16
                            | Code::Nop_rm32
                            | Code::Nop_rm64
                    ),
                }
            };
        }
        if site < next {
            return AtSite::Inside {
                start: at,
                len: (next - at) as usize,
            };
        }
    }
    AtSite::Invalid
}

/// How the one-byte and two-byte (0F) opcode maps continue after the opcode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Let iced decode it.
    X,
    /// Nothing follows.
    N,
    /// ModRM (+ SIB + displacement).
    M,
    /// ModRM, then imm8.
    Mi8,
    /// ModRM, then imm16/32 (by operand size).
    Miz,
    I8,
    I16,
    /// imm16/32 (by operand size).
    IZ,
    /// F6/F7: ModRM, then an immediate for /0 and /1 (TEST).
    Grp3,
    /// B8+r: MOV r, imm16/32/64.
    MovImm,
    /// A0..A3: MOV with a 64-bit absolute address.
    Moffs,
    /// C8: ENTER imm16, imm8.
    Enter,
    /// 0F: two-byte map.
    Esc,
    /// 0F 38: ModRM; 0F 3A: ModRM, imm8.
    Esc38,
    Esc3A,
    /// Near branches (E8, E9, 0F 8x): rel32; iced decides when prefixed.
    Rel32,
}

const fn one_byte_map() -> [Op; 256] {
    use Op::*;
    let mut t = [X; 256];
    let mut i = 0;
    while i < 0x40 {
        // ALU ops: 00-05, 08-0D, ... 38-3D.
        t[i] = match i & 7 {
            0..=3 => M,
            4 => I8,
            5 => IZ,
            _ => X,
        };
        i += 1;
    }
    t[0x0f] = Esc;
    let mut i = 0x50;
    while i < 0x60 {
        t[i] = N; // PUSH/POP r64
        i += 1;
    }
    t[0x63] = M;
    t[0x68] = IZ;
    t[0x69] = Miz;
    t[0x6a] = I8;
    t[0x6b] = Mi8;
    t[0x6c] = N;
    t[0x6d] = N;
    t[0x6e] = N;
    t[0x6f] = N;
    let mut i = 0x70;
    while i < 0x80 {
        t[i] = I8; // Jcc rel8
        i += 1;
    }
    t[0x80] = Mi8;
    t[0x81] = Miz;
    t[0x83] = Mi8;
    let mut i = 0x84;
    while i <= 0x8f {
        t[i] = M; // 8F: POP r/m, or XOP (checked in fast_len)
        i += 1;
    }
    let mut i = 0x90;
    while i < 0xa0 {
        t[i] = N;
        i += 1;
    }
    t[0x9a] = X;
    t[0xa0] = Moffs;
    t[0xa1] = Moffs;
    t[0xa2] = Moffs;
    t[0xa3] = Moffs;
    t[0xa4] = N;
    t[0xa5] = N;
    t[0xa6] = N;
    t[0xa7] = N;
    t[0xa8] = I8;
    t[0xa9] = IZ;
    let mut i = 0xaa;
    while i < 0xb0 {
        t[i] = N;
        i += 1;
    }
    let mut i = 0xb0;
    while i < 0xb8 {
        t[i] = I8;
        i += 1;
    }
    while i < 0xc0 {
        t[i] = MovImm;
        i += 1;
    }
    t[0xc0] = Mi8;
    t[0xc1] = Mi8;
    t[0xc2] = I16;
    t[0xc3] = N;
    t[0xc6] = Mi8;
    t[0xc7] = Miz;
    t[0xc8] = Enter;
    t[0xc9] = N;
    t[0xca] = I16;
    t[0xcb] = N;
    t[0xcc] = N;
    t[0xcd] = I8;
    t[0xcf] = N;
    let mut i = 0xd0;
    while i < 0xd4 {
        t[i] = M;
        i += 1;
    }
    t[0xd7] = N;
    let mut i = 0xd8;
    while i < 0xe0 {
        t[i] = M; // x87
        i += 1;
    }
    let mut i = 0xe0;
    while i < 0xe8 {
        t[i] = I8; // LOOPcc, JRCXZ, IN/OUT imm8
        i += 1;
    }
    t[0xe8] = Rel32;
    t[0xe9] = Rel32;
    t[0xeb] = I8;
    t[0xec] = N;
    t[0xed] = N;
    t[0xee] = N;
    t[0xef] = N;
    t[0xf1] = N;
    t[0xf4] = N;
    t[0xf5] = N;
    t[0xf6] = Grp3;
    t[0xf7] = Grp3;
    let mut i = 0xf8;
    while i < 0xfe {
        t[i] = N;
        i += 1;
    }
    t[0xfe] = M;
    t[0xff] = M;
    t
}

const fn two_byte_map() -> [Op; 256] {
    use Op::*;
    let mut t = [M; 256];
    t[0x04] = X;
    t[0x05] = N;
    t[0x06] = N;
    t[0x07] = N;
    t[0x08] = N;
    t[0x09] = N;
    t[0x0a] = X;
    t[0x0b] = N;
    t[0x0c] = X;
    t[0x0e] = N;
    t[0x0f] = X;
    let mut i = 0x20;
    while i < 0x28 {
        t[i] = X; // MOV CR/DR ignore mod; 24-27 invalid
        i += 1;
    }
    let mut i = 0x30;
    while i < 0x36 {
        t[i] = N;
        i += 1;
    }
    t[0x36] = X;
    t[0x37] = N;
    t[0x38] = Esc38;
    t[0x39] = X;
    t[0x3a] = Esc3A;
    t[0x3b] = X;
    t[0x3c] = X;
    t[0x3d] = X;
    t[0x3e] = X;
    t[0x3f] = X;
    t[0x70] = Mi8;
    t[0x71] = Mi8;
    t[0x72] = Mi8;
    t[0x73] = Mi8;
    t[0x77] = N;
    t[0x78] = X;
    t[0x79] = X;
    t[0x7a] = X;
    t[0x7b] = X;
    let mut i = 0x80;
    while i < 0x90 {
        t[i] = Rel32;
        i += 1;
    }
    t[0xa0] = N;
    t[0xa1] = N;
    t[0xa2] = N;
    t[0xa4] = Mi8;
    t[0xa6] = X;
    t[0xa7] = X;
    t[0xa8] = N;
    t[0xa9] = N;
    t[0xaa] = N;
    t[0xac] = Mi8;
    t[0xb8] = X;
    t[0xb9] = X;
    t[0xba] = Mi8;
    t[0xc2] = Mi8;
    t[0xc4] = Mi8;
    t[0xc5] = Mi8;
    t[0xc6] = Mi8;
    let mut i = 0xc8;
    while i < 0xd0 {
        t[i] = N; // BSWAP
        i += 1;
    }
    t[0xff] = X;
    t
}

static ONE_BYTE: [Op; 256] = one_byte_map();
static TWO_BYTE: [Op; 256] = two_byte_map();

/// The length of the instruction at the start of `b`, and whether it is an unprefixed
/// RET (C3 / C2 iw), for the common encodings; `None` where iced must decide.
#[inline]
pub(crate) fn fast_len(b: &[u8]) -> Option<(usize, bool)> {
    let mut i = 0;
    let mut opsize16 = false;
    let mut addr32 = false;
    let mut rex_w = false;
    let mut prefixed = false;
    let op = loop {
        let c = *b.get(i)?;
        match c {
            0x66 => opsize16 = true,
            0x67 => addr32 = true,
            0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 => {}
            0x40..=0x4f => {
                i += 1;
                prefixed = true;
                rex_w = c & 8 != 0;
                // A REX prefix counts only right before the opcode.
                let next = *b.get(i)?;
                if matches!(
                    next,
                    0x40..=0x4f
                        | 0x66
                        | 0x67
                        | 0xf0
                        | 0xf2
                        | 0xf3
                        | 0x2e
                        | 0x36
                        | 0x3e
                        | 0x26
                        | 0x64
                        | 0x65
                ) {
                    return None;
                }
                break next;
            }
            _ => break c,
        }
        prefixed = true;
        rex_w = false;
        i += 1;
        if i > 4 {
            return None;
        }
    };
    i += 1;
    let z = if opsize16 { 2 } else { 4 };
    let mut kind = ONE_BYTE[op as usize];
    match kind {
        Op::Esc => {
            let op2 = *b.get(i)?;
            i += 1;
            kind = TWO_BYTE[op2 as usize];
            match kind {
                Op::Esc38 => {
                    i += 1;
                    kind = Op::M;
                }
                Op::Esc3A => {
                    i += 1;
                    kind = Op::Mi8;
                }
                _ => {}
            }
        }
        Op::N if op == 0xc3 => {
            return if prefixed { None } else { Some((1, true)) };
        }
        Op::I16 if op == 0xc2 => {
            return if prefixed || b.len() < 3 {
                None
            } else {
                Some((3, true))
            };
        }
        // 8F /0 is POP r/m; other reg values are XOP.
        Op::M if op == 0x8f && (*b.get(i)? >> 3) & 7 != 0 => return None,
        _ => {}
    }
    let imm = match kind {
        Op::X | Op::Esc | Op::Esc38 | Op::Esc3A => return None,
        Op::N => 0,
        Op::I8 => 1,
        Op::I16 => 2,
        Op::IZ => z,
        Op::Enter => 3,
        Op::Rel32 => {
            if opsize16 {
                return None;
            }
            4
        }
        Op::MovImm => {
            if rex_w {
                8
            } else {
                z
            }
        }
        Op::Moffs => {
            if addr32 {
                4
            } else {
                8
            }
        }
        Op::M | Op::Mi8 | Op::Miz | Op::Grp3 => {
            let modrm = *b.get(i)?;
            i += 1;
            let (md, rm) = (modrm >> 6, modrm & 7);
            if md != 3 {
                if rm == 4 {
                    let sib = *b.get(i)?;
                    i += 1;
                    if md == 0 && sib & 7 == 5 {
                        i += 4;
                    }
                }
                i += match md {
                    0 if rm == 5 => 4,
                    1 => 1,
                    2 => 4,
                    _ => 0,
                };
            }
            match kind {
                Op::Mi8 => 1,
                Op::Miz => z,
                Op::Grp3 if (modrm >> 3) & 7 < 2 => {
                    if op == 0xf6 {
                        1
                    } else {
                        z
                    }
                }
                _ => 0,
            }
        }
    };
    let len = i + imm;
    if len > b.len() || len > 15 {
        return None;
    }
    Some((len, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_rets(code: &[u8]) -> (Vec<u64>, Vec<u64>) {
        let (mut fast, mut slow) = (vec![], vec![]);
        rets(code, |o| fast.push(o));
        rets_iced(code, |o| slow.push(o));
        (fast, slow)
    }

    #[test]
    fn rets_skip_c3_bytes_inside_instructions() {
        // MOV EAX,0xC3C3C3C3; RET; INT3 padding
        let code = [0xb8, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3, 0xcc, 0xcc];
        assert_eq!(all_rets(&code), (vec![5], vec![5]));
        // NOP; RET 8 (C2 iw); a REP-prefixed RET (F3 C3) goes through iced.
        let code = [0x90, 0xc2, 0x08, 0x00, 0xf3, 0xc3];
        assert_eq!(all_rets(&code), (vec![1, 4], vec![1, 4]));
    }

    #[test]
    fn boundaries_of_a_linear_decode() {
        use SiteError::*;
        // CMP RSP,[R14+0x10] (4 bytes); JBE +0x20 (2); PUSH RBP (1); RET (1)
        let code = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x55, 0xc3];
        assert_eq!(check_sites(&code, &[0, 4, 6, 7], true), Ok(()));
        assert_eq!(check_sites(&code, &[], false), Ok(()));
        // Inside the CMP, inside the JBE, past the end.
        assert_eq!(check_sites(&code, &[0, 2], false), Err(NotBoundary(2)));
        assert_eq!(check_sites(&code, &[7, 5], false), Err(NotBoundary(5)));
        assert_eq!(check_sites(&code, &[7, 8], false), Err(NotBoundary(8)));
        // MOV RAX,imm64; RET. Decoded from one byte later, the bytes read MOV EAX,imm32;
        // ADD EAX,imm32, and the RET byte is inside the ADD.
        let code = [0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0xc3];
        assert_eq!(check_sites(&code, &[0, 10], true), Ok(()));
        assert_eq!(check_sites(&code[1..], &[0, 9], false), Err(NotBoundary(9)));
        // Cut one byte short, the MOV's immediate runs past the end: no valid instruction
        // starts at the site, whether or not the code must end on a boundary.
        assert_eq!(check_sites(&code[..9], &[0], false), Err(Invalid(0)));
        assert_eq!(check_sites(&code[..9], &[0], true), Err(Invalid(0)));
        // With no site in it, the cut instruction runs past the end of the code.
        assert_eq!(check_sites(&code[..9], &[], true), Err(PastEnd(10)));
        // A site where no instruction decodes (a lone 0x0F at the end).
        assert_eq!(check_sites(&[0x90, 0x0f], &[1], false), Err(Invalid(1)));
    }

    #[test]
    fn what_is_at_a_site() {
        // NOP; MOV EAX,imm32; 4-byte NOPL; RET
        let code = [0x90, 0xb8, 1, 2, 3, 4, 0x0f, 0x1f, 0x40, 0x00, 0xc3];
        assert_eq!(at_site(&code, 0), AtSite::Starts { len: 1, nop: true });
        assert_eq!(at_site(&code, 1), AtSite::Starts { len: 5, nop: false });
        assert_eq!(at_site(&code, 3), AtSite::Inside { start: 1, len: 5 });
        assert_eq!(at_site(&code, 6), AtSite::Starts { len: 4, nop: true });
        assert_eq!(at_site(&code, 11), AtSite::Invalid);
    }
}
