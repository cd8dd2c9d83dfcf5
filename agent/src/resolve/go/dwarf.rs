//! Go function signatures from DWARF: the parameters and results of a function's
//! DW_TAG_subprogram, their names and their types mapped to [`GoType`].
//!
//! Go compresses its DWARF: older releases in `.zdebug_*` sections, Go 1.19 and 1.27 (as
//! measured) in SHF_COMPRESSED `.debug_*` sections; object's `uncompressed_data` handles
//! both. Go 1.25+ writes DWARF 5 (addresses through .debug_addr).

use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

use gimli::{
    constants, AttributeValue, DebugInfoOffset, DwAt, EndianSlice, RunTimeEndian, SectionId, Unit,
    UnitOffset,
};
use object::{Object, ObjectSection};

use super::gotype::GoType;
use crate::resolve::elf::ElfFile;

/// A parameter or result of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DwarfParam {
    /// The Go name; unnamed (or `_`) parameters are `p0`, `p1`..., results `r0`, `r1`...
    /// (by position among the parameters, respectively the results).
    pub name: String,
    /// The DWARF type's name, e.g. `*net/http.Client`, `string`, `error`.
    pub type_name: String,
    pub ty: GoType,
}

/// A function's signature as DWARF describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DwarfSignature {
    pub params: Vec<DwarfParam>,
    pub results: Vec<DwarfParam>,
}

/// Go's DWARF extensions (src/cmd/internal/dwarf/dwarf.go).
const DW_AT_GO_KIND: DwAt = DwAt(0x2900);
const DW_AT_GO_ELEM: DwAt = DwAt(0x2902);

/// reflect.Kind values used by DW_AT_go_kind.
mod kind {
    pub const BOOL: u64 = 1;
    pub const INT: u64 = 2;
    pub const INT64: u64 = 6;
    pub const UINT: u64 = 7;
    pub const UINT8: u64 = 8;
    pub const UINT64: u64 = 11;
    pub const UINTPTR: u64 = 12;
    pub const FLOAT32: u64 = 13;
    pub const FLOAT64: u64 = 14;
    pub const COMPLEX64: u64 = 15;
    pub const COMPLEX128: u64 = 16;
    pub const ARRAY: u64 = 17;
    pub const CHAN: u64 = 18;
    pub const FUNC: u64 = 19;
    pub const INTERFACE: u64 = 20;
    pub const MAP: u64 = 21;
    pub const PTR: u64 = 22;
    pub const SLICE: u64 = 23;
    pub const STRING: u64 = 24;
    pub const STRUCT: u64 = 25;
    pub const UNSAFE_POINTER: u64 = 26;
}

/// Nested by-value types deeper than this are treated as malformed (cycles).
const MAX_DEPTH: usize = 48;

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// A DWARF section's bytes: in the mapped file, or decompressed.
enum SecData {
    Mapped(usize, usize),
    Owned(Vec<u8>),
}

/// The loaded DWARF sections and an index of subprograms by entry address.
pub(crate) struct DwarfCache {
    sections: Vec<(SectionId, SecData)>,
    /// Start offsets of the units in .debug_info, ascending.
    units: Vec<usize>,
    /// Entry address -> .debug_info offset of its DW_TAG_subprogram.
    by_addr: HashMap<u64, usize>,
}

fn err_str(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl DwarfCache {
    pub(crate) fn load(elf: &ElfFile) -> Result<DwarfCache, String> {
        let data = elf.data();
        let file = object::File::parse(data).map_err(err_str)?;
        let base = data.as_ptr() as usize;
        let mut sections = Vec::new();
        for id in [
            SectionId::DebugAbbrev,
            SectionId::DebugAddr,
            SectionId::DebugInfo,
            SectionId::DebugLine,
            SectionId::DebugLineStr,
            SectionId::DebugStr,
            SectionId::DebugStrOffsets,
            SectionId::DebugTypes,
        ] {
            let Some(sec) = file.section_by_name(id.name()) else {
                continue;
            };
            let bytes = sec
                .uncompressed_data()
                .map_err(|e| format!("section {}: {e}", id.name()))?;
            let d = match bytes {
                Cow::Borrowed(b) => SecData::Mapped(b.as_ptr() as usize - base, b.len()),
                Cow::Owned(v) => SecData::Owned(v),
            };
            sections.push((id, d));
        }
        let mut cache = DwarfCache {
            sections,
            units: Vec::new(),
            by_addr: HashMap::new(),
        };
        let dwarf = cache.dwarf(elf);
        let mut iter = dwarf.units();
        let mut units = Vec::new();
        let mut by_addr = HashMap::new();
        while let Some(header) = iter.next().map_err(err_str)? {
            let Some(uoff) = header.offset().as_debug_info_offset() else {
                continue;
            };
            units.push(uoff.0);
            let unit = dwarf.unit(header).map_err(err_str)?;
            let mut tree = unit.entries_tree(None).map_err(err_str)?;
            let root = tree.root().map_err(err_str)?;
            let mut children = root.children();
            while let Some(child) = children.next().map_err(err_str)? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_subprogram {
                    continue;
                }
                let Some(v) = e.attr_value(constants::DW_AT_low_pc).map_err(err_str)? else {
                    continue;
                };
                if let Ok(Some(addr)) = dwarf.attr_address(&unit, v) {
                    if let Some(off) = e.offset().to_debug_info_offset(&unit.header) {
                        by_addr.entry(addr).or_insert(off.0);
                    }
                }
            }
        }
        cache.units = units;
        cache.by_addr = by_addr;
        Ok(cache)
    }

    fn bytes<'a>(&'a self, elf: &'a ElfFile, id: SectionId) -> &'a [u8] {
        match self.sections.iter().find(|(i, _)| *i == id) {
            Some((_, SecData::Mapped(off, len))) => {
                elf.data().get(*off..off + len).unwrap_or_default()
            }
            Some((_, SecData::Owned(v))) => v,
            None => &[],
        }
    }

    fn dwarf<'a>(&'a self, elf: &'a ElfFile) -> gimli::Dwarf<R<'a>> {
        let loaded: Result<_, ()> = gimli::Dwarf::load(|id| {
            Ok(EndianSlice::new(self.bytes(elf, id), RunTimeEndian::Little))
        });
        loaded.unwrap_or_default()
    }

    /// The signature of the subprogram whose low_pc is `addr`; `None` when DWARF has none.
    pub(crate) fn signature(
        &self,
        elf: &ElfFile,
        addr: u64,
    ) -> Option<Result<DwarfSignature, String>> {
        let &off = self.by_addr.get(&addr)?;
        Some(Ctx::new(self, elf).signature(off))
    }

    /// The signatures of every subprogram by low_pc, each decoded or not.
    pub(crate) fn signatures<'a>(
        &'a self,
        elf: &'a ElfFile,
    ) -> impl Iterator<Item = (u64, Result<DwarfSignature, String>)> + 'a {
        let mut ctx = Ctx::new(self, elf);
        self.by_addr
            .iter()
            .map(move |(&addr, &off)| (addr, ctx.signature(off)))
    }
}

/// Resolves types and signatures over one loaded DWARF, caching units and types.
struct Ctx<'a> {
    dwarf: gimli::Dwarf<R<'a>>,
    unit_starts: &'a [usize],
    units: HashMap<usize, Rc<Unit<R<'a>>>>,
    types: HashMap<usize, (String, GoType)>,
}

impl<'a> Ctx<'a> {
    fn new(cache: &'a DwarfCache, elf: &'a ElfFile) -> Self {
        Ctx {
            dwarf: cache.dwarf(elf),
            unit_starts: &cache.units,
            units: HashMap::new(),
            types: HashMap::new(),
        }
    }

    /// The unit holding .debug_info offset `off`, and the entry's offset in it.
    fn locate(&mut self, off: usize) -> Result<(Rc<Unit<R<'a>>>, UnitOffset), String> {
        let i = self.unit_starts.partition_point(|&s| s <= off);
        if i == 0 {
            return Err(format!("reference {off:#x} is before the first unit"));
        }
        let start = self.unit_starts[i - 1];
        let unit = match self.units.get(&start) {
            Some(u) => u.clone(),
            None => {
                let header = self
                    .dwarf
                    .debug_info
                    .header_from_offset(DebugInfoOffset(start))
                    .map_err(err_str)?;
                let u = Rc::new(self.dwarf.unit(header).map_err(err_str)?);
                self.units.insert(start, u.clone());
                u
            }
        };
        let uoff = DebugInfoOffset(off)
            .to_unit_offset(&unit.header)
            .ok_or_else(|| format!("reference {off:#x} is outside its unit"))?;
        Ok((unit, uoff))
    }

    fn string(&self, unit: &Unit<R<'a>>, v: AttributeValue<R<'a>>) -> Option<String> {
        let s = self.dwarf.attr_string(unit, v).ok()?;
        Some(String::from_utf8_lossy(s.slice()).into_owned())
    }

    /// A reference attribute as a .debug_info offset.
    fn reference(unit: &Unit<R<'a>>, v: AttributeValue<R<'a>>) -> Option<usize> {
        match v {
            AttributeValue::UnitRef(u) => u.to_debug_info_offset(&unit.header).map(|o| o.0),
            AttributeValue::DebugInfoRef(o) => Some(o.0),
            _ => None,
        }
    }

    /// The signature of the subprogram at .debug_info offset `off`.
    fn signature(&mut self, off: usize) -> Result<DwarfSignature, String> {
        let (unit, uoff) = self.locate(off)?;
        let entry = unit.entry(uoff).map_err(err_str)?;
        // A concrete instance of an inlinable function: the abstract one lists every
        // parameter in declaration order, with names and types.
        let origin = entry
            .attr_value(constants::DW_AT_abstract_origin)
            .map_err(err_str)?
            .and_then(|v| Self::reference(&unit, v));
        let (unit, uoff) = match origin {
            Some(o) => self.locate(o)?,
            None => (unit, uoff),
        };
        // (name, is_result, type offset) of each formal parameter.
        let mut raw = Vec::new();
        {
            let mut tree = unit.entries_tree(Some(uoff)).map_err(err_str)?;
            let root = tree.root().map_err(err_str)?;
            let mut children = root.children();
            while let Some(child) = children.next().map_err(err_str)? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_formal_parameter {
                    continue;
                }
                let mut name = None;
                let mut is_result = false;
                let mut ty = None;
                let mut attrs = e.attrs();
                while let Some(a) = attrs.next().map_err(err_str)? {
                    match a.name() {
                        constants::DW_AT_name => name = self.string(&unit, a.value()),
                        constants::DW_AT_variable_parameter => {
                            is_result = matches!(a.value(), AttributeValue::Flag(true))
                                || a.udata_value().is_some_and(|v| v != 0);
                        }
                        constants::DW_AT_type => ty = Self::reference(&unit, a.value()),
                        _ => {}
                    }
                }
                let ty = ty.ok_or_else(|| {
                    format!(
                        "parameter {} has no type",
                        name.as_deref().unwrap_or("(unnamed)")
                    )
                })?;
                raw.push((name, is_result, ty));
            }
        }
        let mut sig = DwarfSignature {
            params: Vec::new(),
            results: Vec::new(),
        };
        for (name, is_result, ty) in raw {
            let (type_name, ty) = self.go_type(ty, 0)?;
            let list = if is_result {
                &mut sig.results
            } else {
                &mut sig.params
            };
            let name = match name {
                Some(n) if !n.is_empty() && !n.starts_with('~') && n != "_" => n,
                _ => format!("{}{}", if is_result { 'r' } else { 'p' }, list.len()),
            };
            list.push(DwarfParam {
                name,
                type_name,
                ty,
            });
        }
        Ok(sig)
    }

    /// The name and [`GoType`] of the type at .debug_info offset `off`.
    fn go_type(&mut self, off: usize, depth: usize) -> Result<(String, GoType), String> {
        if let Some(t) = self.types.get(&off) {
            return Ok(t.clone());
        }
        if depth > MAX_DEPTH {
            return Err(format!("type at {off:#x} nests too deeply (a cycle?)"));
        }
        let (unit, uoff) = self.locate(off)?;
        let e = unit.entry(uoff).map_err(err_str)?;
        let tag = e.tag();
        let mut name = None;
        let mut go_kind = None;
        let mut byte_size = None;
        let mut encoding = None;
        let mut target = None;
        let mut elem = None;
        let mut attrs = e.attrs();
        while let Some(a) = attrs.next().map_err(err_str)? {
            match a.name() {
                constants::DW_AT_name => name = self.string(&unit, a.value()),
                constants::DW_AT_byte_size => byte_size = a.udata_value(),
                constants::DW_AT_encoding => {
                    encoding = match a.value() {
                        AttributeValue::Encoding(enc) => Some(enc),
                        v => v.udata_value().map(|x| gimli::DwAte(x as u8)),
                    }
                }
                constants::DW_AT_type => target = Self::reference(&unit, a.value()),
                // Kind 0 (Invalid) appears on some synthesized types: use the tag.
                DW_AT_GO_KIND => go_kind = a.udata_value().filter(|&k| k != 0),
                DW_AT_GO_ELEM => elem = Self::reference(&unit, a.value()),
                _ => {}
            }
        }
        let type_desc = || {
            format!(
                "type {} ({} at {off:#x})",
                name.as_deref().unwrap_or("(unnamed)"),
                tag
            )
        };
        let is_typedef = tag == constants::DW_TAG_typedef;
        let follow = |ctx: &mut Self| -> Result<GoType, String> {
            let t = target.ok_or_else(|| format!("{} refers to no type", type_desc()))?;
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
            Some(k) => return Err(format!("{} has unknown Go kind {k}", type_desc())),
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
                        _ => {
                            return Err(format!(
                                "{} has an unsupported encoding or size {size}",
                                type_desc()
                            ))
                        }
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
                _ => return Err(format!("{} is not a type gprobe can decode", type_desc())),
            },
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
    ) -> Result<bool, String> {
        let Some(mut off) = elem else {
            return Ok(matches!(slice_name.as_deref(), Some("[]uint8" | "[]byte")));
        };
        // Follow typedefs by hand: mapping the element fully could recurse forever
        // (type T struct{ kids []T }).
        for _ in depth..MAX_DEPTH {
            let (unit, uoff) = self.locate(off)?;
            let e = unit.entry(uoff).map_err(err_str)?;
            if let Some(k) = e.attr_value(DW_AT_GO_KIND).map_err(err_str)? {
                return Ok(k.udata_value() == Some(kind::UINT8));
            }
            match e.tag() {
                constants::DW_TAG_typedef => {
                    match e
                        .attr_value(constants::DW_AT_type)
                        .map_err(err_str)?
                        .and_then(|v| Self::reference(&unit, v))
                    {
                        Some(t) => off = t,
                        None => return Ok(false),
                    }
                }
                constants::DW_TAG_base_type => {
                    let size = e.attr_value(constants::DW_AT_byte_size).map_err(err_str)?;
                    let enc = e.attr_value(constants::DW_AT_encoding).map_err(err_str)?;
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
    ) -> Result<GoType, String> {
        let mut members = Vec::new();
        {
            let mut tree = unit.entries_tree(Some(uoff)).map_err(err_str)?;
            let root = tree.root().map_err(err_str)?;
            let mut children = root.children();
            while let Some(child) = children.next().map_err(err_str)? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_member {
                    continue;
                }
                let name = match e.attr_value(constants::DW_AT_name).map_err(err_str)? {
                    Some(v) => self.string(unit, v).unwrap_or_default(),
                    None => String::new(),
                };
                let ty = e
                    .attr_value(constants::DW_AT_type)
                    .map_err(err_str)?
                    .and_then(|v| Self::reference(unit, v))
                    .ok_or_else(|| format!("struct field {name} has no type"))?;
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
    ) -> Result<GoType, String> {
        let elem = elem.ok_or("array type has no element type")?;
        let elem = self.go_type(elem, depth + 1)?.1;
        let mut len = None;
        {
            let mut tree = unit.entries_tree(Some(uoff)).map_err(err_str)?;
            let root = tree.root().map_err(err_str)?;
            let mut children = root.children();
            while let Some(child) = children.next().map_err(err_str)? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_subrange_type {
                    continue;
                }
                if let Some(c) = e.attr_value(constants::DW_AT_count).map_err(err_str)? {
                    len = c.udata_value();
                } else if let Some(u) = e
                    .attr_value(constants::DW_AT_upper_bound)
                    .map_err(err_str)?
                {
                    len = u.udata_value().map(|u| u + 1);
                }
                break;
            }
        }
        let len = match (len, byte_size) {
            (Some(l), _) => l,
            (None, Some(s)) if elem.size() > 0 => s / elem.size(),
            _ => return Err("array type has no length".into()),
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
