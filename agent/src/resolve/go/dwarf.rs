//! Go function signatures from DWARF: the parameters and results of a function's
//! DW_TAG_subprogram, their names and their types, read as the capture planner reads them
//! (go/types/dwarf.rs) and laid out as the register ABI's [`GoType`].
//!
//! Go compresses its DWARF: older releases in `.zdebug_*` sections, Go 1.19 and 1.27 (as
//! measured) in SHF_COMPRESSED `.debug_*` sections; object's `uncompressed_data` handles
//! both. Go 1.25+ writes DWARF 5 (addresses through .debug_addr).

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use gimli::{constants, AttributeValue, Unit, UnitOffset};

use super::gotype::GoType;
use crate::resolve::dwarf_error::DwarfError;
use crate::resolve::dwarf_units::{DwarfReader, DwarfUnits};
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
    /// DWARF lists a `.dict` parameter: a generic instantiation's dictionary pointer,
    /// passed before the declared parameters (Go 1.21+ lists it, Go 1.19 does not).
    pub dictionary: bool,
}

pub(super) use crate::resolve::dwarf_sections::R;

/// The binary's DWARF and an index of subprograms by entry address.
pub(crate) struct DwarfCache {
    units: Arc<DwarfUnits>,
    /// Entry address -> .debug_info offset of its DW_TAG_subprogram.
    by_addr: HashMap<u64, usize>,
}

impl DwarfCache {
    /// Indexes `units`, the DWARF of `elf` (shared with its C reader, c/dwarf.rs).
    pub(crate) fn load(elf: &ElfFile, units: Arc<DwarfUnits>) -> Result<DwarfCache, DwarfError> {
        let by_addr = Self::subprograms(&units.reader(elf))?;
        Ok(DwarfCache { units, by_addr })
    }

    /// Each top-level subprogram's .debug_info offset by its low_pc.
    fn subprograms(reader: &DwarfReader<'_>) -> Result<HashMap<u64, usize>, DwarfError> {
        let dwarf = reader.gimli();
        let mut iter = dwarf.units();
        let mut by_addr = HashMap::new();
        while let Some(header) = iter.next()? {
            if header.offset().as_debug_info_offset().is_none() {
                continue;
            }
            let unit = dwarf.unit(header)?;
            let mut tree = unit.entries_tree(None)?;
            let root = tree.root()?;
            let mut children = root.children();
            while let Some(child) = children.next()? {
                let e = child.entry();
                if e.tag() != constants::DW_TAG_subprogram {
                    continue;
                }
                let Some(v) = e.attr_value(constants::DW_AT_low_pc)? else {
                    continue;
                };
                if let Ok(Some(addr)) = dwarf.attr_address(&unit, v) {
                    if let Some(off) = e.offset().to_debug_info_offset(&unit.header) {
                        by_addr.entry(addr).or_insert(off.0);
                    }
                }
            }
        }
        Ok(by_addr)
    }

    /// The signature of the subprogram whose low_pc is `addr`; `None` when DWARF has none.
    pub(crate) fn signature(
        &self,
        elf: &ElfFile,
        addr: u64,
    ) -> Option<Result<DwarfSignature, DwarfError>> {
        let &off = self.by_addr.get(&addr)?;
        Some(Ctx::new(self, elf).signature(off))
    }

    /// The signatures of every subprogram by low_pc, each decoded or not.
    pub(crate) fn signatures<'a>(
        &'a self,
        elf: &'a ElfFile,
    ) -> impl Iterator<Item = (u64, Result<DwarfSignature, DwarfError>)> + 'a {
        let mut ctx = Ctx::new(self, elf);
        self.by_addr
            .iter()
            .map(move |(&addr, &off)| (addr, ctx.signature(off)))
    }
}

/// Resolves types and signatures over the binary's DWARF (its units parsed once for the
/// binary, in [`DwarfUnits`]), caching the types it maps.
pub(super) struct Ctx<'a> {
    reader: DwarfReader<'a>,
    /// The types read so far, by DIE offset (go/types/dwarf.rs).
    pub(super) types: HashMap<usize, std::sync::Arc<super::types::model::TypeInfo>>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(cache: &'a DwarfCache, elf: &'a ElfFile) -> Self {
        Ctx {
            reader: cache.units.reader(elf),
            types: HashMap::new(),
        }
    }

    /// The loaded DWARF, for walks over every unit.
    pub(super) fn gimli(&self) -> &gimli::Dwarf<R<'a>> {
        self.reader.gimli()
    }

    /// The unit holding .debug_info offset `off`, and the entry's offset in it.
    pub(super) fn locate(
        &mut self,
        off: usize,
    ) -> Result<(Rc<Unit<R<'a>>>, UnitOffset), DwarfError> {
        self.reader.locate(off)
    }

    pub(super) fn string(&self, unit: &Unit<R<'a>>, v: AttributeValue<R<'a>>) -> Option<String> {
        self.reader.string(unit, v)
    }

    /// A reference attribute as a .debug_info offset.
    pub(super) fn reference(unit: &Unit<R<'a>>, v: AttributeValue<R<'a>>) -> Option<usize> {
        DwarfReader::reference(unit, v)
    }

    /// The signature of the subprogram at .debug_info offset `off`.
    fn signature(&mut self, off: usize) -> Result<DwarfSignature, DwarfError> {
        let (unit, uoff) = self.locate(off)?;
        let entry = unit.entry(uoff)?;
        // A concrete instance of an inlinable function: the abstract one lists every
        // parameter in declaration order, with names and types (the instance may leave
        // out unused ones). Go 1.19 lists unnamed results (`~r0`) only in the instance:
        // take those of its own parameters that the abstract one does not have.
        let origin = entry
            .attr_value(constants::DW_AT_abstract_origin)?
            .and_then(|v| Self::reference(&unit, v));
        let mut raw = match origin {
            Some(o) => {
                let (ounit, ouoff) = self.locate(o)?;
                self.formal_params(&ounit, ouoff)?
            }
            None => Vec::new(),
        };
        for p in self.formal_params(&unit, uoff)? {
            let dup = raw.iter().any(|q| q.0 == p.0);
            if (origin.is_none() || (p.0.is_some() && !dup)) && p.3.is_none() {
                raw.push(p);
            }
        }
        let mut sig = DwarfSignature {
            params: Vec::new(),
            results: Vec::new(),
            dictionary: false,
        };
        for (name, is_result, ty, _) in raw {
            // The dictionary of a generic function's instantiation: not a declared
            // parameter; the planner adds the word it takes (go/types/generic.rs).
            if !is_result && name.as_deref() == Some(".dict") {
                sig.dictionary = true;
                continue;
            }
            let ty = ty.ok_or_else(|| DwarfError::ParamWithoutType {
                param: name.as_deref().unwrap_or("(unnamed)").to_string(),
            })?;
            let (type_name, ty) = self.param_type(ty)?;
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

    /// (name, is_result, type offset, abstract origin) of each formal parameter of the
    /// subprogram at `uoff`, in order.
    #[allow(clippy::type_complexity)]
    fn formal_params(
        &mut self,
        unit: &Unit<R<'a>>,
        uoff: UnitOffset,
    ) -> Result<Vec<(Option<String>, bool, Option<usize>, Option<usize>)>, DwarfError> {
        let mut raw = Vec::new();
        let mut tree = unit.entries_tree(Some(uoff))?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            if e.tag() != constants::DW_TAG_formal_parameter {
                continue;
            }
            let (mut name, mut is_result, mut ty, mut origin) = (None, false, None, None);
            let mut attrs = e.attrs();
            while let Some(a) = attrs.next()? {
                match a.name() {
                    constants::DW_AT_name => name = self.string(unit, a.value()),
                    constants::DW_AT_variable_parameter => {
                        is_result = matches!(a.value(), AttributeValue::Flag(true))
                            || a.udata_value().is_some_and(|v| v != 0);
                    }
                    constants::DW_AT_type => ty = Self::reference(unit, a.value()),
                    constants::DW_AT_abstract_origin => origin = Self::reference(unit, a.value()),
                    _ => {}
                }
            }
            raw.push((name, is_result, ty, origin));
        }
        Ok(raw)
    }
}
