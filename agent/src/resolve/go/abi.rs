//! Go register ABI (ABIInternal, Go >= 1.17, amd64): where each parameter and result lives,
//! and how a `capture` entry becomes a BPF read plan.
//!
//! Follows the algorithm of Go's ABI document: each value is register-assigned component
//! by component (9 integer registers RAX RBX RCX RDI RSI R8 R9 R10 R11, 15 float registers
//! X0-X14); if any component does not fit, the whole value goes to the stack, and the
//! register counters go back to what they were. Results start again from the first
//! register; stack-assigned results follow the stack-assigned arguments, pointer-aligned.

use super::gotype::GoType;

pub const INT_REGS: [&str; 9] = ["RAX", "RBX", "RCX", "RDI", "RSI", "R8", "R9", "R10", "R11"];
const NUM_FLOAT_REGS: usize = 15;

/// Where one machine word (or smaller scalar) of a value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    IntReg(u8),
    FloatReg(u8),
    /// Offset from the stack pointer at the function's entry (and at its RETs): the return
    /// address is at 0, the first stack-assigned argument at 8.
    Stack(i32),
}

/// One scalar component of a value: its offset inside the value, size and location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub offset: u64,
    pub size: u64,
    pub loc: Loc,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub ty: GoType,
    pub parts: Vec<Part>,
}

impl Placed {
    /// True when the value lives on the stack (a value is never split between the two).
    pub fn on_stack(&self) -> bool {
        self.parts.iter().any(|p| matches!(p.loc, Loc::Stack(_)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub params: Vec<Placed>,
    pub results: Vec<Placed>,
}

/// Scalar components of a type in register-assignment order.
fn components(t: &GoType, base: u64, out: &mut Vec<(u64, u64, bool)>) -> bool {
    match t {
        GoType::Bool | GoType::Int { .. } | GoType::Uintptr | GoType::Pointer => {
            out.push((base, t.size(), false));
        }
        GoType::Float { size } => out.push((base, *size as u64, true)),
        GoType::Complex { size } => {
            let h = *size as u64 / 2;
            out.push((base, h, true));
            out.push((base + h, h, true));
        }
        GoType::String | GoType::Interface => {
            out.push((base, 8, false));
            out.push((base + 8, 8, false));
        }
        GoType::Slice { .. } => {
            for i in 0..3 {
                out.push((base + 8 * i, 8, false));
            }
        }
        GoType::Struct { fields, .. } => {
            let mut off = 0u64;
            for (_, f) in fields {
                let a = f.align();
                off = off.div_ceil(a) * a;
                if !components(f, base + off, out) {
                    return false;
                }
                off += f.size();
            }
        }
        GoType::Array { len, elem, .. } => match len {
            0 => {}
            1 => return components(elem, base, out),
            _ => return false,
        },
    }
    true
}

struct Assigner {
    ints: usize,
    floats: usize,
    stack: u64,
}

impl Assigner {
    fn assign(&mut self, t: &GoType) -> Placed {
        let mut comps = Vec::new();
        let regs_ok = components(t, 0, &mut comps);
        let need_int = comps.iter().filter(|c| !c.2).count();
        let need_float = comps.len() - need_int;
        if regs_ok
            && self.ints + need_int <= INT_REGS.len()
            && self.floats + need_float <= NUM_FLOAT_REGS
        {
            let parts = comps
                .into_iter()
                .map(|(offset, size, float)| {
                    let loc = if float {
                        self.floats += 1;
                        Loc::FloatReg((self.floats - 1) as u8)
                    } else {
                        self.ints += 1;
                        Loc::IntReg((self.ints - 1) as u8)
                    };
                    Part { offset, size, loc }
                })
                .collect();
            return Placed {
                ty: t.clone(),
                parts,
            };
        }
        let a = t.align();
        self.stack = self.stack.div_ceil(a) * a;
        let base = self.stack;
        self.stack += t.size();
        // Stack values are read from memory: describe them by their scalar components too,
        // so strings and interfaces decode the same way wherever they live.
        let mut comps = Vec::new();
        let parts = if components(t, 0, &mut comps) {
            comps
                .into_iter()
                .map(|(offset, size, _)| Part {
                    offset,
                    size,
                    loc: Loc::Stack((8 + base + offset) as i32),
                })
                .collect()
        } else {
            vec![Part {
                offset: 0,
                size: t.size(),
                loc: Loc::Stack((8 + base) as i32),
            }]
        };
        Placed {
            ty: t.clone(),
            parts,
        }
    }
}

/// Lays out a function's parameters and results under ABIInternal.
pub fn layout(params: &[GoType], results: &[GoType]) -> Layout {
    let mut a = Assigner {
        ints: 0,
        floats: 0,
        stack: 0,
    };
    let params = params.iter().map(|t| a.assign(t)).collect();
    a.stack = a.stack.div_ceil(8) * 8;
    a.ints = 0;
    a.floats = 0;
    let results = results.iter().map(|t| a.assign(t)).collect();
    Layout { params, results }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::go::types::{error::TypeError, TypeStore};
    use crate::resolve::Binary;
    use gprobe_crds::signature::parse_signature;

    /// The layout of a signature's types, laid out as the planner lays them out (types
    /// not predeclared are looked up in this test binary).
    fn shapes(sig: &str) -> Result<(Vec<GoType>, Vec<GoType>), (String, TypeError)> {
        let s = parse_signature(sig).unwrap();
        let bin = Binary::open(&std::env::current_exe().unwrap()).unwrap();
        let mut store = TypeStore::new(&bin, "main");
        let (_, p) = store.signature_shapes(&s.params)?;
        let (_, r) = store.signature_shapes(&s.results)?;
        Ok((p, r))
    }

    fn lay(sig: &str) -> Layout {
        let (p, r) = shapes(sig).unwrap();
        layout(&p, &r)
    }

    #[test]
    fn client_get_receiver_and_string_in_rax_rbx_rcx() {
        let l = lay("func(c *Client, url string) (resp *Response, err error)");
        assert_eq!(l.params[0].parts[0].loc, Loc::IntReg(0));
        assert_eq!(l.params[1].parts[0].loc, Loc::IntReg(1));
        assert_eq!(l.params[1].parts[1].loc, Loc::IntReg(2));
        // Results restart at RAX.
        assert_eq!(l.results[0].parts[0].loc, Loc::IntReg(0));
        assert_eq!(l.results[1].parts[0].loc, Loc::IntReg(1));
        assert_eq!(l.results[1].parts[1].loc, Loc::IntReg(2));
    }

    #[test]
    fn floats_use_their_own_registers() {
        let l = lay("func(a float64, b int, c float32) (float64, int)");
        assert_eq!(l.params[0].parts[0].loc, Loc::FloatReg(0));
        assert_eq!(l.params[1].parts[0].loc, Loc::IntReg(0));
        assert_eq!(l.params[2].parts[0].loc, Loc::FloatReg(1));
        assert_eq!(l.results[0].parts[0].loc, Loc::FloatReg(0));
        assert_eq!(l.results[1].parts[0].loc, Loc::IntReg(0));
    }

    #[test]
    fn values_that_do_not_fit_go_whole_to_the_stack_in_order() {
        // 8 ints fill RAX..R10; the string needs two registers, only R11 is left, so it goes
        // to the stack whole; the next int still gets R11.
        let l = lay("func(a, b, c, d, e, f, g, h int, s string, i int, j int8, k int64)");
        assert_eq!(l.params[7].parts[0].loc, Loc::IntReg(7));
        assert_eq!(l.params[8].parts[0].loc, Loc::Stack(8));
        assert_eq!(l.params[8].parts[1].loc, Loc::Stack(16));
        assert_eq!(l.params[9].parts[0].loc, Loc::IntReg(8));
        // Registers are exhausted: j at 24 (1 byte), k aligned to 32.
        assert_eq!(l.params[10].parts[0].loc, Loc::Stack(24));
        assert_eq!(l.params[11].parts[0].loc, Loc::Stack(32));
    }

    #[test]
    fn stack_results_follow_stack_args_pointer_aligned() {
        let l = lay("func(a, b, c, d, e, f, g, h, i int, j int8) (r0, r1, r2, r3, r4, r5, r6, r7, r8 int, x bool)");
        assert_eq!(l.params[9].parts[0].loc, Loc::Stack(8));
        assert_eq!(l.results[8].parts[0].loc, Loc::IntReg(8));
        assert_eq!(l.results[9].parts[0].loc, Loc::Stack(16));
    }

    #[test]
    fn structs_and_arrays_follow_the_abi_rules() {
        // A struct is register-assigned field by field; an array of 2 never is.
        let l = lay("func(p struct{ a int32; b string }, q [2]int, r [1]int)");
        assert_eq!(
            l.params[0].parts.iter().map(|p| p.loc).collect::<Vec<_>>(),
            [Loc::IntReg(0), Loc::IntReg(1), Loc::IntReg(2)]
        );
        assert_eq!(l.params[0].parts[1].offset, 8);
        assert_eq!(l.params[1].parts[0].loc, Loc::Stack(8));
        assert_eq!(l.params[2].parts[0].loc, Loc::IntReg(3));
    }

    #[test]
    fn unknown_named_types_are_explained() {
        let (name, e) = shapes("func(c Client)").unwrap_err();
        assert_eq!(name, "c");
        assert!(e.to_string().contains("main.Client"), "{e}");
        // Well-known standard-library types are laid out without the binary's help.
        let (p, _) = shapes("func(d time.Duration, ctx context.Context)").unwrap();
        assert_eq!(
            p[0],
            GoType::Int {
                size: 8,
                signed: true
            }
        );
        assert_eq!(p[1], GoType::Interface);
    }
}
