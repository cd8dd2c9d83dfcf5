//! What `gprobe types` lists (the named struct types of a binary), and the [`Binary`]'s
//! type indexes: DWARF's by name, the runtime type descriptors.

use super::dwarf::DwarfIndex;
use super::error::{TypeError, TypeSource};
use super::index::DescIndex;
use super::model::{Kind, TypeRef};
use super::store::TypeStore;
use crate::plan::errtable::ErrTable;
use crate::resolve::binary::Binary;
use crate::resolve::go::dwarf::Ctx;

/// A struct layout, for listings (`gprobe types`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructLayout {
    pub name: String,
    pub size: u64,
    /// (name, offset, type name, embedded)
    pub fields: Vec<(String, u64, String, bool)>,
}

/// What `gprobe types` lists: the named struct types a binary describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeListing {
    pub source: TypeSource,
    pub structs: Vec<StructLayout>,
    /// Descriptors of the binary (0 when the listing comes from DWARF).
    pub descriptors: usize,
}

impl Binary {
    /// The DWARF type index, built once; `None` without DWARF.
    pub(crate) fn dwarf_type_index(&self) -> Result<Option<&DwarfIndex>, TypeError> {
        if !self.is_go() || !self.has_dwarf() {
            return Ok(None);
        }
        let cache = self
            .dwarf_cache()
            .map_err(|e| TypeError::DwarfUnloadable(Box::new(e)))?;
        let idx = self
            .dwarf_types
            .get_or_init(|| DwarfIndex::build(&Ctx::new(cache, &self.elf)));
        match idx {
            Ok(i) => Ok(Some(i)),
            Err(reason) => Err(TypeError::BadDwarf {
                path: self.path().to_path_buf(),
                offset: 0,
                reason: reason.clone(),
            }),
        }
    }

    /// The link-time address of the type descriptor Go's reflect calls `name`
    /// (`*bufio.Writer`), if the binary has one.
    pub(crate) fn type_descriptor(&self, name: &str) -> Option<u64> {
        let idx = self.desc_index();
        idx.strings
            .iter()
            .find(|(_, n)| &***n == name)
            .map(|(a, _)| *a)
    }

    /// Every runtime type descriptor of the binary, found once.
    pub(crate) fn desc_index(&self) -> &DescIndex {
        self.descs.get_or_init(|| {
            let sec = self.go.module(&self.elf).and_then(|m| m.types);
            let go118 = self.go_version().is_some_and(|v| v.starts_with("go1.18"));
            DescIndex::build(&self.elf, sec, go118)
        })
    }

    /// The named struct types the binary describes: from DWARF where it has it, else from
    /// its runtime type descriptors.
    pub fn struct_layouts(&self) -> Result<TypeListing, TypeError> {
        let mut store = TypeStore::new(self, "main");
        let (source, refs): (TypeSource, Vec<TypeRef>) = match self.dwarf_type_index()? {
            Some(idx) => (
                TypeSource::Dwarf,
                idx.by_name.values().map(|&o| TypeRef::Dwarf(o)).collect(),
            ),
            None => {
                let idx = self.desc_index();
                if idx.sec.is_none() {
                    return Ok(TypeListing {
                        source: TypeSource::None,
                        structs: Vec::new(),
                        descriptors: 0,
                    });
                }
                (
                    TypeSource::Descriptors,
                    idx.by_name.values().map(|&a| TypeRef::Desc(a)).collect(),
                )
            }
        };
        let mut structs = Vec::new();
        for r in refs {
            // Types that cannot be read are left out of a listing (the probe that needs
            // one reports why).
            let Ok(t) = store.get(r) else { continue };
            let Kind::Struct(fields) = &t.kind else {
                continue;
            };
            let mut out = Vec::with_capacity(fields.len());
            for f in fields {
                let ty = store
                    .get(f.ty)
                    .map(|t| t.name.clone())
                    .unwrap_or_else(|_| "?".into());
                out.push((f.name.clone(), f.offset, ty, f.embedded));
            }
            structs.push(StructLayout {
                name: t.name.clone(),
                size: t.size,
                fields: out,
            });
        }
        structs.sort_by(|a, b| a.name.cmp(&b.name));
        structs.dedup_by(|a, b| a.name == b.name);
        Ok(TypeListing {
            source,
            structs,
            descriptors: if source == TypeSource::Descriptors {
                self.desc_index().len()
            } else {
                0
            },
        })
    }

    /// The standard library's error types whose text error captures build, with their
    /// layouts in this binary (errtable.rs).
    #[doc(hidden)]
    pub fn error_table(&self) -> ErrTable {
        self.desc_index()
            .error_table(&self.elf, self.go_version())
            .clone()
    }

    /// The names of the named types the runtime type descriptors describe, sorted.
    #[doc(hidden)]
    pub fn descriptor_type_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.desc_index().by_name.keys().cloned().collect();
        v.sort();
        v
    }

    /// The struct layout of the named type `name` from the runtime type descriptors
    /// alone, and from DWARF alone (either `None` where that source lacks it): both must
    /// agree, which tests check.
    #[doc(hidden)]
    pub fn struct_layout_from_both(
        &self,
        name: &str,
    ) -> Result<(Option<StructLayout>, Option<StructLayout>), TypeError> {
        let mut store = TypeStore::new(self, "main");
        let desc = self
            .desc_index()
            .by_name
            .get(name)
            .map(|&a| TypeRef::Desc(a));
        let dwarf = self
            .dwarf_type_index()?
            .and_then(|i| i.by_name.get(name))
            .map(|&o| TypeRef::Dwarf(o));
        let mut layout = |r: Option<TypeRef>| -> Result<Option<StructLayout>, TypeError> {
            let Some(r) = r else { return Ok(None) };
            let t = store.get(r)?;
            let Kind::Struct(fields) = &t.kind else {
                return Ok(None);
            };
            let mut out = Vec::new();
            for f in fields {
                out.push((
                    f.name.clone(),
                    f.offset,
                    store.get(f.ty)?.name.clone(),
                    f.embedded,
                ));
            }
            Ok(Some(StructLayout {
                name: t.name.clone(),
                size: t.size,
                fields: out,
            }))
        };
        Ok((layout(desc)?, layout(dwarf)?))
    }
}
