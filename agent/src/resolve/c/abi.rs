//! Where the System V AMD64 ABI passes a C function's parameters and result, as a uprobe
//! at the function's first instruction sees them: integer-class values (integers, bool,
//! enums, pointers) in RDI, RSI, RDX, RCX, R8, R9, then on the stack at RSP+8, RSP+16, ...
//! (RSP+0 holds the return address); floats in XMM0-7, then on the stack; the result in
//! RAX (or XMM0). A struct returned in memory takes RDI for its hidden pointer.

use gprobe_crds::ctype::{CClass, CType};

use crate::abi::reg;

/// Integer argument registers in order, as x86 register numbers.
pub(crate) const C_INT_REGS: [u8; 6] = [reg::RDI, reg::RSI, reg::RDX, reg::RCX, reg::R8, reg::R9];

/// Where one value is at the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// A general-purpose register (x86 number).
    Reg(u8),
    /// The stack at RSP + offset, at function entry.
    Stack(i32),
    /// SSE register XMM n: uprobes cannot read it.
    Sse(u8),
    /// A struct or other value passed by value: not one readable word.
    Aggregate,
    /// Where it is cannot be told (why: what came before it).
    Unknown(String),
}

/// The places of every parameter (in order) and of the result (`None` for void).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CLayout {
    pub params: Vec<Place>,
    pub result: Option<Place>,
}

/// Lays out `params` and the result `ret` by the System V AMD64 classification. Structs
/// by value of up to 16 bytes are classified field by field by the ABI; gprobe does not
/// read struct fields, so the parameters after one are `Unknown` (what it took is not
/// known), as are all parameters after a value of unknown size.
pub(crate) fn layout(params: &[CType], ret: Option<&CType>) -> CLayout {
    let mut ints = 0usize;
    let mut sses = 0u8;
    let mut stack = 8i32;
    let mut unknown: Option<String> = None;
    let result = ret.and_then(|r| match r.class() {
        CClass::Void => None,
        CClass::Bool | CClass::Int { size: ..=8, .. } | CClass::Pointer | CClass::CString => {
            Some(Place::Reg(reg::RAX))
        }
        CClass::Float { size: ..=8 } => Some(Place::Sse(0)),
        CClass::Aggregate { size: Some(s) } if s > 16 => {
            // Returned in memory: the caller passes its address in RDI.
            ints = 1;
            Some(Place::Aggregate)
        }
        CClass::Aggregate { size: Some(_) } | CClass::Float { .. } | CClass::Int { .. } => {
            Some(Place::Aggregate)
        }
        CClass::Aggregate { size: None } | CClass::Unknown { .. } => {
            unknown = Some(format!(
                "the result type {r} has an unknown size: it may be returned through a hidden \
                pointer in RDI, which moves every parameter"
            ));
            Some(Place::Unknown(unknown.clone().unwrap_or_default()))
        }
    });
    let mut placed = Vec::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        if let Some(why) = &unknown {
            placed.push(Place::Unknown(why.clone()));
            continue;
        }
        let place = match p.class() {
            CClass::Bool | CClass::Int { size: ..=8, .. } | CClass::Pointer | CClass::CString => {
                if ints < C_INT_REGS.len() {
                    ints += 1;
                    Place::Reg(C_INT_REGS[ints - 1])
                } else {
                    stack += 8;
                    Place::Stack(stack - 8)
                }
            }
            CClass::Float { size: ..=8 } if sses < 8 => {
                sses += 1;
                Place::Sse(sses - 1)
            }
            CClass::Float { size: ..=8 } => {
                stack += 8;
                Place::Stack(stack - 8)
            }
            CClass::Aggregate { size: Some(s) } if s > 16 => {
                // Passed in memory, on the stack, in 8-byte words.
                stack += s.div_ceil(8) as i32 * 8;
                Place::Aggregate
            }
            CClass::Void => Place::Unknown("void parameter".into()),
            CClass::Aggregate { .. } | CClass::Float { .. } | CClass::Int { .. } => {
                unknown = Some(format!(
                    "its place is unknown: parameter {i} ({p}) is passed by value, split over \
                    registers by its fields (rules gprobe does not model)"
                ));
                Place::Aggregate
            }
            CClass::Unknown { name } => {
                unknown = Some(format!(
                    "its place is unknown: parameter {i} has type {name}, whose size is unknown"
                ));
                Place::Unknown(format!(
                    "its type {name} is unknown: write its underlying type (e.g. int, or a \
                    pointer) in the signature, or install the binary's debug symbols"
                ))
            }
        };
        placed.push(place);
    }
    CLayout {
        params: placed,
        result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::csig::parse_c_signature;

    fn lay(proto: &str) -> CLayout {
        let s = parse_c_signature(proto).unwrap();
        let tys: Vec<CType> = s.params.iter().map(|p| p.ty.clone()).collect();
        layout(&tys, s.ret.as_ref())
    }

    #[test]
    fn integers_then_stack() {
        let l = lay("long f(int a, char *b, size_t c, void *d, _Bool e, short g, int h, long i)");
        assert_eq!(
            l.params,
            [
                Place::Reg(reg::RDI),
                Place::Reg(reg::RSI),
                Place::Reg(reg::RDX),
                Place::Reg(reg::RCX),
                Place::Reg(reg::R8),
                Place::Reg(reg::R9),
                Place::Stack(8),
                Place::Stack(16),
            ]
        );
        assert_eq!(l.result, Some(Place::Reg(reg::RAX)));
        assert_eq!(lay("void f(void)").result, None);
    }

    #[test]
    fn floats_take_sse_registers_and_do_not_shift_integers() {
        let l = lay("double f(double x, int a, float y, int b)");
        assert_eq!(
            l.params,
            [
                Place::Sse(0),
                Place::Reg(reg::RDI),
                Place::Sse(1),
                Place::Reg(reg::RSI)
            ]
        );
        assert_eq!(l.result, Some(Place::Sse(0)));
        let nine = "void f(double a, double b, double c, double d, double e, double g, double h, \
            double i, double j, int k)";
        let l = lay(nine);
        assert_eq!(l.params[8], Place::Stack(8));
        assert_eq!(l.params[9], Place::Reg(reg::RDI));
    }

    #[test]
    fn structs_by_value() {
        // A big struct goes on the stack; what follows still has its registers.
        let tys = [
            CType::Tagged {
                kind: gprobe_crds::ctype::TagKind::Struct,
                name: "big".into(),
                size: Some(24),
            },
            CType::int("int", 4, true),
        ];
        let l = layout(&tys, None);
        assert_eq!(l.params, [Place::Aggregate, Place::Reg(reg::RDI)]);
        // Returned in memory: the hidden pointer takes RDI.
        let l = layout(&tys[1..], Some(&tys[0]));
        assert_eq!(l.params, [Place::Reg(reg::RSI)]);
        // A small struct: what follows is unknown.
        let l = lay("int f(struct pair p, int a)");
        assert!(
            matches!(&l.params[1], Place::Unknown(w) if w.contains("unknown")),
            "{l:?}"
        );
        let l = lay("robj f(int a)");
        assert!(
            matches!(&l.params[0], Place::Unknown(w) if w.contains("hidden pointer")),
            "{l:?}"
        );
    }
}
