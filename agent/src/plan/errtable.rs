//! The error types of a binary whose `Error()` text the decoder builds from their fields:
//! the table the resolver reads from the binary's runtime type descriptors
//! (`resolve/go/types/errtable.rs`, which says how), as plans carry it to BPF (the
//! `errtypes` map) and to the decoder (`events/errtext.rs`).

use crate::abi::{GpErrKey, GpErrType};

/// How an error type's `Error()` (or an address's `String()`) is built from its fields,
/// named in the order of the fields the table lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrFormat {
    /// The first field is the text (`*errors.errorString`, `*fmt.wrapError(s)`).
    Message,
    /// `*fs.PathError`: `Op + " " + Path + ": " + Err.Error()`.
    Path,
    /// `*os.SyscallError`: `Syscall + ": " + Err.Error()`.
    Syscall,
    /// `*net.OpError`: `Op [" " Net] [" " Source] [("->" | " ") Addr] ": " Err.Error()`.
    Op,
    /// `*url.Error`: `fmt.Sprintf("%s %q: %s", Op, URL, Err)`.
    Url,
    /// `*net.DNSError`: `"lookup " + Name [" on " + Server] + ": " + Err`.
    Dns,
    /// `syscall.Errno`: the text of Go's table for Linux, or `errno N`.
    Errno,
    /// `*net.TCPAddr`, `*net.UDPAddr`: `JoinHostPort(IP[%Zone], Port)`.
    HostPort,
    /// `*net.IPAddr`: `IP[%Zone]`.
    Ip,
    /// `*net.UnixAddr`: `Name`.
    Unix,
    /// A type whose text is a constant.
    Constant(&'static str),
}

/// One dynamic type of a binary's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrType {
    /// Its name as `%T` prints it and [`super::TypeNames`] holds it (`*net.OpError`).
    pub name: String,
    /// `runtime._type.hash` of its descriptor.
    pub hash: u32,
    /// (`EF_*` kind, offset) of each field BPF reads, in the order the format names them.
    pub fields: Vec<(u8, u8)>,
    pub format: ErrFormat,
}

/// The error types of one binary that gprobe can show as their text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrTable {
    /// Names the table in the `errtypes` map: a hash of its layouts (0: empty table).
    pub id: u32,
    pub types: Vec<ErrType>,
    /// The text of `syscall.Errno(116)` (ESTALE), which Go 1.26 changed; `None` for a
    /// release whose text is not known for sure.
    pub estale: Option<&'static str>,
}

impl ErrTable {
    /// The type of the table named `name` (a `%T` name).
    pub fn by_name(&self, name: &str) -> Option<&ErrType> {
        self.types.iter().find(|t| t.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The `errtypes` map's entries of this table.
    pub fn bpf_entries(&self) -> Vec<(GpErrKey, GpErrType)> {
        self.types
            .iter()
            .map(|t| {
                let mut v = GpErrType {
                    n: t.fields.len() as u8,
                    ..Default::default()
                };
                for (i, &(k, o)) in t.fields.iter().enumerate() {
                    v.kind[i] = k;
                    v.off[i] = o;
                }
                (
                    GpErrKey {
                        table: self.id,
                        hash: t.hash,
                    },
                    v,
                )
            })
            .collect()
    }
}
