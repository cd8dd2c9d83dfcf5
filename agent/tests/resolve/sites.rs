//! Probe sites: entry, body after the stack-growth check, RETs.

use crate::{open, sig_bin, sig_stripped, VERSIONS};

fn is_jcc_end(code: &[u8], body: usize) -> bool {
    (body >= 2 && (0x70..=0x7f).contains(&code[body - 2]))
        || (body >= 6 && code[body - 6] == 0x0f && (0x80..=0x8f).contains(&code[body - 5]))
}

#[test]
fn probe_sites_of_go_functions() {
    for v in VERSIONS {
        for path in [sig_bin(v), sig_stripped(v)] {
            let b = open(&path);
            let data = std::fs::read(path).unwrap();
            for name in [
                "main.bigFrame",
                "main.main",
                "main.mix",
                "main.(*Counter).Add",
            ] {
                let f = b.find_function(name).unwrap();
                let s = b.probe_sites(&f).unwrap();
                assert_eq!(s.entry_offset, b.file_offset(f.addr).unwrap());
                if name != "main.(*Counter).Add" && name != "main.mix" {
                    assert!(s.body_offset > s.entry_offset, "{name}: {s:?}");
                }
                if s.body_offset > s.entry_offset {
                    assert!(s.body_offset - s.entry_offset <= 32, "{name}: {s:?}");
                    assert!(
                        is_jcc_end(&data, s.body_offset as usize),
                        "{name}: no Jcc before body {s:?}"
                    );
                }
                assert!(!s.ret_offsets.is_empty(), "{name}: no RET");
                for &r in &s.ret_offsets {
                    assert!(r >= s.entry_offset && r < s.entry_offset + f.size);
                    assert!(
                        matches!(data[r as usize], 0xc3 | 0xc2),
                        "{name}: {:#x} at {r:#x}",
                        data[r as usize]
                    );
                }
            }
            let leaf = b.find_function("main.leaf").unwrap();
            let s = b.probe_sites(&leaf).unwrap();
            assert_eq!(s.body_offset, s.entry_offset, "leaf: {s:?}");
            assert_eq!(s.ret_offsets.len(), 1, "leaf: {s:?}");
            // Every function of the binary decodes, and the fast RET scan agrees with
            // a full decode.
            assert!(b.all_probe_sites().unwrap() > 1000);
            assert!(b.check_fast_decoder().unwrap() > 1000);
        }
    }
}
