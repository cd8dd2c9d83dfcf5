//! C function prototypes from DWARF: a DW_TAG_subprogram's result type and formal
//! parameters, their types as [`CType`]s. The DWARF is the binary's own, or a separate
//! debug file found by the binary's build ID under `/usr/lib/debug/.build-id/` (what
//! Debian's `-dbg`/`-dbgsym` packages install), used only when its build ID matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gimli::{constants, AttributeValue};
use gprobe_crds::csig::{CParam, CSignature};
use gprobe_crds::ctype::{CType, TagKind};

use crate::resolve::dwarf_error::{DwarfError, UnreadableDwarf};
use crate::resolve::dwarf_units::{DwarfReader, DwarfUnits};
use crate::resolve::elf::ElfFile;

/// Deepest type chain followed (`const char **` is 4); deeper ones are cut.
const MAX_TYPE_DEPTH: usize = 24;

/// The C DWARF of a binary: its sections (in a separate debug file, or in the binary)
/// and an index of subprograms by every address a function's code starts at.
pub(crate) struct CDwarf {
    /// The separate debug file the DWARF came from; `None`: the binary itself.
    separate: Option<ElfFile>,
    /// The DWARF of that file, its units parsed once.
    pub(super) units: Arc<DwarfUnits>,
    by_addr: HashMap<u64, usize>,
    /// External functions by name: their definition (else a declaration), for functions
    /// whose out-of-line code DWARF does not describe (an external function's ABI is its
    /// declared prototype whatever the optimizer did to its inlined copies).
    by_name: HashMap<String, (usize, bool)>,
}

impl std::fmt::Debug for CDwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CDwarf")
            .field("separate", &self.separate.as_ref().map(|e| e.path()))
            .field("functions", &self.by_addr.len())
            .finish()
    }
}

/// Where a separate debug file for `build_id` would be, under each of `roots`.
pub(crate) fn debug_file_candidates(roots: &[PathBuf], build_id: &[u8]) -> Vec<PathBuf> {
    if build_id.len() < 2 {
        return Vec::new();
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    roots
        .iter()
        .map(|r| {
            r.join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]))
        })
        .collect()
}

/// A path under /proc/PID/root/ as the process sees it (for messages and listings).
fn in_root(p: &Path) -> PathBuf {
    let s = p.to_string_lossy();
    if let Some((pid, rest)) = s
        .strip_prefix("/proc/")
        .and_then(|r| r.split_once("/root/"))
    {
        if pid.bytes().all(|b| b.is_ascii_digit()) {
            return PathBuf::from(format!("/{rest}"));
        }
    }
    p.to_path_buf()
}

impl CDwarf {
    /// The DWARF of `elf` if it has any (`own`: the binary's own units, which its Go reader
    /// shares), else of its separate debug file under `roots` (debug folders such as
    /// `/usr/lib/debug`); `Ok(None)` when neither exists.
    pub(crate) fn load(
        elf: &ElfFile,
        own: impl FnOnce() -> Result<Arc<DwarfUnits>, DwarfError>,
        roots: &[PathBuf],
    ) -> Result<Option<CDwarf>, UnreadableDwarf> {
        let dwarf_err = |path: &Path, source: DwarfError| UnreadableDwarf {
            path: path.to_path_buf(),
            symbol: None,
            source,
        };
        if elf.has_dwarf() {
            let units = own().map_err(|r| dwarf_err(elf.path(), r))?;
            return Self::index(None, units, elf).map(Some);
        }
        let Some(id) = elf.build_id() else {
            return Ok(None);
        };
        for cand in debug_file_candidates(roots, id) {
            let Ok(file) = ElfFile::open_as(&cand, &in_root(&cand)) else {
                continue;
            };
            // A debug file of another build would describe other code.
            if file.build_id() != Some(id) || !file.has_dwarf() {
                tracing::debug!(
                    "{}: not the debug file of {}",
                    cand.display(),
                    elf.path().display()
                );
                continue;
            }
            let units = DwarfUnits::load(&file).map_err(|r| dwarf_err(&cand, r))?;
            let units = Arc::new(units);
            return Self::index(Some(file), units, elf).map(Some);
        }
        Ok(None)
    }

    fn index(
        separate: Option<ElfFile>,
        units: Arc<DwarfUnits>,
        bin: &ElfFile,
    ) -> Result<CDwarf, UnreadableDwarf> {
        let mut d = CDwarf {
            separate,
            units,
            by_addr: HashMap::new(),
            by_name: HashMap::new(),
        };
        let path = d.file(bin).path().to_path_buf();
        let scan = d.scan(bin).map_err(|source| UnreadableDwarf {
            path,
            symbol: None,
            source,
        })?;
        (d.by_addr, d.by_name) = scan;
        Ok(d)
    }

    /// Every subprogram with code by each address its code starts at (low_pc, or each
    /// range of a function split into hot and cold parts), and the external ones by name.
    #[allow(clippy::type_complexity)]
    fn scan(
        &self,
        bin: &ElfFile,
    ) -> Result<(HashMap<u64, usize>, HashMap<String, (usize, bool)>), DwarfError> {
        let reader = self.reader(bin);
        let dwarf = reader.gimli();
        let mut by_addr = HashMap::new();
        let mut by_name: HashMap<String, (usize, bool)> = HashMap::new();
        let mut iter = dwarf.units();
        while let Some(header) = iter.next()? {
            if header.offset().as_debug_info_offset().is_none() {
                continue;
            }
            let unit = dwarf.unit(header)?;
            let mut cursor = unit.entries();
            while let Some((_, e)) = cursor.next_dfs()? {
                if e.tag() != constants::DW_TAG_subprogram {
                    continue;
                }
                let Some(off) = e.offset().to_debug_info_offset(&unit.header) else {
                    continue;
                };
                let mut ranges = dwarf.die_ranges(&unit, e)?;
                while let Some(r) = ranges.next()? {
                    if r.begin != 0 {
                        by_addr.entry(r.begin).or_insert(off.0);
                    }
                }
                let flag = |at| matches!(e.attr_value(at), Ok(Some(AttributeValue::Flag(true))));
                if !flag(constants::DW_AT_external) {
                    continue;
                }
                let decl = flag(constants::DW_AT_declaration);
                let Ok(Some(v)) = e.attr_value(constants::DW_AT_name) else {
                    continue;
                };
                let Ok(name) = dwarf.attr_string(&unit, v) else {
                    continue;
                };
                let name = String::from_utf8_lossy(name.slice()).into_owned();
                match by_name.get(&name) {
                    Some((_, false)) => {}
                    Some((_, true)) if decl => {}
                    _ => {
                        by_name.insert(name, (off.0, decl));
                    }
                }
            }
        }
        Ok((by_addr, by_name))
    }

    /// The file the DWARF is in.
    pub(crate) fn file<'a>(&'a self, bin: &'a ElfFile) -> &'a ElfFile {
        self.separate.as_ref().unwrap_or(bin)
    }

    /// The separate debug file's path, if the DWARF is in one.
    pub(crate) fn separate_path(&self) -> Option<&Path> {
        self.separate.as_ref().map(|e| e.path())
    }

    fn reader<'a>(&'a self, bin: &'a ElfFile) -> DwarfReader<'a> {
        self.units.reader(self.file(bin))
    }

    /// The prototype of the function `name` whose code starts at `addr`, if DWARF has
    /// it: the subprogram at that address, else the external function of that name.
    pub(crate) fn signature(
        &self,
        bin: &ElfFile,
        addr: u64,
        name: &str,
    ) -> Option<Result<CSignature, DwarfError>> {
        let off = self.offset_of(addr, name)?;
        Some(Ctx::new(self, bin).signature(off))
    }

    fn offset_of(&self, addr: u64, name: &str) -> Option<usize> {
        self.by_addr
            .get(&addr)
            .copied()
            .or_else(|| self.by_name.get(name).map(|&(off, _)| off))
    }

    /// The prototypes of `funcs` (address, name) that DWARF has, by address; those that
    /// cannot be read are left out.
    pub(crate) fn signatures<'n>(
        &self,
        bin: &ElfFile,
        funcs: impl IntoIterator<Item = (u64, &'n str)>,
    ) -> HashMap<u64, CSignature> {
        let mut ctx = Ctx::new(self, bin);
        funcs
            .into_iter()
            .filter_map(|(addr, name)| {
                let off = self.offset_of(addr, name)?;
                Some((addr, ctx.signature(off).ok()?))
            })
            .collect()
    }
}

/// Resolves types and prototypes over the DWARF's units (parsed once for the file, in
/// [`DwarfUnits`]), caching the types it maps.
struct Ctx<'a> {
    reader: DwarfReader<'a>,
    types: HashMap<usize, CType>,
}

impl<'a> Ctx<'a> {
    fn new(d: &'a CDwarf, bin: &'a ElfFile) -> Self {
        Ctx {
            reader: d.reader(bin),
            types: HashMap::new(),
        }
    }

    /// Name, type and origin (abstract_origin or specification) of the entry at `off`.
    fn attrs(&mut self, off: usize) -> Result<Attrs, DwarfError> {
        let (unit, uoff) = self.reader.locate(off)?;
        let e = unit.entry(uoff)?;
        let mut a = Attrs {
            tag: e.tag(),
            name: None,
            ty: None,
            origin: None,
            size: None,
            encoding: None,
            count: None,
            upper: None,
        };
        let mut it = e.attrs();
        while let Some(attr) = it.next()? {
            match attr.name() {
                constants::DW_AT_name => a.name = self.reader.string(&unit, attr.value()),
                constants::DW_AT_type => a.ty = DwarfReader::reference(&unit, attr.value()),
                constants::DW_AT_abstract_origin | constants::DW_AT_specification => {
                    a.origin = DwarfReader::reference(&unit, attr.value())
                }
                constants::DW_AT_byte_size => a.size = attr.udata_value(),
                constants::DW_AT_encoding => {
                    if let AttributeValue::Encoding(enc) = attr.value() {
                        a.encoding = Some(enc);
                    }
                }
                constants::DW_AT_count => a.count = attr.udata_value(),
                constants::DW_AT_upper_bound => a.upper = attr.udata_value(),
                _ => {}
            }
        }
        Ok(a)
    }

    /// Name and type, following abstract_origin/specification for what the entry lacks.
    fn merged(&mut self, off: usize) -> Result<Attrs, DwarfError> {
        let mut a = self.attrs(off)?;
        let mut next = a.origin;
        for _ in 0..4 {
            let Some(o) = next else { break };
            let b = self.attrs(o)?;
            a.name = a.name.or(b.name);
            a.ty = a.ty.or(b.ty);
            next = b.origin;
        }
        Ok(a)
    }

    /// The children of the entry at `off`: (offset, tag).
    fn children(&mut self, off: usize) -> Result<Vec<(usize, gimli::DwTag)>, DwarfError> {
        let (unit, uoff) = self.reader.locate(off)?;
        let mut out = Vec::new();
        let mut tree = unit.entries_tree(Some(uoff))?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(child) = children.next()? {
            let e = child.entry();
            if let Some(o) = e.offset().to_debug_info_offset(&unit.header) {
                out.push((o.0, e.tag()));
            }
        }
        Ok(out)
    }

    fn signature(&mut self, off: usize) -> Result<CSignature, DwarfError> {
        let me = self.merged(off)?;
        // The concrete instance lists the parameters it has; an out-of-line copy of an
        // inline function may list none, and its abstract origin has them all.
        let mut kids = self.children(off)?;
        let has_params = |k: &[(usize, gimli::DwTag)]| {
            k.iter().any(|(_, t)| {
                *t == constants::DW_TAG_formal_parameter
                    || *t == constants::DW_TAG_unspecified_parameters
            })
        };
        if !has_params(&kids) {
            let origin = self.attrs(off)?.origin;
            if let Some(o) = origin {
                kids = self.children(o)?;
            }
        }
        let mut params = Vec::new();
        let mut variadic = false;
        for (koff, tag) in kids {
            if tag == constants::DW_TAG_unspecified_parameters {
                variadic = true;
                continue;
            }
            if tag != constants::DW_TAG_formal_parameter {
                continue;
            }
            let a = self.merged(koff)?;
            let name = a
                .name
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| format!("p{}", params.len()));
            let ty = match a.ty {
                Some(t) => self.ctype(t, 0)?,
                None => return Err(DwarfError::ParamWithoutType { param: name }),
            };
            params.push(CParam { name, ty });
        }
        let ret = match me.ty {
            Some(t) => self.ctype(t, 0)?,
            None => CType::Void,
        };
        Ok(CSignature {
            name: me.name,
            ret: Some(ret),
            params,
            variadic,
        })
    }

    /// The C type at .debug_info offset `off`.
    fn ctype(&mut self, off: usize, depth: usize) -> Result<CType, DwarfError> {
        if let Some(t) = self.types.get(&off) {
            return Ok(t.clone());
        }
        if depth > MAX_TYPE_DEPTH {
            return Ok(CType::Typedef {
                name: "(too deep)".into(),
                ty: None,
            });
        }
        let a = self.attrs(off)?;
        let inner = |ctx: &mut Self, or: CType| -> Result<CType, DwarfError> {
            match a.ty {
                Some(t) => ctx.ctype(t, depth + 1),
                None => Ok(or),
            }
        };
        let name = a.name.clone().unwrap_or_default();
        let size = a.size.unwrap_or(0);
        let t = match a.tag {
            constants::DW_TAG_base_type => base_type(&name, a.encoding, size),
            constants::DW_TAG_pointer_type
            | constants::DW_TAG_reference_type
            | constants::DW_TAG_rvalue_reference_type
            | constants::DW_TAG_ptr_to_member_type => {
                CType::Pointer(Box::new(inner(self, CType::Void)?))
            }
            constants::DW_TAG_const_type | constants::DW_TAG_volatile_type => CType::Qualified {
                quals: if a.tag == constants::DW_TAG_const_type {
                    "const".into()
                } else {
                    "volatile".into()
                },
                ty: Box::new(inner(self, CType::Void)?),
            },
            constants::DW_TAG_restrict_type | constants::DW_TAG_atomic_type => {
                inner(self, CType::Void)?
            }
            constants::DW_TAG_typedef => CType::Typedef {
                name,
                ty: match a.ty {
                    Some(t) => Some(Box::new(self.ctype(t, depth + 1)?)),
                    None => None,
                },
            },
            constants::DW_TAG_structure_type | constants::DW_TAG_class_type => {
                tagged(TagKind::Struct, name, a.size)
            }
            constants::DW_TAG_union_type => tagged(TagKind::Union, name, a.size),
            constants::DW_TAG_enumeration_type => tagged(TagKind::Enum, name, a.size),
            constants::DW_TAG_subroutine_type => CType::Function,
            constants::DW_TAG_array_type => {
                let elem = inner(self, CType::Void)?;
                let len = self.array_len(off)?;
                CType::Array {
                    ty: Box::new(elem),
                    len,
                }
            }
            // nullptr_t and the like: a name without a size.
            _ => CType::Typedef {
                name: if name.is_empty() {
                    format!("({})", a.tag)
                } else {
                    name
                },
                ty: None,
            },
        };
        self.types.insert(off, t.clone());
        Ok(t)
    }

    /// The length of the array type at `off`, from its first subrange.
    fn array_len(&mut self, off: usize) -> Result<Option<u64>, DwarfError> {
        for (k, tag) in self.children(off)? {
            if tag == constants::DW_TAG_subrange_type {
                let a = self.attrs(k)?;
                return Ok(a.count.or(a.upper.map(|u| u + 1)));
            }
        }
        Ok(None)
    }
}

struct Attrs {
    tag: gimli::DwTag,
    name: Option<String>,
    ty: Option<usize>,
    origin: Option<usize>,
    size: Option<u64>,
    encoding: Option<gimli::DwAte>,
    count: Option<u64>,
    upper: Option<u64>,
}

fn tagged(kind: TagKind, name: String, size: Option<u64>) -> CType {
    CType::Tagged {
        kind,
        name: if name.is_empty() {
            "(anonymous)".into()
        } else {
            name
        },
        size,
    }
}

/// A DW_TAG_base_type by its encoding.
fn base_type(name: &str, enc: Option<gimli::DwAte>, size: u64) -> CType {
    let size8 = size.min(255) as u8;
    match enc {
        Some(constants::DW_ATE_boolean) => CType::Bool,
        Some(constants::DW_ATE_signed_char | constants::DW_ATE_unsigned_char) if name == "char" => {
            CType::Char
        }
        Some(constants::DW_ATE_signed | constants::DW_ATE_signed_char) => {
            CType::int(name, size8, true)
        }
        Some(
            constants::DW_ATE_unsigned | constants::DW_ATE_unsigned_char | constants::DW_ATE_UTF,
        ) => CType::int(name, size8, false),
        Some(constants::DW_ATE_float) => CType::Float {
            name: name.into(),
            size: size8,
        },
        // Complex and decimal floats, fixed point: values a probe cannot read.
        _ => CType::Tagged {
            kind: TagKind::Struct,
            name: name.into(),
            size: Some(size),
        },
    }
}
