//! An error capture's record (`CAP_ERROR`, specified at `GpCapture`) to the text the
//! error's `Error()` returns, built from the fields BPF read, as Go's standard library
//! builds it (`resolve/go/types/errtable.rs` lists the types and their formats).
//!
//! Every node is checked before its fields are used: its type, named through its address,
//! must be a type of the binary's table, and the fields BPF read (kind and offset) must be
//! the ones the table has for that name. Anything else (a type of the program's own, a
//! field that could not be read, an ESTALE of a release whose text is not known) and the
//! value falls back to the error's dynamic type name: never a text that might be wrong. A
//! string that was cut ends the text there, as a prefix of the real one, marked truncated.

use super::errno::errno_text;
use super::value::{word, DecodeCtx, ValueKind};
use crate::abi::{self, VAL_FAULT, VAL_INVALID, VAL_NIL, VAL_TRUNCATED};
use crate::plan::{ErrFormat, ErrTable};

/// One field record.
#[derive(Debug, Clone, Copy)]
struct Field<'a> {
    kind: u8,
    off: u8,
    flags: u8,
    child: u8,
    /// STR: the full length; WORD: the word.
    w: u64,
    bytes: &'a [u8],
}

#[derive(Debug)]
struct Node<'a> {
    ty: u64,
    flags: u8,
    fields: Vec<Field<'a>>,
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The nodes of a record; `None` when it is malformed.
fn nodes(bytes: &[u8]) -> Option<Vec<Node<'_>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < bytes.len() {
        let h = bytes.get(off..off + 16)?;
        let (ty, nf, flags) = (word(&h[0..8]), h[12] as usize, h[13]);
        off += 16;
        let mut fields = Vec::with_capacity(nf);
        for _ in 0..nf {
            let f = bytes.get(off..off + 16)?;
            let k = u32::from_le_bytes([f[4], f[5], f[6], f[7]]) as usize;
            let b = bytes.get(off + 16..off + 16 + k)?;
            fields.push(Field {
                kind: f[0],
                off: f[1],
                flags: f[2],
                child: f[3],
                w: word(&f[8..16]),
                bytes: b,
            });
            off += 16 + pad8(k);
        }
        out.push(Node { ty, flags, fields });
    }
    Some(out)
}

/// The text being built: once a part was cut, the text is a prefix and nothing follows.
struct Text<'n, 'c> {
    nodes: &'n [Node<'n>],
    ctx: &'c DecodeCtx<'c>,
    table: &'c ErrTable,
    out: String,
    cut: bool,
    depth: usize,
}

/// Why no text: the value falls back to its type's name.
struct Unsure;

type R = Result<(), Unsure>;

impl Text<'_, '_> {
    fn push(&mut self, s: &str) {
        if !self.cut {
            self.out.push_str(s);
        }
    }

    /// A string field's bytes; cut ones end the text.
    fn string(&mut self, f: &Field<'_>) -> R {
        if self.cut {
            return Ok(());
        }
        if f.kind != abi::EF_STR || f.flags & (VAL_FAULT | VAL_INVALID) != 0 {
            return Err(Unsure);
        }
        self.out.push_str(&String::from_utf8_lossy(f.bytes));
        if f.flags & VAL_TRUNCATED != 0 || (f.bytes.len() as u64) < f.w {
            self.cut = true;
        }
        Ok(())
    }

    /// The field's string is not empty (it is read whole or cut: either way known).
    fn non_empty(f: &Field<'_>) -> bool {
        f.w != 0
    }

    /// The node an interface field holds, as text (`Err.Error()`, `Addr.String()`).
    fn child(&mut self, f: &Field<'_>) -> R {
        if self.cut {
            return Ok(());
        }
        if f.kind != abi::EF_IFACE || f.flags & (VAL_FAULT | VAL_NIL | VAL_TRUNCATED) != 0 {
            // Nil (Go would panic, or print "%!s(<nil>)"), unread, or no room.
            return Err(Unsure);
        }
        self.node(f.child as usize)
    }

    /// Whether an interface field is nil.
    fn is_nil(f: &Field<'_>) -> Result<bool, Unsure> {
        if f.kind != abi::EF_IFACE || f.flags & VAL_FAULT != 0 {
            return Err(Unsure);
        }
        Ok(f.flags & VAL_NIL != 0)
    }

    fn node(&mut self, i: usize) -> R {
        if self.cut {
            return Ok(());
        }
        self.depth += 1;
        if self.depth > abi::GP_ERR_NODES {
            return Err(Unsure);
        }
        let nodes = self.nodes;
        let n = nodes.get(i).ok_or(Unsure)?;
        if n.ty == 0 || n.flags & VAL_FAULT != 0 {
            return Err(Unsure);
        }
        let name = self.ctx.type_name(n.ty).ok_or(Unsure)?;
        let t = self.table.by_name(name).ok_or(Unsure)?;
        // The fields read must be the table's for that type: a hash that BPF took for
        // another type's is not trusted.
        let same = n.fields.len() == t.fields.len()
            && n.fields
                .iter()
                .zip(&t.fields)
                .all(|(f, &(k, o))| f.kind == k && f.off == o);
        if !same {
            return Err(Unsure);
        }
        let f = &n.fields;
        match t.format {
            ErrFormat::Message | ErrFormat::Unix => self.string(&f[0])?,
            ErrFormat::Path => {
                self.string(&f[0])?;
                self.push(" ");
                self.string(&f[1])?;
                self.push(": ");
                self.child(&f[2])?;
            }
            ErrFormat::Syscall => {
                self.string(&f[0])?;
                self.push(": ");
                self.child(&f[1])?;
            }
            ErrFormat::Op => {
                let (source_nil, addr_nil) = (Self::is_nil(&f[2])?, Self::is_nil(&f[3])?);
                self.string(&f[0])?;
                if Self::non_empty(&f[1]) {
                    self.push(" ");
                    self.string(&f[1])?;
                }
                if !source_nil {
                    self.push(" ");
                    self.child(&f[2])?;
                }
                if !addr_nil {
                    self.push(if source_nil { " " } else { "->" });
                    self.child(&f[3])?;
                }
                self.push(": ");
                self.child(&f[4])?;
            }
            ErrFormat::Url => {
                self.string(&f[0])?;
                self.push(" ");
                self.quoted(&f[1])?;
                self.push(": ");
                self.child(&f[2])?;
            }
            ErrFormat::Dns => {
                self.push("lookup ");
                self.string(&f[1])?;
                if Self::non_empty(&f[2]) {
                    self.push(" on ");
                    self.string(&f[2])?;
                }
                self.push(": ");
                self.string(&f[0])?;
            }
            ErrFormat::Errno => {
                if f[0].kind != abi::EF_WORD || f[0].flags & VAL_FAULT != 0 {
                    return Err(Unsure);
                }
                let text = errno_text(f[0].w, self.table).ok_or(Unsure)?;
                self.push(&text);
            }
            ErrFormat::HostPort | ErrFormat::Ip => {
                let ip = ip_text(&f[0])?;
                let zone = if t.format == ErrFormat::HostPort {
                    &f[2]
                } else {
                    &f[1]
                };
                if zone.kind != abi::EF_STR
                    || zone.flags & (VAL_FAULT | VAL_INVALID | VAL_TRUNCATED) != 0
                    || (zone.bytes.len() as u64) < zone.w
                {
                    return Err(Unsure);
                }
                let mut host = ip;
                if !zone.bytes.is_empty() {
                    host.push('%');
                    host.push_str(&String::from_utf8_lossy(zone.bytes));
                }
                if t.format == ErrFormat::HostPort {
                    if f[1].kind != abi::EF_WORD || f[1].flags & VAL_FAULT != 0 {
                        return Err(Unsure);
                    }
                    // JoinHostPort: a host with a colon is an IPv6 literal.
                    let port = f[1].w as i64;
                    if host.contains(':') {
                        self.push(&format!("[{host}]:{port}"));
                    } else {
                        self.push(&format!("{host}:{port}"));
                    }
                } else {
                    self.push(&host);
                }
            }
            ErrFormat::Constant(text) => self.push(text),
        }
        self.depth -= 1;
        Ok(())
    }

    /// `%q` of a string, as Go's strconv.Quote writes it, for ASCII text; other text is
    /// not quoted here (Go's notion of a printable rune is its own).
    fn quoted(&mut self, f: &Field<'_>) -> R {
        if self.cut {
            return Ok(());
        }
        if f.kind != abi::EF_STR || f.flags & (VAL_FAULT | VAL_INVALID) != 0 {
            return Err(Unsure);
        }
        if !f.bytes.is_ascii() {
            return Err(Unsure);
        }
        let mut q = String::with_capacity(f.bytes.len() + 2);
        q.push('"');
        for &b in f.bytes {
            match b {
                b'"' => q.push_str("\\\""),
                b'\\' => q.push_str("\\\\"),
                0x07 => q.push_str("\\a"),
                0x08 => q.push_str("\\b"),
                0x0c => q.push_str("\\f"),
                b'\n' => q.push_str("\\n"),
                b'\r' => q.push_str("\\r"),
                b'\t' => q.push_str("\\t"),
                0x0b => q.push_str("\\v"),
                0x20..=0x7e => q.push(b as char),
                _ => q.push_str(&format!("\\x{b:02x}")),
            }
        }
        let cut = f.flags & VAL_TRUNCATED != 0 || (f.bytes.len() as u64) < f.w;
        if !cut {
            q.push('"');
        }
        self.out.push_str(&q);
        self.cut = cut;
        Ok(())
    }
}

/// `ipEmptyString(ip)` of net: "" for none, dotted IPv4 (also an IPv4-mapped IPv6
/// address), RFC 5952 IPv6, `?` and hex for another length.
fn ip_text(f: &Field<'_>) -> Result<String, Unsure> {
    if f.kind != abi::EF_STR
        || f.flags & (VAL_FAULT | VAL_INVALID | VAL_TRUNCATED) != 0
        || f.bytes.len() as u64 != f.w
    {
        return Err(Unsure);
    }
    let b = f.bytes;
    let v4 = |p: &[u8]| format!("{}.{}.{}.{}", p[0], p[1], p[2], p[3]);
    Ok(match b.len() {
        0 => String::new(),
        4 => v4(b),
        16 if b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff => v4(&b[12..]),
        16 => {
            let g: Vec<u16> = b
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            // The longest run of at least two zero groups (the first of equal ones) is ::.
            let (mut z0, mut zlen) = (8usize, 0usize);
            let mut i = 0;
            while i < 8 {
                if g[i] != 0 {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j < 8 && g[j] == 0 {
                    j += 1;
                }
                if j - i >= 2 && j - i > zlen {
                    (z0, zlen) = (i, j - i);
                }
                i = j;
            }
            let mut s = String::new();
            let mut i = 0;
            while i < 8 {
                if i == z0 {
                    s.push_str("::");
                    i += zlen;
                    continue;
                }
                if i > 0 && !s.ends_with("::") {
                    s.push(':');
                }
                s.push_str(&format!("{:x}", g[i]));
                i += 1;
            }
            s
        }
        _ => {
            let mut s = String::from("?");
            for x in b {
                s.push_str(&format!("{x:02x}"));
            }
            s
        }
    })
}

/// The value of an error capture: null when nil, its text where it can be built, else
/// the root's dynamic type name (or an unnamed non-nil interface).
pub(super) fn error_text(bytes: &[u8], max_len: u16, ctx: &DecodeCtx<'_>) -> ValueKind {
    let Some(nodes) = nodes(bytes) else {
        return ValueKind::Fault;
    };
    let Some(root) = nodes.first() else {
        return ValueKind::Fault;
    };
    if root.ty == 0 && root.flags & VAL_FAULT == 0 {
        return ValueKind::Null;
    }
    let fallback = || match ctx.type_name(root.ty) {
        Some(n) if root.ty != 0 => ValueKind::Str {
            text: n.to_string(),
            truncated: false,
        },
        _ => ValueKind::Interface { nil: false },
    };
    let Some(table) = ctx.types.as_ref().map(|t| t.errors()) else {
        return fallback();
    };
    let mut t = Text {
        nodes: &nodes,
        ctx,
        table,
        out: String::new(),
        cut: false,
        depth: 0,
    };
    if t.node(0).is_err() {
        return fallback();
    }
    // The whole text, like any string, is kept to maxStringBytes.
    let (mut text, mut truncated) = (t.out, t.cut);
    let max = max_len as usize;
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        truncated = true;
    }
    super::value::text(text.as_bytes(), truncated, ctx.redact)
}

#[cfg(test)]
mod tests;
