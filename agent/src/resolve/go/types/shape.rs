//! The register ABI's view of a type ([`GoType`]: its shape, size and alignment), derived
//! from the one type model ([`TypeInfo`]) wherever the type came from: a signature, DWARF
//! or a runtime type descriptor. The signature checker and the capture planner thus lay
//! out the same types the same way.

use std::sync::Arc;

use super::model::{Kind, TypeInfo, TypeRef};
use crate::resolve::go::gotype::GoType;

/// By-value nesting (struct fields, array elements) deeper than this is refused: only a
/// malformed description nests so deep.
pub(crate) const MAX_DEPTH: usize = 48;

/// The shape of the type `r`, reading types through `get`; `too_deep` makes the error for
/// a type nested deeper than [`MAX_DEPTH`]. Pointers, maps, channels and functions are a
/// word; struct fields and array elements are laid out in place.
pub(crate) fn shape_of<E>(
    r: TypeRef,
    get: &mut impl FnMut(TypeRef) -> Result<Arc<TypeInfo>, E>,
    too_deep: &impl Fn(&TypeInfo) -> E,
) -> Result<GoType, E> {
    shape_at(r, 0, get, too_deep)
}

fn shape_at<E>(
    r: TypeRef,
    depth: usize,
    get: &mut impl FnMut(TypeRef) -> Result<Arc<TypeInfo>, E>,
    too_deep: &impl Fn(&TypeInfo) -> E,
) -> Result<GoType, E> {
    let t = get(r)?;
    if depth > MAX_DEPTH {
        return Err(too_deep(&t));
    }
    Ok(match &t.kind {
        Kind::Bool => GoType::Bool,
        Kind::Int { size, signed } => GoType::Int {
            size: *size,
            signed: *signed,
        },
        Kind::Uintptr => GoType::Uintptr,
        Kind::Float { size } => GoType::Float { size: *size },
        Kind::Complex { size } => GoType::Complex { size: *size },
        Kind::String => GoType::String,
        Kind::UnsafePointer | Kind::Pointer(_) | Kind::Map { .. } | Kind::Chan | Kind::Func => {
            GoType::Pointer
        }
        // Only the element's kind: following it further could recurse forever
        // (type T struct{ kids []T }).
        Kind::Slice(elem) => GoType::Slice {
            bytes: matches!(
                get(*elem)?.kind,
                Kind::Int {
                    size: 1,
                    signed: false
                }
            ),
        },
        Kind::Interface { .. } => GoType::Interface,
        Kind::Array { elem, len } => {
            let e = shape_at(*elem, depth + 1, get, too_deep)?;
            let align = e.align();
            GoType::Array {
                len: *len,
                elem: Box::new(e),
                size: t.size,
                align,
            }
        }
        Kind::Struct(fields) => {
            let mut out = Vec::with_capacity(fields.len());
            for f in fields {
                out.push((f.name.clone(), shape_at(f.ty, depth + 1, get, too_deep)?));
            }
            let align = out.iter().map(|(_, t)| t.align()).max().unwrap_or(1);
            GoType::Struct {
                fields: out,
                size: t.size,
                align,
            }
        }
    })
}
