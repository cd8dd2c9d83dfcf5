//! Go types from DWARF, in the model of [`super::TypeInfo`]: struct members with their
//! offsets (DW_AT_data_member_location) and embedding (DW_AT_go_embedded_field), the
//! elements and keys of Go's kinds (DW_AT_go_elem, DW_AT_go_key), typedefs for named
//! types. Every Go type DIE has a name (`main.order`, `*main.order`, `[]string`): the index
//! is by name.

use std::collections::HashMap;

use std::sync::Arc;

use gimli::{constants, AttributeValue, DwAt, Unit};

use super::model::{short_name, Field, Kind, TypeInfo, TypeRef};
use super::shape::{shape_of, MAX_DEPTH};
use crate::resolve::dwarf_error::DwarfError;
use crate::resolve::go::dwarf::{Ctx, R};
use crate::resolve::go::gotype::{kind, GoType};

/// Go's DWARF extensions (src/cmd/internal/dwarf/dwarf.go).
const DW_AT_GO_KIND: DwAt = DwAt(0x2900);
const DW_AT_GO_KEY: DwAt = DwAt(0x2901);
const DW_AT_GO_ELEM: DwAt = DwAt(0x2902);
const DW_AT_GO_EMBEDDED_FIELD: DwAt = DwAt(0x2903);
/// The descriptor's offset from `runtime.types` (what DWARF and descriptors both describe).
const DW_AT_GO_RUNTIME_TYPE: DwAt = DwAt(0x2904);

/// The attributes of a type DIE that gprobe uses.
#[derive(Default)]
struct TypeAttrs {
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

/// The named types of a binary's DWARF.
#[derive(Debug, Default)]
pub(crate) struct DwarfIndex {
    /// .debug_info offset of each type DIE, by name; a struct wins over the typedef Go
    /// writes beside it under the same name.
    pub(super) by_name: HashMap<String, usize>,
    /// Full names by their package-name form (`http.Request` -> `net/http.Request`).
    pub(super) short: HashMap<String, Vec<String>>,
}

fn is_type_tag(t: gimli::DwTag) -> bool {
    matches!(
        t,
        constants::DW_TAG_base_type
            | constants::DW_TAG_structure_type
            | constants::DW_TAG_typedef
            | constants::DW_TAG_pointer_type
            | constants::DW_TAG_array_type
            | constants::DW_TAG_subroutine_type
    )
}

impl DwarfIndex {
    /// Indexes the type DIEs at the top level of every unit.
    pub(super) fn build(ctx: &Ctx<'_>) -> Result<DwarfIndex, DwarfError> {
        let dwarf = ctx.gimli();
        let mut idx = DwarfIndex::default();
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            let unit = dwarf.unit(header)?;
            let mut tree = unit.entries_tree(None)?;
            let root = tree.root()?;
            let mut children = root.children();
            while let Some(child) = children.next()? {
                let e = child.entry();
                if !is_type_tag(e.tag()) {
                    continue;
                }
                let Some(v) = e.attr_value(constants::DW_AT_name)? else {
                    continue;
                };
                let Ok(name) = dwarf.attr_string(&unit, v) else {
                    continue;
                };
                let name = String::from_utf8_lossy(name.slice()).into_owned();
                let Some(off) = e.offset().to_debug_info_offset(&unit.header) else {
                    continue;
                };
                let typedef = e.tag() == constants::DW_TAG_typedef;
                match idx.by_name.get(&name) {
                    Some(_) if typedef => {}
                    Some(_) => {
                        idx.by_name.insert(name, off.0);
                    }
                    None => {
                        let key = short_name(&name).to_string();
                        if key != name && !name.starts_with(['*', '[', '.']) {
                            idx.short.entry(key).or_default().push(name.clone());
                        }
                        idx.by_name.insert(name, off.0);
                    }
                }
            }
        }
        Ok(idx)
    }
}

impl<'a> Ctx<'a> {
    /// The attributes of the type DIE `e` of `unit`.
    fn type_attrs(
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

    /// The name and register-ABI shape of the type DIE at `off` (a DWARF parameter's
    /// type), read in the one type model as the capture planner reads it. A generic
    /// parameter's `.paramN` typedef takes the name of the type it stands for.
    pub(in crate::resolve::go) fn param_type(
        &mut self,
        off: usize,
    ) -> Result<(String, GoType), DwarfError> {
        let mut get = |r: TypeRef| match r {
            TypeRef::Dwarf(o) => self.cached_type_info(o),
            // DWARF's types refer only to DWARF's.
            _ => Err(DwarfError::NotLoaded),
        };
        let too_deep = |t: &TypeInfo| DwarfError::StructsTooDeep {
            type_name: t.name.clone(),
            max: MAX_DEPTH,
        };
        let shape = shape_of(TypeRef::Dwarf(off), &mut get, &too_deep)?;
        let name = self.cached_type_info(off)?.name.clone();
        let name = if name.is_empty() {
            shape.to_string()
        } else {
            name
        };
        Ok((name, shape))
    }

    /// [`Self::type_info`], read once per DIE for the signatures of a whole binary.
    fn cached_type_info(&mut self, off: usize) -> Result<Arc<TypeInfo>, DwarfError> {
        if let Some(t) = self.types.get(&off) {
            return Ok(t.clone());
        }
        let t = Arc::new(self.type_info(off)?.0);
        self.types.insert(off, t.clone());
        Ok(t)
    }

    /// The type DIE at `off` in gprobe's model; also the descriptor offset
    /// (DW_AT_go_runtime_type) Go recorded for it.
    pub(super) fn type_info(&mut self, off: usize) -> Result<(TypeInfo, Option<u64>), DwarfError> {
        self.type_info_at(off, 0)
    }

    fn type_info_at(
        &mut self,
        off: usize,
        depth: usize,
    ) -> Result<(TypeInfo, Option<u64>), DwarfError> {
        if depth > 16 {
            return Err(DwarfError::TypedefsTooDeep { offset: off });
        }
        let (unit, uoff) = self.locate(off)?;
        let e = unit.entry(uoff)?;
        let tag = e.tag();
        let a = self.type_attrs(&unit, &e)?;
        let encoding = a.encoding;
        let name = a.name.clone().unwrap_or_default();
        let target = |what: &'static str| {
            a.target.ok_or_else(|| DwarfError::RefersToNoType {
                what,
                name: name.clone(),
                offset: off,
            })
        };
        let ptr = |k: Kind| TypeInfo {
            name: name.clone(),
            size: 8,
            kind: k,
        };
        let info = match (tag, a.go_kind) {
            // Named types whose layout is their target's: `main.order` (beside its
            // struct), `main.Money` (an int64), `error` (runtime.iface)...
            (constants::DW_TAG_typedef, k)
                if !matches!(k, Some(kind::MAP | kind::CHAN | kind::FUNC)) =>
            {
                let (mut t, rt) = self.type_info_at(target("typedef")?, depth + 1)?;
                if k == Some(kind::INTERFACE) {
                    t.kind = Kind::Interface {
                        empty: t.name == "runtime.eface",
                    };
                    t.size = 16;
                }
                // `.param0`: a generic function's parameter type; the target names it.
                if !name.starts_with(".param") {
                    t.name = name;
                }
                return Ok((t, a.runtime_type.or(rt)));
            }
            (_, Some(kind::MAP)) => ptr(Kind::Map {
                key: TypeRef::Dwarf(a.key.ok_or(missing("map", "DW_AT_go_key"))?),
                elem: TypeRef::Dwarf(a.elem.ok_or(missing("map", "DW_AT_go_elem"))?),
            }),
            (_, Some(kind::CHAN)) => ptr(Kind::Chan),
            (_, Some(kind::FUNC)) | (constants::DW_TAG_subroutine_type, _) => ptr(Kind::Func),
            (constants::DW_TAG_pointer_type, k) => match a.target {
                Some(t) if k != Some(kind::UNSAFE_POINTER) => ptr(Kind::Pointer(TypeRef::Dwarf(t))),
                _ => ptr(Kind::UnsafePointer),
            },
            (constants::DW_TAG_structure_type, Some(kind::STRING)) => basic(name, 16, Kind::String),
            (constants::DW_TAG_structure_type, Some(kind::SLICE)) => basic(
                name,
                24,
                Kind::Slice(TypeRef::Dwarf(
                    a.elem.ok_or(missing("slice", "DW_AT_go_elem"))?,
                )),
            ),
            (constants::DW_TAG_structure_type, _) => TypeInfo {
                kind: Kind::Struct(self.members(off)?),
                size: a
                    .size
                    .ok_or_else(|| DwarfError::StructWithoutSize { name: name.clone() })?,
                name,
            },
            (constants::DW_TAG_array_type, _) => {
                let len = self.array_len(off)?;
                TypeInfo {
                    size: a.size.unwrap_or(0),
                    kind: Kind::Array {
                        elem: TypeRef::Dwarf(target("array")?),
                        len,
                    },
                    name,
                }
            }
            (constants::DW_TAG_base_type, k) => {
                let size = a.size.unwrap_or(0);
                let k =
                    base_kind(k, encoding, size).ok_or_else(|| DwarfError::UnknownBaseType {
                        name: name.clone(),
                        size,
                    })?;
                basic(name, size, k)
            }
            _ => {
                return Err(DwarfError::NotAGoType {
                    tag,
                    name,
                    offset: off,
                })
            }
        };
        Ok((info, a.runtime_type))
    }

    fn members(&mut self, off: usize) -> Result<Vec<Field>, DwarfError> {
        let (unit, uoff) = self.locate(off)?;
        let mut out = Vec::new();
        let mut tree = unit.entries_tree(Some(uoff))?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            if e.tag() != constants::DW_TAG_member {
                continue;
            }
            let (mut name, mut ty, mut offset, mut embedded) = (String::new(), None, None, false);
            let mut attrs = e.attrs();
            while let Some(at) = attrs.next()? {
                match at.name() {
                    constants::DW_AT_name => {
                        name = self.string(&unit, at.value()).unwrap_or_default()
                    }
                    constants::DW_AT_type => ty = Self::reference(&unit, at.value()),
                    constants::DW_AT_data_member_location => offset = at.udata_value(),
                    DW_AT_GO_EMBEDDED_FIELD => {
                        embedded = matches!(at.value(), AttributeValue::Flag(true))
                            || at.udata_value().is_some_and(|v| v != 0)
                    }
                    _ => {}
                }
            }
            out.push(Field {
                ty: TypeRef::Dwarf(ty.ok_or_else(|| DwarfError::FieldWithoutType {
                    field: name.clone(),
                })?),
                offset: offset.ok_or_else(|| DwarfError::FieldWithoutOffset {
                    field: name.clone(),
                })?,
                name,
                embedded,
            });
        }
        Ok(out)
    }

    fn array_len(&mut self, off: usize) -> Result<u64, DwarfError> {
        let (unit, uoff) = self.locate(off)?;
        let mut tree = unit.entries_tree(Some(uoff))?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            if e.tag() != constants::DW_TAG_subrange_type {
                continue;
            }
            if let Some(c) = e.attr_value(constants::DW_AT_count)? {
                return c
                    .udata_value()
                    .ok_or(DwarfError::ArrayLengthNotConstant { what: "count" });
            }
            if let Some(u) = e.attr_value(constants::DW_AT_upper_bound)? {
                return u
                    .udata_value()
                    .map(|u| u + 1)
                    .ok_or(DwarfError::ArrayLengthNotConstant { what: "bound" });
            }
        }
        Err(DwarfError::ArrayWithoutLength)
    }
}

/// A map or slice type without one of Go's attributes.
fn missing(what: &'static str, attr: &'static str) -> DwarfError {
    DwarfError::MissingGoAttribute { what, attr }
}

fn basic(name: String, size: u64, kind: Kind) -> TypeInfo {
    TypeInfo { name, size, kind }
}

/// The kind of a base type, by Go kind where DWARF gives it, else by encoding and size.
fn base_kind(k: Option<u8>, enc: Option<gimli::DwAte>, size: u64) -> Option<Kind> {
    let int = |signed| Kind::Int {
        size: size as u8,
        signed,
    };
    Some(match (k, enc) {
        (Some(kind::BOOL), _) | (None, Some(constants::DW_ATE_boolean)) => Kind::Bool,
        (Some(kind::UINTPTR), _) => Kind::Uintptr,
        (Some(kind::INT..=kind::INT64), _) => int(true),
        (Some(kind::UINT..=kind::UINT64), _) => int(false),
        (Some(kind::FLOAT32 | kind::FLOAT64), _) => Kind::Float { size: size as u8 },
        (Some(kind::COMPLEX64 | kind::COMPLEX128), _) => Kind::Complex { size: size as u8 },
        (None, Some(constants::DW_ATE_signed | constants::DW_ATE_signed_char)) => int(true),
        (None, Some(constants::DW_ATE_unsigned | constants::DW_ATE_unsigned_char)) => int(false),
        (None, Some(constants::DW_ATE_float)) => Kind::Float { size: size as u8 },
        (None, Some(constants::DW_ATE_complex_float)) => Kind::Complex { size: size as u8 },
        _ => return None,
    })
    .filter(|k| match k {
        Kind::Int { size, .. } => matches!(size, 1 | 2 | 4 | 8),
        Kind::Float { size } => matches!(size, 4 | 8),
        Kind::Complex { size } => matches!(size, 8 | 16),
        _ => true,
    })
}
