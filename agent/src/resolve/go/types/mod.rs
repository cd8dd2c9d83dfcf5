//! Go types as a binary describes them, for field paths and named types in signatures:
//! from DWARF where the binary has it, else from Go's runtime type descriptors (which a
//! stripped binary keeps for the types it uses through interfaces or reflection).
//!
//! One model for both sources ([`TypeInfo`]: name, size, kind with element and field
//! types as [`TypeRef`]s), read one type at a time on demand: a path touches a few types
//! of the thousands a binary has. [`TypeStore`] resolves names as a user writes them
//! (`http.Request`, `net/http.Request`, `order` in package main) and signature types.

// `Binary` (resolve/binary.rs) holds both indexes: it names them here, not through this
// file, which re-exports `listing.rs` (that takes a `&Binary`).
pub(in crate::resolve) mod dwarf;
pub(crate) mod error;
mod errtable;
pub mod generic;
pub(in crate::resolve) mod index;
mod listing;
pub(crate) mod model;
mod names;
pub(crate) mod path;
mod rtype;
pub(crate) mod shape;
mod store;

pub use error::{DescriptorError, PathError, TypeError, TypeSource};
// Older paths, kept for callers: the tables the decoder takes live in `crate::plan`.
pub use crate::plan::errtable::{ErrFormat, ErrTable, ErrType};
pub use crate::plan::typenames::{TypeNames, ERROR_TYPES_WITH_MESSAGE};
pub(crate) use store::TypeStore;

pub use listing::{StructLayout, TypeListing};
pub use model::{Field, Kind, TypeInfo, TypeRef};
