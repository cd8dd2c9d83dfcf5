//! USDT argument specs as `sys/sdt.h` writes them on x86-64 (GNU assembler operands with
//! a size prefix), parsed as libbpf's `parse_usdt_arg` does: `N@%reg` (a register, any
//! width: rax, eax, ax, al, r8d, r12w, ...), `N@off(%reg)` and `N@(%reg)` (memory at a
//! register plus an offset), `N@$imm` (a constant). `N` is the value's size in bytes
//! (1, 2, 4, 8), negative for a signed value. Scaled-index operands (`(%rax,%rbx,8)`),
//! RIP-relative and symbolic operands are refused with the reason, per argument.

use std::fmt;

use crate::abi::reg;

/// Where an argument's value is when the probe fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgLoc {
    /// A general-purpose register (x86 number); the value is its low `size` bytes.
    Reg(u8),
    /// Memory at register + offset.
    Mem { reg: u8, off: i32 },
    /// A constant.
    Const(i32),
}

/// One argument of a USDT probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsdtArg {
    /// Bytes of the value: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub loc: ArgLoc,
}

/// Why an argument spec cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    /// The spec as the note writes it, e.g. `-4@-96(%rbp,%rax,8)`.
    pub spec: String,
    pub reason: String,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.spec, self.reason)
    }
}

impl fmt::Display for UsdtArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.signed { "signed" } else { "unsigned" };
        match self.loc {
            ArgLoc::Reg(r) => write!(f, "{sign} {}-byte register {}", self.size, reg_name(r)),
            ArgLoc::Mem { reg, off } => {
                write!(f, "{sign} {} bytes at {}{off:+}", self.size, reg_name(reg))
            }
            ArgLoc::Const(v) => write!(f, "constant {v}"),
        }
    }
}

/// Register names by x86 number (64-bit names).
const NAMES64: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

pub fn reg_name(r: u8) -> &'static str {
    NAMES64.get(r as usize).copied().unwrap_or("?")
}

/// The x86 number of a general-purpose register named at any width.
pub fn reg_number(name: &str) -> Option<u8> {
    const LEGACY: [(&str, &str, &str, &str, u8); 8] = [
        ("rax", "eax", "ax", "al", reg::RAX),
        ("rbx", "ebx", "bx", "bl", reg::RBX),
        ("rcx", "ecx", "cx", "cl", reg::RCX),
        ("rdx", "edx", "dx", "dl", reg::RDX),
        ("rsi", "esi", "si", "sil", reg::RSI),
        ("rdi", "edi", "di", "dil", reg::RDI),
        ("rbp", "ebp", "bp", "bpl", reg::RBP),
        ("rsp", "esp", "sp", "spl", reg::RSP),
    ];
    for (q, d, w, b, n) in LEGACY {
        if [q, d, w, b].contains(&name) {
            return Some(n);
        }
    }
    let rest = name.strip_prefix('r')?;
    let digits = rest.trim_end_matches(['d', 'w', 'b', 'l']);
    let suffix = &rest[digits.len()..];
    if suffix.len() > 1 {
        return None;
    }
    match digits.parse::<u8>() {
        Ok(n @ 8..=15) if !digits.starts_with('0') => Some(n),
        _ => None,
    }
}

/// Splits a note's argument string into its specs (separated by spaces).
pub fn split_args(args: &str) -> Vec<&str> {
    args.split_ascii_whitespace().collect()
}

/// Parses every spec of a note's argument string, each on its own.
pub fn parse_args(args: &str) -> Vec<Result<UsdtArg, ArgError>> {
    split_args(args).into_iter().map(parse_arg).collect()
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse().ok()?
        }
        None => return None,
    };
    Some(if neg { -v } else { v })
}

/// Parses one spec, e.g. `-4@%eax`, `8@152(%rdi)`, `1@$0`.
pub fn parse_arg(spec: &str) -> Result<UsdtArg, ArgError> {
    let err = |reason: String| ArgError {
        spec: spec.to_string(),
        reason,
    };
    let Some((n, operand)) = spec.split_once('@') else {
        return Err(err(
            "no size prefix (N@): the value's size is not known".into()
        ));
    };
    let n = parse_int(n).ok_or_else(|| err(format!("size {n:?} is not a number")))?;
    let size = match n.unsigned_abs() {
        s @ (1 | 2 | 4 | 8) => s as u8,
        s => return Err(err(format!("size {s} is not 1, 2, 4 or 8 bytes"))),
    };
    let signed = n < 0;
    let reg_of = |name: &str| -> Result<u8, ArgError> {
        let Some(r) = name.strip_prefix('%') else {
            return Err(err(format!("{name:?} is not a register (%name)")));
        };
        if matches!(r, "rip" | "eip") {
            return Err(err("RIP-relative operands are not supported".into()));
        }
        reg_number(r).ok_or_else(|| err(format!("unknown register %{r}")))
    };
    let loc = if let Some(imm) = operand.strip_prefix('$') {
        let v = parse_int(imm).ok_or_else(|| {
            err(format!(
                "constant {imm:?} is not a number (symbolic constants are not supported)"
            ))
        })?;
        ArgLoc::Const(
            i32::try_from(v).map_err(|_| err(format!("constant {v} does not fit in 32 bits")))?,
        )
    } else if operand.starts_with('%') {
        ArgLoc::Reg(reg_of(operand)?)
    } else if let Some(open) = operand.find('(') {
        let Some(inner) = operand[open + 1..].strip_suffix(')') else {
            return Err(err("unbalanced parentheses".into()));
        };
        if inner.contains(',') {
            return Err(err(
                "scaled-index operands (base, index, scale) are not supported".into(),
            ));
        }
        let disp = &operand[..open];
        let off = if disp.is_empty() {
            0
        } else {
            parse_int(disp).ok_or_else(|| {
                err(format!(
                    "offset {disp:?} is not a number (symbolic offsets are not supported)"
                ))
            })?
        };
        let off =
            i32::try_from(off).map_err(|_| err(format!("offset {off} does not fit in 32 bits")))?;
        ArgLoc::Mem {
            reg: reg_of(inner)?,
            off,
        }
    } else {
        return Err(err(format!(
            "operand {operand:?} is not a register, memory operand or constant"
        )));
    };
    Ok(UsdtArg { size, signed, loc })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> UsdtArg {
        parse_arg(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_specs_of_this_machines_binaries() {
        // python3.11 function__entry, postgres query__start, libjvm class__loaded.
        assert_eq!(
            parse_args("8@%rbp 8@%r12 -4@%eax"),
            vec![
                Ok(UsdtArg {
                    size: 8,
                    signed: false,
                    loc: ArgLoc::Reg(reg::RBP)
                }),
                Ok(UsdtArg {
                    size: 8,
                    signed: false,
                    loc: ArgLoc::Reg(reg::R12)
                }),
                Ok(UsdtArg {
                    size: 4,
                    signed: true,
                    loc: ArgLoc::Reg(reg::RAX)
                }),
            ]
        );
        assert_eq!(ok("8@%rbx").loc, ArgLoc::Reg(reg::RBX));
        let jvm: Vec<UsdtArg> = parse_args("8@%rdx -4@%eax 8@152(%rdi) 1@%cl")
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            jvm[2].loc,
            ArgLoc::Mem {
                reg: reg::RDI,
                off: 152
            }
        );
        assert_eq!((jvm[3].size, jvm[3].loc), (1, ArgLoc::Reg(reg::RCX)));
        // postgres buffer__read__done, sort__start.
        assert_eq!(
            ok("-4@-136(%rbp)"),
            UsdtArg {
                size: 4,
                signed: true,
                loc: ArgLoc::Mem {
                    reg: reg::RBP,
                    off: -136
                }
            }
        );
        assert_eq!(
            ok("4@0(%r13)").loc,
            ArgLoc::Mem {
                reg: reg::R13,
                off: 0
            }
        );
        assert_eq!(ok("1@$0").loc, ArgLoc::Const(0));
        assert_eq!(ok("-4@$-3").loc, ArgLoc::Const(-3));
        assert_eq!(ok("4@%r14d").loc, ArgLoc::Reg(reg::R14));
        assert_eq!(
            ok("-4@112(%rsp)").loc,
            ArgLoc::Mem {
                reg: reg::RSP,
                off: 112
            }
        );
        assert_eq!(
            ok("8@(%rsp)").loc,
            ArgLoc::Mem {
                reg: reg::RSP,
                off: 0
            }
        );
    }

    #[test]
    fn every_register_name() {
        for (names, n) in [
            (["rax", "eax", "ax", "al"], 0),
            (["rcx", "ecx", "cx", "cl"], 1),
            (["rdx", "edx", "dx", "dl"], 2),
            (["rbx", "ebx", "bx", "bl"], 3),
            (["rsp", "esp", "sp", "spl"], 4),
            (["rbp", "ebp", "bp", "bpl"], 5),
            (["rsi", "esi", "si", "sil"], 6),
            (["rdi", "edi", "di", "dil"], 7),
            (["r8", "r8d", "r8w", "r8b"], 8),
            (["r12", "r12d", "r12w", "r12b"], 12),
            (["r15", "r15d", "r15w", "r15b"], 15),
        ] {
            for name in names {
                assert_eq!(reg_number(name), Some(n), "{name}");
            }
        }
        for bad in ["r16", "r7", "r08", "rzz", "ah", "r8dd", "xmm0"] {
            assert_eq!(reg_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn unsupported_specs_say_why() {
        for (spec, why) in [
            ("-4@-96(%rbp,%rax,8)", "scaled-index"),
            ("1@(%rbp,%rax)", "scaled-index"),
            ("8@foo(%rip)", "symbolic offsets"),
            ("8@16(%rip)", "RIP-relative"),
            ("3@%eax", "not 1, 2, 4 or 8"),
            ("%eax", "no size prefix"),
            ("4@%xmm0", "unknown register"),
            ("8@$sym", "symbolic constants"),
            ("8@$4294967296", "does not fit in 32 bits"),
            ("4@eax", "is not a register, memory operand or constant"),
            ("4@8(%rax", "unbalanced"),
        ] {
            let e = parse_arg(spec).unwrap_err();
            assert!(e.reason.contains(why), "{spec}: {e}");
            assert_eq!(e.spec, spec);
        }
    }
}
