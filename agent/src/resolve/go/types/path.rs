//! A capture entry (`url`, `r.URL.Path`, `len(o.Tags)`) as a BPF read: where the value
//! starts (the registers or stack slots of a parameter, or a field of a by-value struct
//! in them), the pointers followed on the way (hops), and what is read at the end (a
//! leaf kind). See `GpCapture` in abi/mod.rs for what the kernel side does with it.

use gprobe_crds::gopath::GoCapture;

use super::error::PathError;
use super::model::{Kind, TypeInfo, TypeRef};
use super::store::TypeStore;
use crate::abi::{self, GpCapture, GpLoc, GP_MAX_ELEMS, GP_MAX_ELEM_STR, GP_MAX_HOPS, GP_MAX_STR};
use crate::plan::{CapturePlan, Decode, Elem};
use crate::resolve::error::{PlanError, Uncapturable};
use crate::resolve::go::abi::{Loc, Part, Placed};

/// Go's integer argument registers (ABIInternal order RAX RBX RCX RDI RSI R8 R9 R10 R11)
/// as x86 register numbers.
pub(crate) const GO_INT_REGS: [u8; 9] = {
    use abi::reg::*;
    [RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11]
};

/// Embedded structs searched for a promoted field, deepest.
const MAX_EMBED_DEPTH: usize = 8;

/// Where the value under the cursor is.
#[derive(Debug, Clone)]
enum At {
    /// In registers: the components of the parameter that lie at `off..` of it.
    Regs { parts: Vec<Part>, off: u64 },
    /// In memory: `word(base)`, then a dereference after adding each of `hops`, then
    /// `off` (see `GpCapture`).
    Mem {
        base: GpLoc,
        hops: Vec<i32>,
        off: i64,
    },
}

/// One step of a field selection: add an offset, or follow the pointer there.
enum Step {
    Field(u64),
    Deref,
}

struct Planner<'s, 'a> {
    store: &'s mut TypeStore<'a>,
    symbol: &'s str,
    entry: &'s str,
}

/// Plans the capture `entry` (parsed as `cap`) of a value placed at `root` whose type is
/// `root_ty`.
pub(crate) fn plan_capture(
    store: &mut TypeStore<'_>,
    symbol: &str,
    entry: &str,
    cap: &GoCapture,
    root: &Placed,
    root_ty: TypeRef,
    max_string_bytes: u32,
) -> Result<CapturePlan, PlanError> {
    let mut p = Planner {
        store,
        symbol,
        entry,
    };
    let start = match root.parts.first() {
        Some(Part {
            loc: Loc::Stack(o),
            offset,
            ..
        }) => At::Mem {
            base: reg(abi::reg::RSP),
            hops: Vec::new(),
            off: *o as i64 - *offset as i64,
        },
        _ => At::Regs {
            parts: root.parts.clone(),
            off: 0,
        },
    };
    let (at, ty) = p.walk(start, root_ty, &cap.fields)?;
    let (decode, bpf) = p.leaf(at, ty, cap.len, max_string_bytes)?;
    Ok(CapturePlan {
        name: entry.to_string(),
        decode,
        bpf,
    })
}

fn reg(r: u8) -> GpLoc {
    GpLoc {
        kind: abi::LOC_REG,
        reg: r,
        ..Default::default()
    }
}

impl Planner<'_, '_> {
    fn path_err(&self, source: PathError) -> PlanError {
        PlanError::Path {
            symbol: self.symbol.to_string(),
            capture: self.entry.to_string(),
            source: Box::new(source),
        }
    }

    fn get(&mut self, r: TypeRef) -> Result<std::sync::Arc<TypeInfo>, PlanError> {
        self.store.get(r).map_err(|e| self.path_err(e.into()))
    }

    /// Follows `fields` from the value `at` of type `ty`; Go's selectors dereference one
    /// pointer implicitly and reach promoted fields through embedded structs.
    fn walk(
        &mut self,
        mut at: At,
        mut ty: TypeRef,
        fields: &[String],
    ) -> Result<(At, TypeRef), PlanError> {
        for name in fields {
            let t = self.get(ty)?;
            if let Kind::Pointer(elem) = t.kind {
                at = self.deref(at)?;
                ty = elem;
            }
            let (steps, field_ty) = self.select(ty, name)?;
            for s in steps {
                at = match s {
                    Step::Field(off) => add(at, off),
                    Step::Deref => self.deref(at)?,
                };
            }
            ty = field_ty;
        }
        Ok((at, ty))
    }

    /// The steps to field `name` of the struct `ty`, and its type: a field of its own,
    /// else the one promoted from the shallowest embedded struct (two at that depth are
    /// ambiguous, as in Go).
    fn select(&mut self, ty: TypeRef, name: &str) -> Result<(Vec<Step>, TypeRef), PlanError> {
        let t = self.get(ty)?;
        let Kind::Struct(_) = &t.kind else {
            return Err(self.path_err(PathError::NotAStruct {
                type_name: t.name.clone(),
                field: name.to_string(),
            }));
        };
        // Breadth-first over embedded fields: (steps so far, struct type, how reached).
        let mut level: Vec<(Vec<Step>, TypeRef, String)> = vec![(Vec::new(), ty, String::new())];
        let mut known = Vec::new();
        for depth in 0..MAX_EMBED_DEPTH {
            let mut found: Vec<(Vec<Step>, TypeRef, String)> = Vec::new();
            let mut next = Vec::new();
            for (steps, sty, via) in level {
                let st = self.get(sty)?;
                let Kind::Struct(fields) = &st.kind else {
                    continue;
                };
                for f in fields {
                    if depth == 0 || !known.contains(&f.name) {
                        known.push(f.name.clone());
                    }
                    let mut here: Vec<Step> = steps.iter().map(copy_step).collect();
                    here.push(Step::Field(f.offset));
                    let through = if via.is_empty() {
                        f.name.clone()
                    } else {
                        format!("{via}.{}", f.name)
                    };
                    if f.name == name {
                        found.push((here, f.ty, through));
                        continue;
                    }
                    if f.embedded {
                        let ft = self.get(f.ty)?;
                        match ft.kind {
                            Kind::Struct(_) => next.push((here, f.ty, through)),
                            Kind::Pointer(elem) => {
                                here.push(Step::Deref);
                                next.push((here, elem, through));
                            }
                            _ => {}
                        }
                    }
                }
            }
            match found.len() {
                0 => {}
                1 => {
                    let (steps, fty, _) = found.pop().unwrap_or_else(|| unreachable!());
                    return Ok((steps, fty));
                }
                _ => {
                    let via = found
                        .iter()
                        .map(|(_, _, v)| v.rsplit_once('.').map_or(v.as_str(), |x| x.0).to_string())
                        .collect();
                    return Err(self.path_err(PathError::AmbiguousField {
                        type_name: t.name.clone(),
                        field: name.to_string(),
                        via,
                    }));
                }
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
        Err(self.path_err(PathError::NoField {
            type_name: t.name.clone(),
            field: name.to_string(),
            fields: known,
        }))
    }

    /// The value under the cursor is a pointer: move to what it points to.
    fn deref(&self, at: At) -> Result<At, PlanError> {
        match at {
            At::Regs { parts, off } => match part_at(&parts, off) {
                Some(Part {
                    loc: Loc::IntReg(r),
                    ..
                }) => Ok(At::Mem {
                    base: reg(GO_INT_REGS[r as usize]),
                    hops: Vec::new(),
                    off: 0,
                }),
                _ => Err(self.no_register(off)),
            },
            // A pointer in a stack slot is the base word itself (LOC_MEM): a hop saved.
            // Not for a pointer in a register's pointee, whose nil check (NIL) would
            // become a FAULT.
            At::Mem { base, hops, off }
                if hops.is_empty() && base.kind == abi::LOC_REG && base.reg == abi::reg::RSP =>
            {
                Ok(At::Mem {
                    base: GpLoc {
                        kind: abi::LOC_MEM,
                        reg: base.reg,
                        off: off as i32,
                        ..Default::default()
                    },
                    hops,
                    off: 0,
                })
            }
            At::Mem {
                base,
                mut hops,
                off,
            } => {
                hops.push(off as i32);
                if hops.len() > GP_MAX_HOPS {
                    return Err(self.path_err(PathError::TooManyHops {
                        hops: hops.len(),
                        max: GP_MAX_HOPS,
                    }));
                }
                Ok(At::Mem { base, hops, off: 0 })
            }
        }
    }

    fn no_register(&self, off: u64) -> PlanError {
        // The register assignment of a by-value struct and its type description agree on
        // every offset in a consistent binary; say so when they do not.
        self.path_err(PathError::Uncapturable {
            type_name: "the value".into(),
            why: "no register holds its part at this offset",
            hint: format!(
                "offset {off} of the parameter is not a component the ABI placed; report this"
            ),
        })
    }

    /// The capture of the value of type `ty` at `at` (or of its length).
    fn leaf(
        &mut self,
        at: At,
        ty: TypeRef,
        len: bool,
        msb: u32,
    ) -> Result<(Decode, GpCapture), PlanError> {
        let t = self.get(ty)?;
        let str_max = msb.min(GP_MAX_STR as u32) as u16;
        let elem_str_max = msb.min(GP_MAX_ELEM_STR as u32) as u16;
        let cap = |kind, size: u64| GpCapture {
            kind,
            size: size.min(8) as u8,
            ..Default::default()
        };
        if len {
            return match t.kind {
                Kind::String | Kind::Slice(_) => Ok((
                    Decode::Len { nil_is_zero: false },
                    self.emit(add(at, 8), cap(abi::CAP_WORD, 8), 1, None)?,
                )),
                Kind::Map { .. } | Kind::Chan => {
                    let at = add(self.deref(at)?, abi::MAP_COUNT_OFFSET as u64);
                    Ok((
                        Decode::Len { nil_is_zero: true },
                        self.emit(at, cap(abi::CAP_WORD, 8), 1, None)?,
                    ))
                }
                Kind::Array { len, .. } => {
                    let mut c = cap(abi::CAP_WORD, 8);
                    c.loc[0] = GpLoc {
                        kind: abi::LOC_CONST,
                        off: len.min(i32::MAX as u64) as i32,
                        ..Default::default()
                    };
                    Ok((Decode::Len { nil_is_zero: false }, c))
                }
                _ => Err(self.path_err(PathError::NoLength {
                    type_name: t.name.clone(),
                })),
            };
        }
        let word = |d: Decode, size: u64| (d, cap(abi::CAP_WORD, size), 1usize);
        let (decode, mut c, words) = match &t.kind {
            Kind::Bool => word(Decode::Bool, 1),
            Kind::Int { size, signed } => word(
                Decode::Int {
                    size: *size,
                    signed: *signed,
                },
                *size as u64,
            ),
            Kind::Uintptr => word(
                Decode::Int {
                    size: 8,
                    signed: false,
                },
                8,
            ),
            Kind::Float { size } => {
                let what = if *size == 4 { "float32" } else { "float64" };
                let (d, c, w) = word(Decode::Float { size: *size }, *size as u64);
                return Ok((d, self.emit(at, c, w, Some(what))?));
            }
            Kind::UnsafePointer | Kind::Pointer(_) | Kind::Map { .. } | Kind::Chan | Kind::Func => {
                word(Decode::Pointer, 8)
            }
            Kind::String => {
                let mut c = cap(abi::CAP_BYTES, 0);
                c.max_len = str_max;
                // Go's lengths are ints: a negative one is not read (see CAPF_LEN_SIGNED).
                c.flags = abi::CAPF_LEN_SIGNED;
                (Decode::Str, c, 2)
            }
            // An error of a binary that has some of the standard library's error types:
            // read with their layouts, shown as the text their Error() builds.
            Kind::Interface { empty: false }
                if t.name == "error" && !self.store.error_table().is_empty() =>
            {
                let mut c = cap(abi::CAP_ERROR, 0);
                c.max_len = str_max;
                c.table = self.store.error_table().id;
                (Decode::ErrorText { max_len: str_max }, c, 2)
            }
            Kind::Interface { empty } => {
                let error = t.name == "error";
                let mut c = cap(abi::CAP_IFACE, 0);
                c.flags = if *empty { 0 } else { abi::CAPF_ITAB };
                if error {
                    c.flags |= abi::CAPF_DATA_STR;
                    c.max_len = str_max;
                }
                (
                    if error {
                        Decode::Error
                    } else {
                        Decode::Interface
                    },
                    c,
                    2,
                )
            }
            Kind::Slice(elem) => {
                let e = self.get(*elem)?;
                let mut c = cap(abi::CAP_SLICE, e.size);
                c.max_elems = GP_MAX_ELEMS as u8;
                let scalar = |el: Elem| (Decode::Slice { elem: el }, c);
                let (d, c) = match &e.kind {
                    Kind::Int {
                        size: 1,
                        signed: false,
                    } => {
                        let mut c = cap(abi::CAP_BYTES, 0);
                        c.max_len = str_max;
                        c.flags = abi::CAPF_LEN_SIGNED;
                        (Decode::Bytes, c)
                    }
                    Kind::Bool => scalar(Elem::Bool),
                    Kind::Int { size, signed } => scalar(Elem::Int {
                        size: *size,
                        signed: *signed,
                    }),
                    Kind::Uintptr => scalar(Elem::Int {
                        size: 8,
                        signed: false,
                    }),
                    Kind::Float { size } => scalar(Elem::Float { size: *size }),
                    Kind::UnsafePointer
                    | Kind::Pointer(_)
                    | Kind::Map { .. }
                    | Kind::Chan
                    | Kind::Func => scalar(Elem::Pointer),
                    Kind::String => {
                        c.kind = abi::CAP_STRS;
                        c.size = 0;
                        c.max_len = elem_str_max;
                        (Decode::Strings, c)
                    }
                    Kind::Interface { empty } => {
                        c.kind = abi::CAP_IFACES;
                        c.size = 0;
                        c.flags = abi::CAPF_DATA_STR | if *empty { 0 } else { abi::CAPF_ITAB };
                        c.max_len = elem_str_max;
                        (
                            Decode::Interfaces {
                                errors: e.name == "error",
                            },
                            c,
                        )
                    }
                    _ => return Err(self.uncapturable(&t.name, Uncapturable::Slice)),
                };
                (d, c, 2)
            }
            Kind::Complex { .. } => return Err(self.uncapturable(&t.name, Uncapturable::Complex)),
            Kind::Struct(_) | Kind::Array { .. } => {
                return Err(self.uncapturable(&t.name, Uncapturable::Aggregate))
            }
        };
        c = self.emit(at, c, words, None)?;
        Ok((decode, c))
    }

    fn uncapturable(&self, type_name: &str, kind: Uncapturable) -> PlanError {
        PlanError::Uncapturable {
            symbol: self.symbol.to_string(),
            name: self.entry.to_string(),
            type_name: type_name.to_string(),
            kind,
        }
    }

    /// Fills in where `c` reads its `words` words: registers or stack slots directly
    /// where the value is one, else the path. `float` names a float read from a register
    /// (refused: BPF sees no SSE registers).
    fn emit(
        &self,
        at: At,
        mut c: GpCapture,
        words: usize,
        float: Option<&'static str>,
    ) -> Result<GpCapture, PlanError> {
        match at {
            At::Regs { parts, off } => {
                for i in 0..words {
                    let o = off + 8 * i as u64;
                    c.loc[i] = match part_at(&parts, o) {
                        Some(Part {
                            loc: Loc::IntReg(r),
                            ..
                        }) => reg(GO_INT_REGS[r as usize]),
                        Some(Part {
                            loc: Loc::FloatReg(x),
                            ..
                        }) => {
                            return Err(PlanError::FloatInRegister {
                                symbol: self.symbol.to_string(),
                                name: self.entry.to_string(),
                                what: float.unwrap_or("value"),
                                reg: x,
                            })
                        }
                        _ => return Err(self.no_register(o)),
                    };
                }
            }
            // A stack slot read directly: the form flat stack arguments always had.
            At::Mem { base, hops, off }
                if hops.is_empty() && base.kind == abi::LOC_REG && base.reg == abi::reg::RSP =>
            {
                for i in 0..words {
                    c.loc[i] = GpLoc {
                        kind: abi::LOC_MEM,
                        reg: abi::reg::RSP,
                        off: off as i32 + 8 * i as i32,
                        ..Default::default()
                    };
                }
            }
            At::Mem { base, hops, off } => {
                c.flags |= abi::CAPF_PATH;
                c.loc[0] = base;
                c.n_hops = hops.len() as u8;
                c.hops[..hops.len()].copy_from_slice(&hops);
                c.off = off as i32;
            }
        }
        Ok(c)
    }
}

fn copy_step(s: &Step) -> Step {
    match s {
        Step::Field(o) => Step::Field(*o),
        Step::Deref => Step::Deref,
    }
}

fn add(at: At, by: u64) -> At {
    match at {
        At::Regs { parts, off } => At::Regs {
            parts,
            off: off + by,
        },
        At::Mem { base, hops, off } => At::Mem {
            base,
            hops,
            off: off + by as i64,
        },
    }
}

fn part_at(parts: &[Part], off: u64) -> Option<Part> {
    parts.iter().find(|p| p.offset == off).copied()
}
