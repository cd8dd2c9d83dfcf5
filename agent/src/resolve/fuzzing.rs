//! Entry points for the fuzz targets (`fuzz/`) and their regression inputs (replayed by
//! `agent/tests/fuzz_inputs.rs`): each reads one input as an ELF file and runs the parsers
//! of binary input that planning a probe reaches, where a panic is the failure.
//!
//! An input is a small container of sections, not an ELF file: random bytes rarely frame
//! an ELF file, and a mutation of one that does lands mostly in code. The container is
//! written out as a well-formed ELF file ([`elf_image`]) whose sections hold the input's
//! bytes, so every mutation reaches the section parsers:
//!
//! ```text
//! byte 0: flags (bit 0: no section headers; bit 1: ET_DYN)
//! then, repeated: kind (u8: index into SECTIONS; bit 7: `len` bytes of RET, given no bytes)
//!                 addr (u64 LE; 0: not loaded), len (u32 LE), bytes
//! ```

use std::path::Path;

use super::planner::plan_probe;
use super::Binary;
use gprobe_crds::Probe;

/// The sections a container can hold, by kind.
pub const SECTIONS: [&str; 26] = [
    ".text",
    ".gopclntab",
    ".go.buildinfo",
    ".noptrdata",
    ".data",
    ".data.rel.ro",
    ".go.module",
    ".note.stapsdt",
    ".stapsdt.base",
    ".probes",
    ".eh_frame",
    ".symtab",
    ".strtab",
    ".debug_info",
    ".debug_abbrev",
    ".debug_str",
    ".debug_line",
    ".debug_ranges",
    ".debug_rnglists",
    ".debug_addr",
    ".debug_str_offsets",
    ".debug_line_str",
    ".rodata",
    ".note.go.buildid",
    ".dynamic",
    ".rela.dyn",
];

/// At most this many bytes of sections: a mutation cannot make an input allocate more.
const MAX_BYTES: usize = 16 << 20;

/// One section of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sect {
    pub name: &'static str,
    pub addr: u64,
    pub bytes: Vec<u8>,
}

/// Reads a container; what does not frame is left out.
pub fn parse_container(data: &[u8]) -> (u8, Vec<Sect>) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return (0, Vec::new());
    };
    let mut out = Vec::new();
    let mut total = 0usize;
    while rest.len() >= 13 {
        let kind = rest[0];
        let addr = u64::from_le_bytes(rest[1..9].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(rest[9..13].try_into().unwrap_or_default()) as usize;
        rest = &rest[13..];
        let Some(&name) = SECTIONS.get((kind & 0x7f) as usize) else {
            break;
        };
        let bytes = if kind & 0x80 != 0 {
            vec![0xc3; len.min(1 << 20)]
        } else {
            let n = len.min(rest.len());
            let b = rest[..n].to_vec();
            rest = &rest[n..];
            b
        };
        total += bytes.len();
        if total > MAX_BYTES {
            break;
        }
        out.push(Sect { name, addr, bytes });
    }
    (flags, out)
}

/// Writes a container: the inverse of [`parse_container`] (sections of RETs only are
/// written as such).
pub fn write_container(flags: u8, sects: &[Sect]) -> Vec<u8> {
    let mut out = vec![flags];
    for s in sects {
        let kind = SECTIONS.iter().position(|n| *n == s.name).unwrap_or(0) as u8;
        let rets = s.bytes.len() > 64 && s.bytes.iter().all(|&b| b == 0xc3);
        out.push(if rets { kind | 0x80 } else { kind });
        out.extend_from_slice(&s.addr.to_le_bytes());
        out.extend_from_slice(&(s.bytes.len() as u32).to_le_bytes());
        if !rets {
            out.extend_from_slice(&s.bytes);
        }
    }
    out
}

/// A seed: the sections `names` of the ELF file `elf`, each at its address, `.text` (when
/// `rets_for_text`) replaced by as many RET bytes (the code of a Go binary is large and
/// the Go tables' parsers only decode it).
pub fn container_from_elf(elf: &[u8], names: &[&str], rets_for_text: bool) -> Vec<u8> {
    use object::{Object, ObjectSection};
    let Ok(f) = object::File::parse(elf) else {
        return Vec::new();
    };
    let mut sects = Vec::new();
    for s in f.sections() {
        let Ok(name) = s.name() else { continue };
        let Some(&known) = SECTIONS.iter().find(|n| **n == name && names.contains(n)) else {
            continue;
        };
        let Ok(data) = s.uncompressed_data() else {
            continue;
        };
        let bytes = if known == ".text" && rets_for_text {
            vec![0xc3; data.len()]
        } else {
            data.into_owned()
        };
        sects.push(Sect {
            name: known,
            addr: s.address(),
            bytes,
        });
    }
    let dyn_flag = if f.kind() == object::ObjectKind::Dynamic {
        2
    } else {
        0
    };
    write_container(dyn_flag, &sects)
}

fn put16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// A well-formed x86-64 ELF file holding `sects`: one PT_LOAD per section with an address
/// (executable for `.text`, writable for the data sections), PT_DYNAMIC for `.dynamic`
/// (its DT_RELA names `.rela.dyn`: the relocations of position-independent builds),
/// section headers (unless `flags` bit 0), `.symtab` linked to `.strtab`.
pub fn elf_image(flags: u8, sects: &[Sect]) -> Vec<u8> {
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    const SHDR: usize = 64;
    let loads = sects.iter().filter(|s| s.addr != 0).count();
    let dynamic = sects.iter().any(|s| s.name == ".dynamic");
    let phnum = loads + dynamic as usize;
    let mut offsets = Vec::with_capacity(sects.len());
    let mut off = EHDR + PHDR * phnum;
    for s in sects {
        if s.addr != 0 {
            // The file offset must be congruent with the address modulo the page size.
            let want = (s.addr % 0x1000) as usize;
            off += (want + 0x1000 - off % 0x1000) % 0x1000;
        } else {
            off = off.next_multiple_of(8);
        }
        offsets.push(off);
        off += s.bytes.len();
    }
    let mut shstrtab = vec![0u8];
    let mut name_offs = Vec::new();
    for s in sects {
        name_offs.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(s.name.as_bytes());
        shstrtab.push(0);
    }
    let shstr_name = shstrtab.len() as u32;
    shstrtab.extend_from_slice(b".shstrtab\0");
    let shstr_off = off;
    off += shstrtab.len();
    let shoff = off.next_multiple_of(8);
    let with_shdrs = flags & 1 == 0;

    let mut v = Vec::with_capacity(shoff + SHDR * (sects.len() + 2));
    v.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    v.extend_from_slice(&[0; 8]);
    put16(&mut v, if flags & 2 != 0 { 3 } else { 2 }); // e_type
    put16(&mut v, 62); // EM_X86_64
    put32(&mut v, 1);
    put64(
        &mut v,
        sects
            .iter()
            .find(|s| s.name == ".text")
            .map_or(0, |s| s.addr),
    );
    put64(&mut v, EHDR as u64); // e_phoff
    put64(&mut v, if with_shdrs { shoff as u64 } else { 0 });
    put32(&mut v, 0);
    put16(&mut v, EHDR as u16);
    put16(&mut v, PHDR as u16);
    put16(&mut v, phnum as u16);
    put16(&mut v, SHDR as u16);
    put16(
        &mut v,
        if with_shdrs {
            sects.len() as u16 + 2
        } else {
            0
        },
    );
    put16(
        &mut v,
        if with_shdrs {
            sects.len() as u16 + 1
        } else {
            0
        },
    );
    let writable = |n: &str| {
        matches!(
            n,
            ".data"
                | ".noptrdata"
                | ".go.buildinfo"
                | ".data.rel.ro"
                | ".go.module"
                | ".probes"
                | ".dynamic"
        )
    };
    for (s, &o) in sects.iter().zip(&offsets) {
        if s.addr == 0 {
            continue;
        }
        put32(&mut v, 1); // PT_LOAD
        let pf = 4 | if s.name == ".text" { 1 } else { 0 } | if writable(s.name) { 2 } else { 0 };
        put32(&mut v, pf);
        put64(&mut v, o as u64);
        put64(&mut v, s.addr);
        put64(&mut v, s.addr);
        put64(&mut v, s.bytes.len() as u64);
        put64(&mut v, s.bytes.len() as u64);
        put64(&mut v, 0x1000);
    }
    if let Some((s, &o)) = sects
        .iter()
        .zip(&offsets)
        .find(|(s, _)| s.name == ".dynamic")
    {
        put32(&mut v, 2); // PT_DYNAMIC
        put32(&mut v, 6);
        put64(&mut v, o as u64);
        put64(&mut v, s.addr);
        put64(&mut v, s.addr);
        put64(&mut v, s.bytes.len() as u64);
        put64(&mut v, s.bytes.len() as u64);
        put64(&mut v, 8);
    }
    for (s, &o) in sects.iter().zip(&offsets) {
        v.resize(o, 0);
        v.extend_from_slice(&s.bytes);
    }
    v.resize(shstr_off, 0);
    v.extend_from_slice(&shstrtab);
    if !with_shdrs {
        return v;
    }
    v.resize(shoff, 0);
    v.extend_from_slice(&[0; SHDR]);
    let strtab = sects.iter().position(|s| s.name == ".strtab");
    for (i, (s, &o)) in sects.iter().zip(&offsets).enumerate() {
        let (ty, link, entsize) = match s.name {
            ".symtab" => (2, strtab.map_or(0, |j| j as u32 + 1), 24),
            ".strtab" => (3, 0, 0),
            n if n.starts_with(".note") => (7, 0, 0),
            _ => (1, 0, 0),
        };
        let mut shf = if s.addr != 0 { 2 } else { 0 };
        if s.name == ".text" {
            shf |= 4;
        }
        if writable(s.name) {
            shf |= 1;
        }
        put32(&mut v, name_offs[i]);
        put32(&mut v, ty);
        put64(&mut v, shf);
        put64(&mut v, s.addr);
        put64(&mut v, o as u64);
        put64(&mut v, s.bytes.len() as u64);
        put32(&mut v, link);
        put32(&mut v, 0);
        put64(&mut v, 1);
        put64(&mut v, entsize);
    }
    put32(&mut v, shstr_name);
    put32(&mut v, 3);
    put64(&mut v, 0);
    put64(&mut v, 0);
    put64(&mut v, shstr_off as u64);
    put64(&mut v, shstrtab.len() as u64);
    put32(&mut v, 0);
    put32(&mut v, 0);
    put64(&mut v, 1);
    put64(&mut v, 0);
    v
}

/// The binary a container describes; `None` when it is refused at open (an error is an
/// outcome, not a failure).
pub fn binary(data: &[u8]) -> Option<Binary> {
    let (flags, sects) = parse_container(data);
    let image = elf_image(flags, &sects);
    // No separate debug files: what is read comes from the input only.
    Binary::from_bytes(image, Path::new("fuzz-input"))
        .ok()
        .map(|b| b.with_debug_roots(Vec::new()))
}

/// The `.note.stapsdt` notes, their argument specs, and the checks of their sites
/// (instruction decoding from the enclosing function's start: symbols, `.eh_frame`).
pub fn stapsdt(data: &[u8]) {
    let Some(b) = binary(data) else { return };
    let Ok(probes) = b.usdt_probes() else { return };
    let probes = probes.to_vec();
    for p in probes.iter().take(32) {
        let mut probe = Probe {
            usdt: Some(p.point()),
            capture: vec!["arg0".into(), "arg1".into(), "arg2".into()],
            ..Default::default()
        };
        let _ = plan_probe(&b, &probe, 64);
        probe.signature = Some("(const char *s, long n, int k)".into());
        probe.capture = vec!["s".into(), "n".into(), "s[:n]".into()];
        let _ = plan_probe(&b, &probe, 64);
    }
}

/// Go's tables: the pclntab (found by section or by its magic), the module data, the
/// build information, the inline trees, the stack-check prologues and RET sites.
pub fn go_tables(data: &[u8]) {
    let Some(b) = binary(data) else { return };
    let _ = (b.is_go(), b.go_version(), b.go_text_start());
    let Ok(funcs) = b.functions() else { return };
    for f in funcs
        .iter()
        .filter(|f| f.name.starts_with("main."))
        .take(64)
    {
        if let Ok(found) = b.find_function(&f.name) {
            let _ = b.probe_sites(&found);
        }
        let _ = b.inlined_call_sites(&f.name);
        let probe = Probe {
            symbol: f.name.clone(),
            latency: true,
            ..Default::default()
        };
        let _ = plan_probe(&b, &probe, 64);
    }
    let _ = b.find_function("runtime.main");
    let _ = b.all_probe_sites();
}

/// DWARF: Go signatures and types (go/dwarf.rs, go/types/) and C
/// prototypes (c/dwarf.rs).
pub fn dwarf(data: &[u8]) {
    let Some(b) = binary(data) else { return };
    let funcs = b.functions().unwrap_or_default();
    let _ = b.dwarf_signatures();
    let _ = b.c_signatures(&funcs);
    for f in funcs.iter().take(256) {
        let _ = b.dwarf_signature(f);
        let _ = b.c_signature(f);
    }
    if b.is_go() {
        let _ = b.struct_layouts();
    }
}
