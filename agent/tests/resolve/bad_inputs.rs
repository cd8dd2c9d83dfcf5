//! Bad inputs, and binaries whose tables are damaged or disagree: each is a typed error,
//! never a wrong address.

use gprobe_agent::resolve::{FuncInfo, ResolveError};

use crate::go::{self, GoVersion};
use crate::{open, section_range, sig_stripped, write_tmp};
use gprobe_agent::resolve::Binary;

#[test]
fn bad_inputs_are_errors() {
    let tmp = go::TempDir::new("resolve-bad");
    let dir = tmp.path();
    let src = sig_stripped(GoVersion::Go127);
    let good = std::fs::read(&src).unwrap();

    // Missing file.
    let e = Binary::open(&dir.join("missing")).unwrap_err();
    assert!(matches!(e, ResolveError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("missing"), "{e}");

    // Not ELF: a script, and an empty file.
    let p = write_tmp(dir, "script.sh", b"#!/bin/sh\necho hi\n");
    let e = Binary::open(&p).unwrap_err();
    assert!(matches!(e, ResolveError::NotElf { .. }), "{e:?}");
    assert!(e.to_string().contains("not an ELF file"), "{e}");
    let e = Binary::open(dir).unwrap_err();
    assert!(matches!(e, ResolveError::NotElf { .. }), "{e:?}");
    let p = write_tmp(dir, "empty", b"");
    assert!(matches!(Binary::open(&p), Err(ResolveError::NotElf { .. })));
    let p = write_tmp(dir, "tiny-elf", b"\x7fELF\x02\x01\x01");
    assert!(matches!(
        Binary::open(&p),
        Err(ResolveError::Malformed { .. })
    ));

    // Truncated: the first 4096 bytes of a real Go binary.
    let p = write_tmp(dir, "truncated", &good[..4096]);
    let e = Binary::open(&p).unwrap_err();
    assert!(matches!(e, ResolveError::Malformed { .. }), "{e:?}");
    assert!(e.to_string().contains("truncated"), "{e}");
    // Cut inside the pclntab.
    let (pc_off, pc_len) = section_range(&src, ".gopclntab");
    let p = write_tmp(dir, "cut", &good[..pc_off + pc_len / 2]);
    assert!(matches!(
        Binary::open(&p),
        Err(ResolveError::Malformed { .. })
    ));

    // pclntab with out-of-range offsets: pclnOffset (8th word after the 8-byte header).
    let mut bad = good.clone();
    let at = pc_off + 8 + 7 * 8;
    bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let p = write_tmp(dir, "bad-pclnoffset", &bad);
    let b = open(&p);
    assert!(b.is_go());
    let e = b.functions().unwrap_err();
    assert!(matches!(e, ResolveError::BadPclntab { .. }), "{e:?}");
    assert!(matches!(
        b.find_function("main.main"),
        Err(ResolveError::BadPclntab { .. })
    ));
    assert!(matches!(
        b.all_probe_sites(),
        Err(ResolveError::BadPclntab { .. })
    ));

    // A functab entry whose _func offset points past the table.
    let pcln_offset = u64::from_le_bytes(good[at..at + 8].try_into().unwrap()) as usize;
    let mut bad = good.clone();
    let entry = pc_off + pcln_offset + 10 * 8 + 4;
    bad[entry..entry + 4].copy_from_slice(&0xfff0_0000u32.to_le_bytes());
    let p = write_tmp(dir, "bad-funcoff", &bad);
    let e = open(&p).functions().unwrap_err();
    assert!(matches!(e, ResolveError::BadPclntab { .. }), "{e:?}");
    assert!(e.to_string().contains("outside"), "{e}");

    // A name offset past the name table.
    let funcoff = u32::from_le_bytes(good[entry..entry + 4].try_into().unwrap()) as usize;
    let mut bad = good.clone();
    let name = pc_off + pcln_offset + funcoff + 4;
    bad[name..name + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let p = write_tmp(dir, "bad-nameoff", &bad);
    assert!(matches!(
        open(&p).functions(),
        Err(ResolveError::BadPclntab { .. })
    ));

    // An old pclntab magic (Go 1.16) is reported as an unsupported Go version.
    let mut old = good.clone();
    old[pc_off..pc_off + 4].copy_from_slice(&0xffff_fffau32.to_le_bytes());
    let p = write_tmp(dir, "go116", &old);
    let b = open(&p);
    assert!(b.is_go());
    let e = b.functions().unwrap_err();
    assert!(
        matches!(e, ResolveError::UnsupportedGoVersion { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("Go 1.18 or newer"), "{e}");

    // A function that is not in the file.
    let b = open(&src);
    let ghost = FuncInfo {
        name: "ghost".into(),
        addr: 0x10,
        size: 16,
    };
    assert!(matches!(
        b.probe_sites(&ghost),
        Err(ResolveError::AddressNotMapped { .. })
    ));
    let huge = FuncInfo {
        name: "huge".into(),
        addr: b.find_function("main.main").unwrap().addr,
        size: u64::MAX / 2,
    };
    assert!(matches!(
        b.probe_sites(&huge),
        Err(ResolveError::AddressNotMapped { .. })
    ));
}

#[test]
fn binary_without_section_headers_is_still_resolved() {
    let tmp = go::TempDir::new("resolve-noshdr");
    let src = sig_stripped(GoVersion::Go119);
    let mut data = std::fs::read(&src).unwrap();
    // e_shoff = 0, e_shnum = 0, e_shstrndx = 0.
    data[0x28..0x30].fill(0);
    data[0x3c..0x40].fill(0);
    let p = write_tmp(tmp.path(), "noshdr", &data);
    let b = open(&p);
    assert!(b.is_go());
    assert!(b.go_version().unwrap().starts_with("go1.19"));
    let want = open(&src).find_function("main.mix").unwrap();
    assert_eq!(b.find_function("main.mix").unwrap(), want);
}

/// Overwrites `from` with `to` (same length) inside the section header string table, so
/// that a section is no longer found by its name.
fn rename_section(data: &mut [u8], path: &std::path::Path, from: &[u8], to: &[u8]) {
    let (off, len) = section_range(path, ".shstrtab");
    let table = &mut data[off..off + len];
    let at = table
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("no {} section", String::from_utf8_lossy(from)));
    table[at..at + to.len()].copy_from_slice(to);
}

#[test]
fn symtab_that_disagrees_is_refused() {
    use object::{Object, ObjectSymbol};
    let tmp = go::TempDir::new("resolve-symtab");
    let src = crate::sig_bin(GoVersion::Go127);
    let mut data = std::fs::read(&src).unwrap();
    let (sym_index, addr) = {
        let f = object::File::parse(&*data).unwrap();
        let s = f.symbols().find(|s| s.name() == Ok("main.mix")).unwrap();
        (s.index().0, s.address())
    };
    let (symtab, _) = section_range(&src, ".symtab");
    let at = symtab + sym_index * 24 + 8;
    data[at..at + 8].copy_from_slice(&(addr + 0x10).to_le_bytes());
    let p = write_tmp(tmp.path(), "moved", &data);
    let b = open(&p);
    match b.find_function("main.mix") {
        Err(ResolveError::AddressMismatch {
            pclntab, symtab, ..
        }) => assert_eq!((pclntab, symtab), (addr, addr + 0x10)),
        other => panic!("{other:?}"),
    }
    let e = b.find_function("main.mix").unwrap_err().to_string();
    assert!(e.contains("refusing to probe"), "{e}");
    // The other functions still agree.
    assert!(b.find_function("main.leaf").is_ok());
}

#[test]
fn unknown_text_start_is_refused_not_guessed() {
    let tmp = go::TempDir::new("resolve-textstart");
    // Externally linked Go 1.27: the C runtime's code precedes runtime.text in .text, and
    // the pclntab header has no text address. Without the module data there is nothing
    // to place the functions by.
    let src = crate::sig_external_stripped(GoVersion::Go127);
    let want = open(&src).find_function("main.mix").unwrap();
    let mut data = std::fs::read(&src).unwrap();
    rename_section(&mut data, &src, b".go.module", b".go.modulx");
    let (md, _) = section_range(&src, ".go.module");
    data[md..md + 8].fill(0xee);
    let p = write_tmp(tmp.path(), "ext-no-moduledata", &data);
    let b = open(&p);
    assert_eq!(b.go_text_start(), None);
    let e = b.find_function("main.mix").unwrap_err();
    assert!(matches!(e, ResolveError::NoTextStart { .. }), "{e:?}");
    assert!(e.to_string().contains("refuses to guess"), "{e}");

    // The same damage to an internally linked build: its ELF entry point is
    // _rt0_amd64_linux at the start of .text plus its offset, which proves .text starts
    // with runtime.text.
    let src = sig_stripped(GoVersion::Go127);
    let want_internal = open(&src).find_function("main.mix").unwrap();
    let mut data = std::fs::read(&src).unwrap();
    rename_section(&mut data, &src, b".go.module", b".go.modulx");
    let (md, _) = section_range(&src, ".go.module");
    data[md..md + 8].fill(0xee);
    let p = write_tmp(tmp.path(), "int-no-moduledata", &data);
    let b = open(&p);
    assert_eq!(b.go_text_start(), None);
    assert_eq!(b.find_function("main.mix").unwrap(), want_internal);
    assert_ne!(want, want_internal);
}

#[test]
fn pie_module_data_through_relocations() {
    // Some linkers leave relocated words 0 in the file and only the dynamic relocation
    // says what the loader writes there. Zero every relocated word of the module data of
    // a stripped PIE (and hide its section): the scan must then find it through the
    // relocation addends.
    let tmp = go::TempDir::new("resolve-pie");
    let src = crate::sig_pie_stripped(GoVersion::Go127);
    let bin = open(&src);
    let want = bin.find_function("main.mix").unwrap();
    let text = bin.go_text_start().unwrap();
    let mut data = std::fs::read(&src).unwrap();
    let (md, md_len) = section_range(&src, ".go.module");
    let md_vaddr = {
        use object::{Object, ObjectSection};
        let f = object::File::parse(&*data).unwrap();
        f.section_by_name(".go.module").unwrap().address()
    };
    let (rela, rela_len) = section_range(&src, ".rela");
    let mut zeroed = 0;
    for r in data[rela..rela + rela_len].to_vec().chunks_exact(24) {
        let at = u64::from_le_bytes(r[0..8].try_into().unwrap());
        let info = u64::from_le_bytes(r[8..16].try_into().unwrap());
        if info & 0xffff_ffff == 8 && at >= md_vaddr && at < md_vaddr + md_len as u64 {
            let off = md + (at - md_vaddr) as usize;
            data[off..off + 8].fill(0);
            zeroed += 1;
        }
    }
    assert!(zeroed > 10, "{zeroed} relocated words");
    rename_section(&mut data, &src, b".go.module", b".go.modulx");
    let p = write_tmp(tmp.path(), "pie-relocs", &data);
    let b = open(&p);
    assert_eq!(b.go_text_start(), Some(text));
    assert_eq!(b.find_function("main.mix").unwrap(), want);
    assert_eq!(b.inlined_call_sites("main.twice").unwrap(), 2);
}

#[test]
fn function_bounds_that_cut_an_instruction_are_refused() {
    for v in crate::VERSIONS {
        let b = open(&sig_stripped(v));
        let f = b.find_function("main.bigFrame").unwrap();
        let sites = b.probe_sites(&f).unwrap();
        let body = sites.body_offset - sites.entry_offset;
        // A table that ends the function inside its stack check's Jcc.
        let cut = FuncInfo {
            size: body - 1,
            ..f.clone()
        };
        match b.probe_sites(&cut) {
            Err(ResolveError::CodePastEnd { symbol, size, .. }) => {
                assert_eq!((symbol.as_str(), size), ("main.bigFrame", body - 1))
            }
            other => panic!("{}: {other:?}", v.tag()),
        }
        let msg = b.probe_sites(&cut).unwrap_err().to_string();
        assert!(msg.contains("the function table may be wrong"), "{msg}");
    }
}
