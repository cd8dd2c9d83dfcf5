//! Go's runtime type descriptors (`runtime._type` up to Go 1.20, `internal/abi.Type` since
//! 1.21), as the linker writes them into the binary, read without DWARF.
//!
//! amd64 layout of the header, the same from Go 1.18 to 1.27 (internal/abi/type.go):
//! `Size_` 0, `PtrBytes` 8, `Hash` 16 (u32), `TFlag` 20, `Align_` 21, `FieldAlign_` 22,
//! `Kind_` 23 (the kind in its low 5 bits; Go < 1.27 keeps flags above), `Equal` 24,
//! `GCData` 32, `Str` 40 (a nameOff), `PtrToThis` 44 (a typeOff); 48 bytes. The kind's
//! extension follows: `PtrType`/`SliceType` Elem at 48; `ArrayType` Elem 48, Slice 56, Len
//! 64; `ChanType` Elem 48, Dir 56; `MapType` Key 48, Elem 56; `StructType` PkgPath 48 (a
//! Name), Fields 56 ([]StructField{Name 0, Typ 8, Offset 16}: 24 bytes each);
//! `InterfaceType` PkgPath 48, Methods 56. Then, for a type with TFlagUncommon, the
//! `UncommonType` (PkgPath nameOff at 0): right after the kind's struct (whose size is in
//! [`ext_size`]).
//!
//! Names (`Name`) are a flags byte (1 exported, 2 a tag follows, 4 a pkgPath nameOff
//! follows, 8 embedded field), a varint length and the bytes (Go 1.17+). Go 1.18 packs a
//! struct field's embedded bit into `offsetEmbed` (offset << 1 | embedded) instead. nameOff
//! and typeOff count from the module's `types`; pointers (Elem, Typ, ...) are absolute
//! addresses, filled by R_X86_64_RELATIVE relocations in position-independent builds.

use super::error::DescriptorError;
use super::model::{Field, Kind, TypeInfo, TypeRef};
use crate::resolve::elf::{u32_at, u64_at, ElfFile};
use crate::resolve::go::moduledata::TypeSection;

pub(super) use crate::resolve::go::gotype::kind;

const TFLAG_UNCOMMON: u8 = 1;
const TFLAG_EXTRA_STAR: u8 = 2;
const TFLAG_NAMED: u8 = 4;

/// Bytes of the common header.
const HEADER: u64 = 48;
/// Bytes of one StructField.
const FIELD: u64 = 24;
/// Bytes of the UncommonType and of one Method (4 int32s).
const UNCOMMON: u64 = 16;
const METHOD: u64 = 16;

/// Sizes of the map type's struct, which grew across releases: Go 1.18-1.23 (hmap
/// buckets), 1.24-1.26 (swiss tables), 1.27 (split key and element arrays). The right one
/// is the one whose uncommon type names the type's own package.
const MAP_EXT_SIZES: [u64; 3] = [88, 112, 136];

/// The size of a kind's struct (where its uncommon type starts); maps have several.
fn ext_size(k: u8) -> &'static [u64] {
    match k {
        kind::ARRAY => &[72],
        kind::CHAN => &[64],
        kind::FUNC | kind::PTR | kind::SLICE => &[56],
        kind::INTERFACE | kind::STRUCT => &[80],
        kind::MAP => &MAP_EXT_SIZES,
        _ => &[HEADER],
    }
}

/// The header fields gprobe uses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    pub size: u64,
    /// `Hash`: the type's hash, which every itab of it copies (errtable.rs).
    pub hash: u32,
    pub tflag: u8,
    pub align: u8,
    pub kind: u8,
    pub str_off: i32,
    pub ptr_to_this: i32,
}

/// A decoded `Name`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Name<'a> {
    pub text: &'a str,
    pub embedded: bool,
}

/// Reads the descriptors of one module. Cheap to create; borrows the binary.
pub(crate) struct DescReader<'a> {
    pub(super) elf: &'a ElfFile,
    pub(super) sec: TypeSection,
    /// R_X86_64_RELATIVE relocations (address, addend), sorted; empty unless the binary is
    /// position-independent.
    pub(super) relocs: &'a [(u64, u64)],
    /// Go 1.18: struct fields hold `offsetEmbed` (offset << 1 | embedded).
    pub(super) offset_embed: bool,
}

impl<'a> DescReader<'a> {
    /// The word at `addr` as the loaded program sees it.
    pub(super) fn word(&self, addr: u64) -> Option<u64> {
        if let Ok(i) = self.relocs.binary_search_by_key(&addr, |r| r.0) {
            return Some(self.relocs[i].1);
        }
        u64_at(self.elf.read_vaddr(addr, 8)?, 0)
    }

    fn byte(&self, addr: u64) -> Option<u8> {
        self.elf.read_vaddr(addr, 1).map(|b| b[0])
    }

    fn in_types(&self, addr: u64) -> bool {
        addr >= self.sec.types && addr < self.sec.etypes
    }

    pub(super) fn header(&self, addr: u64) -> Result<Header, DescriptorError> {
        if !self.in_types(addr) {
            return Err(DescriptorError::OutsideTypes {
                start: self.sec.types,
                end: self.sec.etypes,
            });
        }
        let b = self
            .elf
            .read_vaddr(addr, HEADER as usize)
            .ok_or(DescriptorError::PastEnd)?;
        let h = Header {
            size: u64_at(b, 0).unwrap_or(0),
            hash: u32_at(b, 16).unwrap_or(0),
            tflag: b[20],
            align: b[21],
            kind: b[23] & 0x1f,
            str_off: u32_at(b, 40).unwrap_or(0) as i32,
            ptr_to_this: u32_at(b, 44).unwrap_or(0) as i32,
        };
        if !(kind::BOOL..=kind::UNSAFE_POINTER).contains(&h.kind) {
            return Err(DescriptorError::NotAKind { kind: h.kind });
        }
        if !h.align.is_power_of_two() || h.align > 64 {
            return Err(DescriptorError::BadAlignment { align: h.align });
        }
        Ok(h)
    }

    /// The `Name` at `addr`.
    pub(super) fn name(&self, addr: u64) -> Result<Name<'a>, DescriptorError> {
        let flags = self.byte(addr).ok_or(DescriptorError::NameOutside)?;
        let (mut len, mut i) = (0u64, 0u64);
        loop {
            let b = self
                .byte(addr + 1 + i)
                .ok_or(DescriptorError::NameOutside)?;
            len |= ((b & 0x7f) as u64) << (7 * i);
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
            if i >= 4 {
                return Err(DescriptorError::NameLength);
            }
        }
        let bytes = self
            .elf
            .read_vaddr(addr + 1 + i, len as usize)
            .ok_or(DescriptorError::NamePastEnd)?;
        let text = std::str::from_utf8(bytes).map_err(|_| DescriptorError::NameNotUtf8)?;
        Ok(Name {
            text,
            embedded: flags & 8 != 0,
        })
    }

    /// The name a nameOff refers to.
    fn name_off(&self, off: i32) -> Result<Name<'a>, DescriptorError> {
        self.name(self.sec.types.wrapping_add_signed(off as i64))
    }

    /// Go's reflect string of the type at `addr` (`*os.PathError`, `main.order`,
    /// `map[string]int`): package names, not paths.
    pub(super) fn string(&self, addr: u64) -> Result<&'a str, DescriptorError> {
        let h = self.header(addr)?;
        self.string_of(&h)
    }

    fn string_of(&self, h: &Header) -> Result<&'a str, DescriptorError> {
        let s = self.name_off(h.str_off)?.text;
        Ok(if h.tflag & TFLAG_EXTRA_STAR != 0 {
            s.strip_prefix('*').unwrap_or(s)
        } else {
            s
        })
    }

    /// The import path of a named type, from its uncommon type; `None` for predeclared
    /// types (`int`, `error`) and when it cannot be read.
    pub(super) fn pkg_path(&self, addr: u64, h: &Header) -> Option<&'a str> {
        if h.tflag & TFLAG_UNCOMMON == 0 || h.tflag & TFLAG_NAMED == 0 {
            return None;
        }
        let short = self.string_of(h).ok()?;
        let short_pkg = short.split_once('.')?.0;
        let sizes = ext_size(h.kind);
        for &ext in sizes {
            let off = u32_at(self.elf.read_vaddr(addr + ext, 4)?, 0)? as i32;
            let Ok(path) = self.name_off(off) else {
                continue;
            };
            // A path's last element is its package's name, but for the few packages
            // named otherwise (gopkg.in/yaml.v3 is yaml): accept any path where the
            // offset is certain, check it where several are possible.
            let last = path.text.rsplit('/').next().unwrap_or(path.text);
            if sizes.len() == 1 || last == short_pkg || last.starts_with(short_pkg) {
                return (!path.text.is_empty()).then_some(path.text);
            }
        }
        None
    }

    /// The type at the typeOff `off` (0: none).
    pub(super) fn type_off(&self, off: i32) -> Option<u64> {
        (off != 0).then(|| self.sec.types.wrapping_add_signed(off as i64))
    }

    fn ptr(&self, addr: u64) -> Result<u64, DescriptorError> {
        match self.word(addr) {
            Some(0) | None => Err(DescriptorError::NoTypePointer { addr }),
            Some(p) => Ok(p),
        }
    }

    /// The type's name as DWARF spells it: import paths instead of package names
    /// (`*net/http.Request`), so that both sources can be compared and looked up alike.
    pub(super) fn full_name(&self, addr: u64, depth: usize) -> Result<String, DescriptorError> {
        let h = self.header(addr)?;
        let s = self.string_of(&h)?;
        if depth > 8 {
            return Ok(s.to_string());
        }
        if h.tflag & TFLAG_NAMED != 0 {
            // `http.Request` in package net/http: the package name, the path's last
            // element, becomes the path. Shapes (`go.shape.int64`) and names already
            // spelled with their path stay.
            return Ok(match self.pkg_path(addr, &h) {
                Some(p) if !s.starts_with(&format!("{p}.")) => {
                    let last = p.rsplit('/').next().unwrap_or(p);
                    match s.strip_prefix(last).and_then(|r| r.strip_prefix('.')) {
                        Some(rest) => format!("{p}.{rest}"),
                        None => match s.split_once('.') {
                            Some((_, rest)) => format!("{p}.{rest}"),
                            None => s.to_string(),
                        },
                    }
                }
                _ => s.to_string(),
            });
        }
        let elem =
            |a: u64| -> Result<String, DescriptorError> { self.full_name(self.ptr(a)?, depth + 1) };
        Ok(match h.kind {
            kind::PTR => format!("*{}", elem(addr + 48)?),
            kind::SLICE => format!("[]{}", elem(addr + 48)?),
            kind::ARRAY => format!(
                "[{}]{}",
                self.word(addr + 64).unwrap_or(0),
                elem(addr + 48)?
            ),
            kind::MAP => format!("map[{}]{}", elem(addr + 48)?, elem(addr + 56)?),
            // ChanType.Dir at 56: 1 receive, 2 send, 3 both.
            kind::CHAN => match self.word(addr + 56) {
                Some(1) => format!("<-chan {}", elem(addr + 48)?),
                Some(2) => format!("chan<- {}", elem(addr + 48)?),
                _ => format!("chan {}", elem(addr + 48)?),
            },
            _ => s.to_string(),
        })
    }

    /// The struct fields of the struct type at `addr`: (name, type address, offset,
    /// embedded).
    pub(super) fn fields(
        &self,
        addr: u64,
    ) -> Result<Vec<(Name<'a>, u64, u64, bool)>, DescriptorError> {
        let (data, len) = (self.word(addr + 56).unwrap_or(0), self.word(addr + 64));
        let len = len.ok_or(DescriptorError::FieldsOutside)?;
        if len > 1 << 16 {
            return Err(DescriptorError::TooManyFields { count: len });
        }
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            let f = data + i * FIELD;
            let name = self.name(self.ptr(f)?)?;
            let ty = self.ptr(f + 8)?;
            let raw = self.word(f + 16).ok_or(DescriptorError::FieldOutside)?;
            let (offset, embedded) = if self.offset_embed {
                (raw >> 1, raw & 1 != 0)
            } else {
                (raw, name.embedded)
            };
            out.push((name, ty, offset, embedded));
        }
        Ok(out)
    }

    /// The type at `addr` in gprobe's model.
    pub(super) fn info(&self, addr: u64) -> Result<TypeInfo, DescriptorError> {
        let h = self.header(addr)?;
        let elem = |off: u64| -> Result<TypeRef, DescriptorError> {
            Ok(TypeRef::Desc(self.ptr(addr + off)?))
        };
        let size = h.size;
        let k = match h.kind {
            kind::BOOL => Kind::Bool,
            kind::INT => Kind::Int {
                size: 8,
                signed: true,
            },
            k @ 3..=kind::INT64 => Kind::Int {
                size: 1 << (k - 3),
                signed: true,
            },
            kind::UINT => Kind::Int {
                size: 8,
                signed: false,
            },
            k @ kind::UINT8..=kind::UINT64 => Kind::Int {
                size: 1 << (k - kind::UINT8),
                signed: false,
            },
            kind::UINTPTR => Kind::Uintptr,
            kind::FLOAT32 => Kind::Float { size: 4 },
            kind::FLOAT64 => Kind::Float { size: 8 },
            kind::COMPLEX64 => Kind::Complex { size: 8 },
            kind::COMPLEX128 => Kind::Complex { size: 16 },
            kind::STRING => Kind::String,
            kind::UNSAFE_POINTER => Kind::UnsafePointer,
            kind::PTR => Kind::Pointer(elem(48)?),
            kind::SLICE => Kind::Slice(elem(48)?),
            kind::ARRAY => Kind::Array {
                elem: elem(48)?,
                len: self
                    .word(addr + 64)
                    .ok_or(DescriptorError::ArrayLengthOutside)?,
            },
            kind::CHAN => Kind::Chan,
            kind::FUNC => Kind::Func,
            kind::MAP => Kind::Map {
                key: elem(48)?,
                elem: elem(56)?,
            },
            kind::INTERFACE => Kind::Interface {
                empty: self.word(addr + 64) == Some(0),
            },
            kind::STRUCT => Kind::Struct(
                self.fields(addr)?
                    .into_iter()
                    .map(|(name, ty, offset, embedded)| Field {
                        name: name.text.to_string(),
                        ty: TypeRef::Desc(ty),
                        offset,
                        embedded,
                    })
                    .collect(),
            ),
            k => return Err(DescriptorError::UnknownKind { kind: k }),
        };
        Ok(TypeInfo {
            name: self.full_name(addr, 0)?,
            size,
            kind: k,
        })
    }

    /// The descriptors the one at `addr` refers to: element, key and field types, and
    /// the pointer to it.
    pub(super) fn children(&self, addr: u64, h: &Header, out: &mut Vec<u64>) {
        let mut push = |a: Option<u64>| {
            if let Some(a) = a.filter(|&a| a != 0) {
                out.push(a);
            }
        };
        match h.kind {
            kind::PTR | kind::SLICE | kind::ARRAY | kind::CHAN => push(self.word(addr + 48)),
            kind::MAP => {
                push(self.word(addr + 48));
                push(self.word(addr + 56));
            }
            kind::STRUCT => {
                if let Ok(fields) = self.fields(addr) {
                    for (_, ty, _, _) in fields {
                        push(Some(ty));
                    }
                }
            }
            _ => {}
        }
        push(self.type_off(h.ptr_to_this));
    }

    /// The bytes of the descriptor at `addr` (Go 1.27's `Type.DescriptorSize`): the kind's
    /// struct, the uncommon type, the kind's inline data (struct fields, function
    /// parameters, interface methods), and the methods.
    pub(super) fn descriptor_size(&self, addr: u64, h: &Header) -> Option<u64> {
        let ext = *ext_size(h.kind).last()?;
        let add = match h.kind {
            kind::STRUCT => self.word(addr + 64)? * FIELD,
            kind::INTERFACE => self.word(addr + 64)? * 8,
            kind::FUNC => {
                let b = self.elf.read_vaddr(addr + 48, 4)?;
                let (ins, outs) = (
                    u16::from_le_bytes([b[0], b[1]]),
                    u16::from_le_bytes([b[2], b[3]]) & 0x7fff,
                );
                (ins as u64 + outs as u64) * 8
            }
            _ => 0,
        };
        let methods = if h.tflag & TFLAG_UNCOMMON != 0 {
            let b = self.elf.read_vaddr(addr + ext + 4, 2)?;
            UNCOMMON + u16::from_le_bytes([b[0], b[1]]) as u64 * METHOD
        } else {
            0
        };
        Some(ext + add + methods)
    }

    /// The dynamic type of the itab at `addr` (its `Type` word, at 8 in every release).
    pub(super) fn itab_type(&self, addr: u64) -> Option<u64> {
        self.word(addr + 8).filter(|&t| self.in_types(t))
    }

    /// The bytes of the itab at `addr` (Go 1.27 `ITab.Size`).
    pub(super) fn itab_size(&self, addr: u64) -> Option<u64> {
        let inter = self.word(addr)?;
        let methods = self.word(inter + 64)?;
        let fun0 = self.word(addr + 24)?;
        Some(if fun0 == 0 || methods == 0 {
            32
        } else {
            32 + (methods - 1) * 8
        })
    }
}
