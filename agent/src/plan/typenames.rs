//! The names of dynamic types, for the decoder: a captured interface or error holds the
//! address of its dynamic type's descriptor (the BPF side follows an itab to it), and the
//! record shows that type's name as Go prints it with `%T` (`*os.PathError`,
//! `main.order`, `*errors.errorString`).
//!
//! ## Addresses and the load bias
//! The names are kept by **link-time** address (the ELF's virtual addresses). A process
//! running a position-dependent executable (`ET_EXEC`, Go's default on linux/amd64) sees
//! exactly those. A position-independent one (`-buildmode=pie`, `ET_DYN`) is loaded at a
//! bias: a runtime address is `link address + bias`. The decoder computes the bias once
//! per process from a line of `/proc/PID/maps` that maps the binary, `start-end perms
//! offset ...`, with [`TypeNames::load_bias`]`(start, offset)` (the PT_LOAD segment holding
//! that file offset says which link address `start` is), and looks names up with
//! [`TypeNames::name_at`]`(runtime_address, bias)`. For ET_EXEC the bias is 0.

use std::collections::HashMap;
use std::sync::Arc;

use super::errtable::ErrTable;

/// The dynamic types whose value's first field is the error message (a `string`): the
/// decoder shows that string for an `error` whose dynamic type is one of these (the BPF
/// side reads the string header at the data pointer whenever asked), and the type's
/// name for any other. `errors.New` makes `*errors.errorString`, `fmt.Errorf` with one
/// `%w` `*fmt.wrapError`, with several `*fmt.wrapErrors`, without `%w`
/// `*errors.errorString`.
pub const ERROR_TYPES_WITH_MESSAGE: [&str; 3] =
    ["*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors"];

/// Type descriptor (and itab) addresses of one binary to type names. Built once per
/// binary from every descriptor the binary holds (`resolve/go/types/index.rs`); cheap to
/// share.
#[derive(Debug, Clone)]
pub struct TypeNames {
    /// Link-time address of a type descriptor or an itab -> `%T` name.
    names: Arc<HashMap<u64, Box<str>>>,
    /// (vaddr, file offset, file size) of each PT_LOAD segment, for the bias.
    loads: Vec<(u64, u64, u64)>,
    /// The error types whose text the decoder builds from their fields.
    errors: Arc<ErrTable>,
}

impl TypeNames {
    /// A table of `names` (link-time address -> name), `loads` ((vaddr, file offset, file
    /// size) of each PT_LOAD segment) and `errors`: what the resolver reads of a binary.
    pub fn new(
        names: HashMap<u64, Box<str>>,
        loads: Vec<(u64, u64, u64)>,
        errors: ErrTable,
    ) -> TypeNames {
        TypeNames {
            names: Arc::new(names),
            loads,
            errors: Arc::new(errors),
        }
    }

    /// Names and an error table given directly, for tests of the decoder.
    #[doc(hidden)]
    pub fn from_parts(names: &[(u64, &str)], errors: ErrTable) -> TypeNames {
        TypeNames {
            names: Arc::new(names.iter().map(|&(a, n)| (a, Box::from(n))).collect()),
            loads: Vec::new(),
            errors: Arc::new(errors),
        }
    }

    /// The name of the type whose descriptor (or itab) is at the link-time address `addr`.
    pub fn name(&self, addr: u64) -> Option<&str> {
        self.names.get(&addr).map(|s| &**s)
    }

    /// The name of the type at the address `addr` of a process that loaded the binary
    /// at `bias` (from [`TypeNames::load_bias`]; 0 for ET_EXEC binaries).
    pub fn name_at(&self, addr: u64, bias: u64) -> Option<&str> {
        self.name(addr.wrapping_sub(bias))
    }

    /// The load bias of a process from one of its mappings of this binary: the mapping's
    /// start address and file offset (the first and third columns of /proc/PID/maps).
    /// `None` when no PT_LOAD segment covers that offset.
    pub fn load_bias(&self, map_start: u64, map_offset: u64) -> Option<u64> {
        let &(vaddr, offset, _) = self.loads.iter().find(|&&(_, off, size)| {
            map_offset >= off & !0xfff && map_offset < off + size.max(1)
        })?;
        // The link address that file offset `map_offset` has.
        let link = vaddr.wrapping_add(map_offset).wrapping_sub(offset);
        Some(map_start.wrapping_sub(link))
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The binary's error types whose text is built from their fields (errtable.rs).
    pub fn errors(&self) -> &ErrTable {
        &self.errors
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Tables of one binary are equal: plans compare equal when made from the same file.
impl PartialEq for TypeNames {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.names, &other.names) || self.names == other.names
    }
}

impl Eq for TypeNames {}
