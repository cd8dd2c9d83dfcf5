//! Go types as a binary describes them, for field paths and named types in signatures:
//! from DWARF where the binary has it, else from Go's runtime type descriptors (which a
//! stripped binary keeps for the types it uses through interfaces or reflection).
//!
//! One model for both sources ([`TypeInfo`]: name, size, kind with element and field
//! types as [`TypeRef`]s), read one type at a time on demand: a path touches a few types
//! of the thousands a binary has. [`TypeStore`] resolves names as a user writes them
//! (`http.Request`, `net/http.Request`, `order` in package main) and signature types.

mod dwarf;
pub(crate) mod error;
mod errtable;
pub mod generic;
mod index;
mod names;
pub(crate) mod path;
mod rtype;
pub(crate) mod shape;
mod store;

pub use error::{DescriptorError, PathError, TypeError, TypeSource};
pub use errtable::{ErrFormat, ErrTable, ErrType};
pub use names::{TypeNames, ERROR_TYPES_WITH_MESSAGE};
pub(crate) use store::TypeStore;

pub(crate) use dwarf::DwarfIndex;
pub(crate) use index::DescIndex;

use crate::resolve::go::dwarf::Ctx;
use crate::resolve::Binary;

/// Where a type is described.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeRef {
    /// A DIE, by its .debug_info offset.
    Dwarf(usize),
    /// A runtime type descriptor, by its link-time address.
    Desc(u64),
    /// A type made from a probe's signature (`*T`, `[]int64`, predeclared types).
    Synth(u32),
}

/// A Go type: enough to lay out values and follow field paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    /// Go's name with import paths, as DWARF spells it: `main.order`, `*net/http.Request`,
    /// `[]string`, `error`.
    pub name: String,
    pub size: u64,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int {
        size: u8,
        signed: bool,
    },
    Uintptr,
    Float {
        size: u8,
    },
    Complex {
        size: u8,
    },
    String,
    UnsafePointer,
    Pointer(TypeRef),
    Slice(TypeRef),
    Array {
        elem: TypeRef,
        len: u64,
    },
    Map {
        key: TypeRef,
        elem: TypeRef,
    },
    Chan,
    Func,
    /// `empty`: `any`/`interface{}`, whose first word is a type descriptor; otherwise an
    /// itab.
    Interface {
        empty: bool,
    },
    Struct(Vec<Field>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: TypeRef,
    pub offset: u64,
    /// An embedded field (`Base` in `struct{ Base; ... }`): its fields are promoted.
    pub embedded: bool,
}

/// The package-name form of a type name: `http.Request` for `net/http.Request`, the name
/// itself when it has no import path. Brackets (type arguments) are left alone.
pub(crate) fn short_name(full: &str) -> &str {
    let head = &full[..full.find('[').unwrap_or(full.len())];
    match head.rfind('/') {
        Some(i) => &full[i + 1..],
        None => full,
    }
}

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
