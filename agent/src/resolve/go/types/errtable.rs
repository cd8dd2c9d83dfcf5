//! The error types of Go's standard library whose `Error()` text gprobe builds from their
//! fields: the errors network and file calls return (`*net.OpError`, `*os.SyscallError`,
//! `*url.Error`, `*fs.PathError`, `*net.DNSError`, `syscall.Errno`), the addresses an
//! `*net.OpError` holds, the errors whose first field is their whole message
//! (`errors.New`, `fmt.Errorf`), and a few whose text is a constant.
//!
//! An error capture (`CAP_ERROR`) reads, in BPF, the error's dynamic type and, where the
//! binary's table has a layout for that type, the fields the text is made of; an interface
//! field (the wrapped error, an address) is read the same way, breadth first, a few levels
//! deep. BPF knows a type by its hash (`runtime._type.hash`, which every itab copies at
//! +16): unlike its address, the same in every process, position-independent or not. The
//! table lists only types whose hash no other descriptor of the binary has, and the decoder
//! checks each node's type by its name (through its address) before it reads its fields by
//! the layout: a type it cannot be sure of makes the value fall back to the type's name.
//!
//! Layouts come from the binary's own runtime type descriptors, field by field by name, so
//! a release that moves a field (Go 1.23 put `UnwrapErr` first in `net.DNSError`) is read
//! right; a type whose fields are not what the text needs is left out.

use super::error::DescriptorError;
use super::index::DescIndex;
use super::rtype::{kind, DescReader};
use crate::abi::{self, GP_ERR_FIELDS};
use crate::plan::errtable::{ErrFormat, ErrTable, ErrType};
use crate::resolve::elf::ElfFile;

/// What a field of a described type is to BPF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    /// A string, or a `[]byte` (an IP): its (ptr, len) and bytes.
    Str,
    /// A non-empty interface (an error, a `net.Addr`).
    Iface,
    /// An integer word (a port); the value itself for a type that is one (`Errno`).
    Word,
}

/// One type of the table as the standard library declares it.
struct Spec {
    /// The named type, as DWARF spells it (`net.OpError`).
    name: &'static str,
    /// Errors of the type are `*T` (its methods have pointer receivers).
    pointer: bool,
    /// The fields the text needs, in the order [`ErrFormat`] names them; `""` is the value
    /// itself (a type whose value is one word).
    fields: &'static [(&'static str, FieldKind)],
    format: ErrFormat,
}

use FieldKind::{Iface, Str, Word};

const SPECS: &[Spec] = &[
    Spec {
        name: "errors.errorString",
        pointer: true,
        fields: &[("s", Str)],
        format: ErrFormat::Message,
    },
    Spec {
        name: "fmt.wrapError",
        pointer: true,
        fields: &[("msg", Str)],
        format: ErrFormat::Message,
    },
    Spec {
        name: "fmt.wrapErrors",
        pointer: true,
        fields: &[("msg", Str)],
        format: ErrFormat::Message,
    },
    Spec {
        name: "io/fs.PathError",
        pointer: true,
        fields: &[("Op", Str), ("Path", Str), ("Err", Iface)],
        format: ErrFormat::Path,
    },
    Spec {
        name: "os.SyscallError",
        pointer: true,
        fields: &[("Syscall", Str), ("Err", Iface)],
        format: ErrFormat::Syscall,
    },
    Spec {
        name: "net.OpError",
        pointer: true,
        fields: &[
            ("Op", Str),
            ("Net", Str),
            ("Source", Iface),
            ("Addr", Iface),
            ("Err", Iface),
        ],
        format: ErrFormat::Op,
    },
    Spec {
        name: "net/url.Error",
        pointer: true,
        fields: &[("Op", Str), ("URL", Str), ("Err", Iface)],
        format: ErrFormat::Url,
    },
    Spec {
        name: "net.DNSError",
        pointer: true,
        fields: &[("Err", Str), ("Name", Str), ("Server", Str)],
        format: ErrFormat::Dns,
    },
    Spec {
        name: "syscall.Errno",
        pointer: false,
        fields: &[("", Word)],
        format: ErrFormat::Errno,
    },
    Spec {
        name: "net.TCPAddr",
        pointer: true,
        fields: &[("IP", Str), ("Port", Word), ("Zone", Str)],
        format: ErrFormat::HostPort,
    },
    Spec {
        name: "net.UDPAddr",
        pointer: true,
        fields: &[("IP", Str), ("Port", Word), ("Zone", Str)],
        format: ErrFormat::HostPort,
    },
    Spec {
        name: "net.IPAddr",
        pointer: true,
        fields: &[("IP", Str), ("Zone", Str)],
        format: ErrFormat::Ip,
    },
    Spec {
        name: "net.UnixAddr",
        pointer: true,
        fields: &[("Name", Str)],
        format: ErrFormat::Unix,
    },
    Spec {
        name: "internal/poll.DeadlineExceededError",
        pointer: true,
        fields: &[],
        format: ErrFormat::Constant("i/o timeout"),
    },
    Spec {
        name: "internal/poll.errNetClosing",
        pointer: false,
        fields: &[],
        format: ErrFormat::Constant("use of closed network connection"),
    },
    Spec {
        name: "context.deadlineExceededError",
        pointer: false,
        fields: &[],
        format: ErrFormat::Constant("context deadline exceeded"),
    },
];

/// The ESTALE text of the Go release `version`: "stale NFS file handle" up to Go 1.24,
/// "stale file handle" from Go 1.26 (checked in the sources of 1.19, 1.21, 1.24, 1.26 and
/// 1.27); Go 1.25's is not known.
fn estale(version: Option<&str>) -> Option<&'static str> {
    let minor: u32 = version?
        .strip_prefix("go1.")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    match minor {
        0..=24 => Some("stale NFS file handle"),
        25 => None,
        _ => Some("stale file handle"),
    }
}

impl DescIndex {
    /// The error table of the binary whose descriptors these are, built once.
    pub(crate) fn error_table(&self, elf: &ElfFile, go_version: Option<&str>) -> &ErrTable {
        self.errors.get_or_init(|| match self.reader(elf) {
            Some(r) => build(self, &r, estale(go_version)),
            None => ErrTable::default(),
        })
    }
}

fn build(idx: &DescIndex, r: &DescReader<'_>, estale: Option<&'static str>) -> ErrTable {
    let mut types = Vec::new();
    for spec in SPECS {
        match layout(idx, r, spec) {
            Ok(t) => types.push(t),
            Err(why) => tracing::debug!("error text of {}: {why}", spec.name),
        }
    }
    // BPF tells types apart by hash alone: a hash that another descriptor of the binary
    // has too would be ambiguous.
    types.retain(|t| idx.hash_counts.get(&t.hash).copied().unwrap_or(0) == 1);
    types.sort_by_key(|t| t.hash);
    let id = if types.is_empty() {
        0
    } else {
        table_id(&types)
    };
    ErrTable { id, types, estale }
}

/// FNV-1a over the layouts: equal tables (binaries of one Go release) share their entries.
fn table_id(types: &[ErrType]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |b: u8| {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    };
    for t in types {
        t.hash.to_le_bytes().into_iter().for_each(&mut eat);
        eat(t.fields.len() as u8);
        for &(k, o) in &t.fields {
            eat(k);
            eat(o);
        }
    }
    h.max(1)
}

/// Why an error type of [`SPECS`] has no entry in a binary's table (logged, not reported:
/// its values fall back to the type's name).
#[derive(Debug, thiserror::Error)]
enum LayoutError {
    #[error("no runtime type descriptor")]
    NoDescriptor,
    #[error("no descriptor of its pointer type")]
    NoPointerDescriptor,
    #[error("its name cannot be read")]
    NameUnreadable,
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
    #[error("no field {field}")]
    NoField { field: &'static str },
    #[error("field {field:?} is not the kind its text needs")]
    WrongKind { field: &'static str },
    #[error("field {field} is at offset {offset}")]
    FieldOffset { field: &'static str, offset: u64 },
    #[error("too many fields")]
    TooManyFields,
    #[error("a constant text's type has fields")]
    ConstantWithFields,
}

/// The table entry of `spec` in this binary: its dynamic type's descriptor, and the kind
/// and offset of each field it needs.
fn layout(idx: &DescIndex, r: &DescReader<'_>, spec: &Spec) -> Result<ErrType, LayoutError> {
    let named = *idx
        .by_name
        .get(spec.name)
        .ok_or(LayoutError::NoDescriptor)?;
    let dynamic = if spec.pointer {
        *idx.ptr_to
            .get(&named)
            .ok_or(LayoutError::NoPointerDescriptor)?
    } else {
        named
    };
    let name = idx
        .strings
        .get(&dynamic)
        .ok_or(LayoutError::NameUnreadable)?
        .to_string();
    let h = r.header(dynamic)?;
    let nh = r.header(named)?;
    let mut fields = Vec::with_capacity(spec.fields.len());
    let fields_of = if nh.kind == kind::STRUCT {
        r.fields(named)?
    } else {
        Vec::new()
    };
    for &(fname, want) in spec.fields {
        let (ty, off) = if fname.is_empty() {
            (named, 0)
        } else {
            let (_, ty, off, _) = fields_of
                .iter()
                .find(|(n, ..)| n.text == fname)
                .ok_or(LayoutError::NoField { field: fname })?;
            (*ty, *off)
        };
        let fh = r.header(ty)?;
        let ok = match want {
            Str => {
                fh.kind == kind::STRING
                    || (fh.kind == kind::SLICE
                        && r.word(ty + 48)
                            .and_then(|e| r.header(e).ok())
                            .is_some_and(|e| e.kind == kind::UINT8))
            }
            // A non-empty interface: its first word is an itab.
            Iface => fh.kind == kind::INTERFACE && r.word(ty + 64) != Some(0),
            Word => {
                matches!(
                    fh.kind,
                    kind::INT | kind::UINTPTR | kind::UINT | kind::INT64
                ) && fh.size == 8
            }
        };
        if !ok {
            return Err(LayoutError::WrongKind { field: fname });
        }
        let off = u8::try_from(off).map_err(|_| LayoutError::FieldOffset {
            field: fname,
            offset: off,
        })?;
        let k = match want {
            Str => abi::EF_STR,
            Iface => abi::EF_IFACE,
            Word => abi::EF_WORD,
        };
        fields.push((k, off));
    }
    if fields.len() > GP_ERR_FIELDS {
        return Err(LayoutError::TooManyFields);
    }
    if spec.fields.is_empty() && nh.size != 0 {
        return Err(LayoutError::ConstantWithFields);
    }
    Ok(ErrType {
        name,
        hash: h.hash,
        fields,
        format: spec.format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estale_follows_the_release() {
        assert_eq!(estale(Some("go1.19.8")), Some("stale NFS file handle"));
        assert_eq!(estale(Some("go1.24.11")), Some("stale NFS file handle"));
        assert_eq!(estale(Some("go1.25.3")), None);
        assert_eq!(estale(Some("go1.27.3")), Some("stale file handle"));
        assert_eq!(estale(None), None);
    }

    #[test]
    fn table_ids_depend_on_the_layouts() {
        let t = |off| ErrType {
            name: "*net.OpError".into(),
            hash: 7,
            fields: vec![(abi::EF_STR, off)],
            format: ErrFormat::Op,
        };
        assert_eq!(table_id(&[t(0)]), table_id(&[t(0)]));
        assert_ne!(table_id(&[t(0)]), table_id(&[t(16)]));
        assert_ne!(table_id(&[t(0)]), 0);
    }
}
