//! DWARF types mapped to [`GoType`]: Go's kinds (DW_AT_go_kind), structs, arrays and the
//! element of slices.

use std::rc::Rc;

use gimli::{constants, AttributeValue, DwAt, Unit, UnitOffset};

use super::dwarf::{Ctx, R};
use super::gotype::{kind, GoType};
use crate::resolve::dwarf_error::{DwarfError, TypeDie};

/// Go's DWARF extensions (src/cmd/internal/dwarf/dwarf.go).
const DW_AT_GO_KIND: DwAt = DwAt(0x2900);
const DW_AT_GO_KEY: DwAt = DwAt(0x2901);
const DW_AT_GO_ELEM: DwAt = DwAt(0x2902);
pub(super) const DW_AT_GO_EMBEDDED_FIELD: DwAt = DwAt(0x2903);
/// The descriptor's offset from `runtime.types` (what DWARF and descriptors both describe).
const DW_AT_GO_RUNTIME_TYPE: DwAt = DwAt(0x2904);

/// The attributes of a type DIE that gprobe uses (both the ABI's [`GoType`] and the
/// struct layouts of `types/` are read from them).
#[derive(Default)]
pub(super) struct TypeAttrs {
    pub name: Option<String>,
    pub size: Option<u64>,
    pub encoding: Option<gimli::DwAte>,
    /// DW_AT_go_kind; kind 0 (Invalid), which some synthesized types carry, reads as none.
    pub go_kind: Option<u8>,
    pub target: Option<usize>,
    pub elem: Option<usize>,
    pub key: Option<usize>,
    pub runtime_type: Option<u64>,
}

/// Nested by-value types deeper than this are treated as malformed (cycles).
const MAX_DEPTH: usize = 48;

impl<'a> Ctx<'a> {
    /// The attributes of the type DIE `e` of `unit`.
    pub(super) fn type_attrs(
        &self,
        unit: &Unit<R<'a>>,
        e: &gimli::DebuggingInformationEntry<'_, '_, R<'a>>,
    ) -> Result<TypeAttrs, DwarfError> {
        let mut a = TypeAttrs::default();
        let mut attrs = e.attrs();
        while let Some(at) = attrs.next()? {
            match at.name() {
                constants::DW_AT_name => a.name = self.string(unit, at.value()),
                constants::DW_AT_byte_size => a.size = at.udata_value(),
                constants::DW_AT_encoding => {
                    a.encoding = match at.value() {
                        AttributeValue::Encoding(enc) => Some(enc),
                        v => v.udata_value().map(|x| gimli::DwAte(x as u8)),
                    }
                }
                constants::DW_AT_type => a.target = Self::reference(unit, at.value()),
                DW_AT_GO_KIND => a.go_kind = at.udata_value().map(|k| k as u8).filter(|&k| k != 0),
                DW_AT_GO_ELEM => a.elem = Self::reference(unit, at.value()),
                DW_AT_GO_KEY => a.key = Self::reference(unit, at.value()),
                DW_AT_GO_RUNTIME_TYPE => a.runtime_type = at.udata_value(),
                _ => {}
            }
        }
        Ok(a)
    }

    /// The name and [`GoType`] of the type at .debug_info offset `off`.
    pub(super) fn go_type(
        &mut self,
        off: usize,
        depth: usize,
    ) -> Result<(String, GoType), DwarfError> {
        if let Some(t) = self.types.get(&off) {
            return Ok(t.clone());
        }
        if depth > MAX_DEPTH {
            return Err(DwarfError::TypeTooDeep { offset: off });
        }
        let (unit, uoff) = self.locate(off)?;
        let e = unit.entry(uoff)?;
        let tag = e.tag();
        let TypeAttrs {
            name,
            size: byte_size,
            encoding,
            go_kind,
            target,
            elem,
            ..
        } = self.type_attrs(&unit, &e)?;
        let die = || TypeDie {
            name: name.clone(),
            tag,
            offset: off,
        };
        let is_typedef = tag == constants::DW_TAG_typedef;
        let follow = |ctx: &mut Self| -> Result<GoType, DwarfError> {
            let t = target.ok_or_else(|| DwarfError::NoTarget(die()))?;
            Ok(ctx.go_type(t, depth + 1)?.1)
        };
        let int = |size: u8, signed: bool| GoType::Int { size, signed };
        let ty = match go_kind {
            Some(kind::BOOL) => GoType::Bool,
            Some(kind::INT) => int(8, true),
            Some(k @ 3..=kind::INT64) => int(1 << (k - 3), true),
            Some(kind::UINT) => int(8, false),
            Some(k @ kind::UINT8..=kind::UINT64) => int(1 << (k - kind::UINT8), false),
            Some(kind::UINTPTR) => GoType::Uintptr,
            Some(kind::FLOAT32) => GoType::Float { size: 4 },
            Some(kind::FLOAT64) => GoType::Float { size: 8 },
            Some(kind::COMPLEX64) => GoType::Complex { size: 8 },
            Some(kind::COMPLEX128) => GoType::Complex { size: 16 },
            Some(kind::CHAN | kind::FUNC | kind::MAP | kind::PTR | kind::UNSAFE_POINTER) => {
                GoType::Pointer
            }
            Some(kind::INTERFACE) => GoType::Interface,
            Some(kind::STRING) => GoType::String,
            Some(kind::ARRAY | kind::SLICE | kind::STRUCT) if is_typedef => follow(self)?,
            Some(kind::SLICE) => GoType::Slice {
                bytes: self.is_uint8(elem, &name, depth)?,
            },
            Some(kind::ARRAY) => self.array(&unit, uoff, target, byte_size, depth)?,
            Some(kind::STRUCT) => self.structure(&unit, uoff, byte_size, depth)?,
            Some(k) => {
                return Err(DwarfError::UnknownGoKind {
                    die: die(),
                    kind: k,
                })
            }
            None => match tag {
                constants::DW_TAG_typedef => follow(self)?,
                constants::DW_TAG_pointer_type | constants::DW_TAG_subroutine_type => {
                    GoType::Pointer
                }
                constants::DW_TAG_base_type => {
                    let size = byte_size.unwrap_or(0) as u8;
                    match encoding {
                        Some(constants::DW_ATE_boolean) => GoType::Bool,
                        Some(constants::DW_ATE_signed | constants::DW_ATE_signed_char)
                            if matches!(size, 1 | 2 | 4 | 8) =>
                        {
                            int(size, true)
                        }
                        Some(constants::DW_ATE_unsigned | constants::DW_ATE_unsigned_char)
                            if matches!(size, 1 | 2 | 4 | 8) =>
                        {
                            int(size, false)
                        }
                        Some(constants::DW_ATE_float) if matches!(size, 4 | 8) => {
                            GoType::Float { size }
                        }
                        Some(constants::DW_ATE_complex_float) if matches!(size, 8 | 16) => {
                            GoType::Complex { size }
                        }
                        _ => return Err(DwarfError::UnsupportedBaseType { die: die(), size }),
                    }
                }
                constants::DW_TAG_structure_type => match name.as_deref() {
                    Some("string") => GoType::String,
                    Some(n) if n.starts_with("[]") => GoType::Slice {
                        bytes: n == "[]uint8" || n == "[]byte",
                    },
                    _ => self.structure(&unit, uoff, byte_size, depth)?,
                },
                constants::DW_TAG_array_type => {
                    self.array(&unit, uoff, target, byte_size, depth)?
                }
                _ => return Err(DwarfError::NotDecodable(die())),
            },
        };
        // A generic function's parameters have types `.param0`, `.param1`...: typedefs of
        // the instantiated type, whose name is the one to show.
        let name = match name {
            Some(n) if is_typedef && n.starts_with(".param") => target
                .map(|t| self.go_type(t, depth + 1))
                .transpose()?
                .map(|t| t.0),
            n => n,
        };
        let type_name = name.unwrap_or_else(|| ty.to_string());
        self.types.insert(off, (type_name.clone(), ty.clone()));
        Ok((type_name, ty))
    }

    /// Whether a slice's element type (DW_AT_go_elem) is uint8 (byte).
    fn is_uint8(
        &mut self,
        elem: Option<usize>,
        slice_name: &Option<String>,
        depth: usize,
    ) -> Result<bool, DwarfError> {
        let Some(mut off) = elem else {
            return Ok(matches!(slice_name.as_deref(), Some("[]uint8" | "[]byte")));
        };
        // Follow typedefs by hand: mapping the element fully could recurse forever
        // (type T struct{ kids []T }).
        for _ in depth..MAX_DEPTH {
            let (unit, uoff) = self.locate(off)?;
            let e = unit.entry(uoff)?;
            if let Some(k) = e.attr_value(DW_AT_GO_KIND)? {
                return Ok(k.udata_value() == Some(u64::from(kind::UINT8)));
            }
            match e.tag() {
                constants::DW_TAG_typedef => {
                    match e
                        .attr_value(constants::DW_AT_type)?
                        .and_then(|v| Self::reference(&unit, v))
                    {
                        Some(t) => off = t,
                        None => return Ok(false),
                    }
                }
                constants::DW_TAG_base_type => {
                    let size = e.attr_value(constants::DW_AT_byte_size)?;
                    let enc = e.attr_value(constants::DW_AT_encoding)?;
                    return Ok(size.and_then(|s| s.udata_value()) == Some(1)
                        && matches!(
                            enc,
                            Some(AttributeValue::Encoding(
                                constants::DW_ATE_unsigned | constants::DW_ATE_unsigned_char
                            ))
                        ));
                }
                _ => return Ok(false),
            }
        }
        Ok(false)
    }

    fn structure(
        &mut self,
        unit: &Rc<Unit<R<'a>>>,
        uoff: UnitOffset,
        byte_size: Option<u64>,
        depth: usize,
    ) -> Result<GoType, DwarfError> {
        let mut members = Vec::new();
        {
            let mut tree = unit.entries_tree(Some(uoff))?;
            let root = tree.root()?;
            let mut children = root.children();
            while let Some(child) = children.next()? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_member {
                    continue;
                }
                let name = match e.attr_value(constants::DW_AT_name)? {
                    Some(v) => self.string(unit, v).unwrap_or_default(),
                    None => String::new(),
                };
                let ty = e
                    .attr_value(constants::DW_AT_type)?
                    .and_then(|v| Self::reference(unit, v))
                    .ok_or_else(|| DwarfError::StructFieldWithoutType {
                        field: name.clone(),
                    })?;
                members.push((name, ty));
            }
        }
        let mut fields = Vec::with_capacity(members.len());
        for (name, ty) in members {
            fields.push((name, self.go_type(ty, depth + 1)?.1));
        }
        let align = fields.iter().map(|(_, t)| t.align()).max().unwrap_or(1);
        match byte_size {
            Some(size) => Ok(GoType::Struct {
                fields,
                size,
                align,
            }),
            None => Ok(GoType::new_struct(fields)),
        }
    }

    fn array(
        &mut self,
        unit: &Rc<Unit<R<'a>>>,
        uoff: UnitOffset,
        elem: Option<usize>,
        byte_size: Option<u64>,
        depth: usize,
    ) -> Result<GoType, DwarfError> {
        let elem = elem.ok_or(DwarfError::ArrayWithoutElement)?;
        let elem = self.go_type(elem, depth + 1)?.1;
        let mut len = None;
        {
            let mut tree = unit.entries_tree(Some(uoff))?;
            let root = tree.root()?;
            let mut children = root.children();
            while let Some(child) = children.next()? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_subrange_type {
                    continue;
                }
                if let Some(c) = e.attr_value(constants::DW_AT_count)? {
                    len = c.udata_value();
                } else if let Some(u) = e.attr_value(constants::DW_AT_upper_bound)? {
                    len = u.udata_value().map(|u| u + 1);
                }
                break;
            }
        }
        let len = match (len, byte_size) {
            (Some(l), _) => l,
            (None, Some(s)) if elem.size() > 0 => s / elem.size(),
            _ => return Err(DwarfError::ArrayWithoutLength),
        };
        let size = byte_size.unwrap_or(len * elem.size());
        let align = elem.align();
        Ok(GoType::Array {
            len,
            elem: Box::new(elem),
            size,
            align,
        })
    }
}
