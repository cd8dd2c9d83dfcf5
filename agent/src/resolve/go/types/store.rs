//! Reading types on demand, by reference or by the name a user writes, and laying them out
//! for the register ABI.

use std::collections::HashMap;
use std::sync::Arc;

use gprobe_crds::signature::TypeExpr;

use super::error::{DescriptorError, TypeError, TypeSource};
use super::generic;
use super::model::{short_name, Field, Kind, TypeInfo, TypeRef};
use super::shape::{shape_of, MAX_DEPTH};
use crate::resolve::binary::Binary;
use crate::resolve::dwarf_error::DwarfError;
use crate::resolve::go::dwarf::Ctx;
use crate::resolve::go::gotype::GoType;

/// A type made from a signature: laid out already, or still to resolve (a pointer's
/// element is looked up only when a path goes through it).
enum Synth {
    Info(Arc<TypeInfo>),
    Expr(TypeExpr),
}

/// The types of one binary as one planning pass reads them. Not `Send`: made per pass.
pub(crate) struct TypeStore<'a> {
    bin: &'a Binary,
    ctx: Option<Ctx<'a>>,
    cache: HashMap<TypeRef, Arc<TypeInfo>>,
    synth: Vec<Synth>,
    /// The package of the probed function: where unqualified names live.
    package: String,
    /// Type parameters bound to the probed instantiation's shapes.
    params: Vec<(String, Option<TypeExpr>, String)>,
    symbol: String,
}

impl<'a> TypeStore<'a> {
    /// A store resolving unqualified type names in `package` (e.g. `main`).
    pub(crate) fn new(bin: &'a Binary, package: &str) -> TypeStore<'a> {
        let ctx = bin
            .dwarf_cache()
            .ok()
            .filter(|_| bin.is_go() && bin.has_dwarf())
            .map(|c| Ctx::new(c, &bin.elf));
        TypeStore {
            bin,
            ctx,
            cache: HashMap::new(),
            synth: Vec::new(),
            package: package.to_string(),
            params: Vec::new(),
            symbol: String::new(),
        }
    }

    /// Binds a signature's type parameters to the shapes of the instantiation `symbol`
    /// (`T` of `func Sum[T Number](xs []T) T` to `int64` for `main.Sum[go.shape.int64]`).
    /// A parameter without a shape fails only where it is used.
    pub(crate) fn bind_type_params(&mut self, names: &[String], symbol: &str) {
        let shapes = generic::shape_args(symbol).unwrap_or_default();
        self.symbol = symbol.to_string();
        self.params = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let shape = shapes.get(i).copied().unwrap_or_default();
                (n.clone(), generic::shape_type(shape), shape.to_string())
            })
            .collect();
    }

    fn bad_dwarf(&self, offset: usize, reason: DwarfError) -> TypeError {
        TypeError::BadDwarf {
            path: self.bin.path().to_path_buf(),
            offset,
            reason,
        }
    }

    /// The type `r` refers to.
    pub(crate) fn get(&mut self, r: TypeRef) -> Result<Arc<TypeInfo>, TypeError> {
        if let Some(t) = self.cache.get(&r) {
            return Ok(t.clone());
        }
        let info = match r {
            TypeRef::Dwarf(off) => {
                let ctx = self.ctx.as_mut().ok_or_else(|| TypeError::BadDwarf {
                    path: self.bin.path().to_path_buf(),
                    offset: off,
                    reason: DwarfError::NotLoaded,
                })?;
                let t = ctx.type_info(off).map_err(|e| self.bad_dwarf(off, e))?.0;
                Arc::new(t)
            }
            TypeRef::Desc(addr) => {
                let idx = self.bin.desc_index();
                let bad = |reason: DescriptorError| TypeError::BadDescriptor {
                    path: self.bin.path().to_path_buf(),
                    addr,
                    reason,
                };
                let r = idx
                    .reader(&self.bin.elf)
                    .ok_or_else(|| bad(DescriptorError::NoTypeSection))?;
                Arc::new(r.info(addr).map_err(bad)?)
            }
            TypeRef::Synth(i) => match &self.synth[i as usize] {
                Synth::Info(t) => t.clone(),
                Synth::Expr(e) => {
                    let e = e.clone();
                    let t = self.resolve_expr(&e)?;
                    self.synth[i as usize] = Synth::Info(t.clone());
                    t
                }
            },
        };
        self.cache.insert(r, info.clone());
        Ok(info)
    }

    fn push(&mut self, s: Synth) -> TypeRef {
        self.synth.push(s);
        TypeRef::Synth(self.synth.len() as u32 - 1)
    }

    /// A signature type, resolved lazily (only when a path or a layout needs it).
    pub(crate) fn expr_type(&mut self, e: &TypeExpr) -> TypeRef {
        self.push(Synth::Expr(e.clone()))
    }

    fn resolve_expr(&mut self, e: &TypeExpr) -> Result<Arc<TypeInfo>, TypeError> {
        let info = |name: String, size: u64, kind: Kind| Arc::new(TypeInfo { name, size, kind });
        let name = e.to_string();
        Ok(match e {
            TypeExpr::Named {
                package: None,
                name: n,
                args,
            } if args.is_empty() => {
                if let Some((_, ty, shape)) = self.params.iter().find(|p| &p.0 == n).cloned() {
                    let Some(ty) = ty else {
                        return Err(if shape.is_empty() {
                            TypeError::UnboundTypeParam {
                                name: n.clone(),
                                symbol: self.symbol.clone(),
                                shapes: generic::shape_args(&self.symbol)
                                    .map(|a| a.join(","))
                                    .unwrap_or_else(|| "none".into()),
                            }
                        } else {
                            TypeError::UnknownShape {
                                name: n.clone(),
                                shape,
                                symbol: self.symbol.clone(),
                            }
                        });
                    };
                    return self.resolve_expr(&ty);
                }
                match predeclared(n) {
                    Some(t) => Arc::new(t),
                    None => self.named(e)?,
                }
            }
            TypeExpr::Named { .. } => self.named(e)?,
            TypeExpr::Pointer(t) => {
                let r = self.expr_type(t);
                info(name, 8, Kind::Pointer(r))
            }
            TypeExpr::Slice(t) => {
                let r = self.expr_type(t);
                info(name, 24, Kind::Slice(r))
            }
            TypeExpr::Map(k, v) => {
                let (key, elem) = (self.expr_type(k), self.expr_type(v));
                info(name, 8, Kind::Map { key, elem })
            }
            TypeExpr::Chan(_) => info(name, 8, Kind::Chan),
            TypeExpr::Func => info(name, 8, Kind::Func),
            TypeExpr::Interface => info(name, 16, Kind::Interface { empty: false }),
            TypeExpr::Array(n, t) => {
                let elem = self.expr_type(t);
                let size = self.get(elem)?.size * n;
                info(name, size, Kind::Array { elem, len: *n })
            }
            TypeExpr::Struct(fields) => {
                // Go's layout: each field at its alignment, the size rounded up to the
                // largest one.
                let (mut off, mut align, mut out) = (0u64, 1u64, Vec::new());
                for f in fields {
                    let ty = self.expr_type(&f.ty);
                    let a = self.shape(ty)?.align();
                    align = align.max(a);
                    off = off.next_multiple_of(a);
                    out.push(Field {
                        name: f.name.clone(),
                        ty,
                        offset: off,
                        embedded: false,
                    });
                    off += self.get(ty)?.size;
                }
                info(name, off.next_multiple_of(align), Kind::Struct(out))
            }
        })
    }

    /// A named type of a signature, from the binary; the few well-known interfaces and
    /// pointer-shaped types of the standard library are known without it.
    fn named(&mut self, e: &TypeExpr) -> Result<Arc<TypeInfo>, TypeError> {
        match self.lookup(&e.to_string()) {
            Ok(r) => self.get(r),
            Err(err) => well_known(e).map(Arc::new).ok_or(err),
        }
    }

    /// The register-ABI shapes of a signature's parameters (or results); the first that
    /// cannot be laid out fails, with its name.
    pub(crate) fn signature_shapes(
        &mut self,
        ps: &[gprobe_crds::signature::Param],
    ) -> Result<(Vec<TypeRef>, Vec<GoType>), (String, TypeError)> {
        let refs: Vec<TypeRef> = ps.iter().map(|p| self.expr_type(&p.ty)).collect();
        let shapes = ps
            .iter()
            .zip(&refs)
            .map(|(p, &r)| self.shape(r).map_err(|e| (p.name.clone(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((refs, shapes))
    }

    /// The named type `written` as a user writes it: `main.order`, `order` (in the probed
    /// function's package), `http.Request` (a package name) or `net/http.Request` (an
    /// import path). DWARF is the source where the binary has it, else the descriptors.
    pub(crate) fn lookup(&mut self, written: &str) -> Result<TypeRef, TypeError> {
        // A qualifier is a '.' before any type arguments (`List[main.item]` has none).
        let head = &written[..written.find('[').unwrap_or(written.len())];
        let full = if head.contains('.') {
            written.to_string()
        } else {
            format!("{}.{written}", self.package)
        };
        let path = self.bin.path().to_path_buf();
        // Names in both tables: exact (an import path, or a package whose path is its
        // name), else by package name (`http.Request` for `net/http.Request`).
        let find = |by_name: &dyn Fn(&str) -> Option<TypeRef>,
                    short: &dyn Fn(&str) -> Vec<String>|
         -> Result<Option<TypeRef>, TypeError> {
            if let Some(r) = by_name(&full) {
                return Ok(Some(r));
            }
            let candidates = short(short_name(&full));
            match candidates.len() {
                0 => Ok(None),
                1 => Ok(by_name(&candidates[0])),
                _ => Err(TypeError::Ambiguous {
                    name: written.to_string(),
                    path: path.clone(),
                    candidates,
                }),
            }
        };
        let (source, similar) = if let Some(idx) = self.bin.dwarf_type_index()? {
            let by = |n: &str| idx.by_name.get(n).map(|&o| TypeRef::Dwarf(o));
            let sh = |n: &str| idx.short.get(n).cloned().unwrap_or_default();
            if let Some(r) = find(&by, &sh)? {
                return Ok(r);
            }
            (TypeSource::Dwarf, similar(idx.by_name.keys(), &full))
        } else {
            let idx = self.bin.desc_index();
            let by = |n: &str| idx.by_name.get(n).map(|&a| TypeRef::Desc(a));
            let sh = |n: &str| idx.short.get(n).cloned().unwrap_or_default();
            if let Some(r) = find(&by, &sh)? {
                return Ok(r);
            }
            let source = if idx.sec.is_some() {
                TypeSource::Descriptors
            } else {
                TypeSource::None
            };
            (source, similar(idx.by_name.keys(), &full))
        };
        // An alias of the standard library names a type the binary describes under that
        // type's own name (`os.FileInfo` is `io/fs.FileInfo`).
        if let Some(target) = std_alias(&full) {
            if let Ok(r) = self.lookup(target) {
                return Ok(r);
            }
        }
        Err(TypeError::NotFound {
            name: full,
            path,
            described_by: source,
            similar,
        })
    }

    /// The binary's error types whose text an error capture builds (errtable.rs).
    pub(crate) fn error_table(&self) -> &crate::plan::errtable::ErrTable {
        self.bin
            .desc_index()
            .error_table(&self.bin.elf, self.bin.go_version())
    }

    /// The DWARF type named exactly `name` (`*main.order`), if the binary has DWARF.
    pub(crate) fn dwarf_named(&self, name: &str) -> Option<TypeRef> {
        let idx = self.bin.dwarf_type_index().ok()??;
        idx.by_name.get(name).map(|&o| TypeRef::Dwarf(o))
    }

    /// The register-ABI shape of a type: through struct fields and array elements, which
    /// are laid out in place; pointers, maps, channels and functions are a word.
    pub(crate) fn shape(&mut self, r: TypeRef) -> Result<GoType, TypeError> {
        let path = self.bin.path().to_path_buf();
        let too_deep = |t: &TypeInfo| TypeError::BadDwarf {
            path: path.clone(),
            offset: 0,
            reason: DwarfError::StructsTooDeep {
                type_name: t.name.clone(),
                max: MAX_DEPTH,
            },
        };
        shape_of(r, &mut |r| self.get(r), &too_deep)
    }
}

/// The standard library's exported type aliases on linux/amd64, Go 1.19 to 1.27, with the
/// types they name. Neither DWARF nor the runtime type descriptors record an alias: a
/// binary describes `io/fs.FileInfo`, never `os.FileInfo`. encoding/json's are aliases only
/// in builds with encoding/json/v2 (GOEXPERIMENT=jsonv2); elsewhere the binary has the
/// type itself, found before this table is asked.
const STD_ALIASES: [(&str, &str); 10] = [
    ("os.FileInfo", "io/fs.FileInfo"),
    ("os.FileMode", "io/fs.FileMode"),
    ("os.PathError", "io/fs.PathError"),
    ("os.DirEntry", "io/fs.DirEntry"),
    ("html/template.FuncMap", "text/template.FuncMap"),
    ("debug/buildinfo.BuildInfo", "runtime/debug.BuildInfo"),
    ("encoding/json.Marshaler", "encoding/json/v2.Marshaler"),
    ("encoding/json.Unmarshaler", "encoding/json/v2.Unmarshaler"),
    ("encoding/json.RawMessage", "encoding/json/jsontext.Value"),
    (
        "encoding/json.Options",
        "encoding/json/internal/jsonopts.Options",
    ),
];

/// The type the standard library's alias `full` names, written with an import path
/// (`os.FileInfo`, `encoding/json.RawMessage`) or a package name (`json.RawMessage`).
fn std_alias(full: &str) -> Option<&'static str> {
    STD_ALIASES
        .iter()
        .find(|(alias, _)| *alias == full || short_name(alias) == full)
        .map(|&(_, target)| target)
}

/// Names of the table like `full` in another package, or differing in case: a typo's fix.
fn similar<'k>(names: impl Iterator<Item = &'k String>, full: &str) -> Vec<String> {
    let want = short_name(full);
    let base = want.rsplit('.').next().unwrap_or(want).to_ascii_lowercase();
    let mut v: Vec<String> = names
        .filter(|n| {
            !n.starts_with(['*', '[', '.'])
                && short_name(n)
                    .rsplit('.')
                    .next()
                    .unwrap_or(n)
                    .to_ascii_lowercase()
                    == base
        })
        .take(8)
        .cloned()
        .collect();
    v.sort();
    v
}

/// The predeclared types (and `unsafe.Pointer`'s kin that need no binary).
/// Standard-library types whose layout a signature may use where the binary describes
/// none of them (a stripped binary that never converts them to an interface).
fn well_known(e: &TypeExpr) -> Option<TypeInfo> {
    let TypeExpr::Named {
        package: Some(package),
        name,
        args,
    } = e
    else {
        return None;
    };
    if !args.is_empty() {
        return None;
    }
    let (size, kind) = match (package.as_str(), name.as_str()) {
        ("time", "Duration") => (
            8,
            Kind::Int {
                size: 8,
                signed: true,
            },
        ),
        ("context", "Context")
        | ("io", "Reader" | "Writer" | "ReadCloser" | "WriteCloser" | "ReadWriter")
        | ("net", "Conn" | "Listener" | "Addr")
        | ("fmt", "Stringer")
        | ("http", "Handler" | "ResponseWriter" | "RoundTripper") => {
            (16, Kind::Interface { empty: false })
        }
        ("unsafe", "Pointer") | ("http", "Header") | ("url", "Values") => (8, Kind::UnsafePointer),
        _ => return None,
    };
    Some(TypeInfo {
        name: e.to_string(),
        size,
        kind,
    })
}

fn predeclared(name: &str) -> Option<TypeInfo> {
    let t = |size: u64, kind: Kind| {
        Some(TypeInfo {
            name: name.to_string(),
            size,
            kind,
        })
    };
    let int = |size: u8, signed| t(size as u64, Kind::Int { size, signed });
    match name {
        "bool" => t(1, Kind::Bool),
        "int" | "int64" => int(8, true),
        "int32" | "rune" => int(4, true),
        "int16" => int(2, true),
        "int8" => int(1, true),
        "uint" | "uint64" => int(8, false),
        "uint32" => int(4, false),
        "uint16" => int(2, false),
        "uint8" | "byte" => int(1, false),
        "uintptr" => t(8, Kind::Uintptr),
        "float32" => t(4, Kind::Float { size: 4 }),
        "float64" => t(8, Kind::Float { size: 8 }),
        "complex64" => t(8, Kind::Complex { size: 8 }),
        "complex128" => t(16, Kind::Complex { size: 16 }),
        "string" => t(16, Kind::String),
        "error" => t(16, Kind::Interface { empty: false }),
        "any" => t(16, Kind::Interface { empty: true }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_aliases_name_their_types() {
        assert_eq!(std_alias("os.FileInfo"), Some("io/fs.FileInfo"));
        assert_eq!(std_alias("os.PathError"), Some("io/fs.PathError"));
        assert_eq!(
            std_alias("json.RawMessage"),
            Some("encoding/json/jsontext.Value")
        );
        assert_eq!(
            std_alias("html/template.FuncMap"),
            Some("text/template.FuncMap")
        );
        assert_eq!(std_alias("main.FileInfo"), None);
        // No alias names an alias: one lookup reaches the type.
        for (_, target) in STD_ALIASES {
            assert_eq!(std_alias(target), None, "{target}");
        }
    }
}
