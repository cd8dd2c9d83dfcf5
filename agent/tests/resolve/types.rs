//! Go types on e2e/testdata/resolve/values, built with every Go release of this machine,
//! stripped and not: struct layouts from the runtime type descriptors equal DWARF's; the
//! names of dynamic types; `gprobe types`. Field paths are in paths.rs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use gprobe_agent::abi::{self, GpCapture, GpLoc};
use gprobe_agent::plan::TypeNames;
use gprobe_agent::plan::{Decode, ProbePlan};
use gprobe_agent::resolve::go::types::StructLayout;
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::Binary;
use gprobe_crds::Probe;

use crate::go::GoVersion;
use crate::{open, values_bin, VERSIONS};

pub const KINDS: [&str; 3] = ["full", "stripped", "pie-stripped"];

pub fn probe(symbol: &str, signature: Option<&str>, capture: &[&str]) -> Probe {
    Probe {
        symbol: symbol.into(),
        signature: signature.map(Into::into),
        capture: capture.iter().map(|c| c.to_string()).collect(),
        ..Probe::default()
    }
}

pub fn plan(b: &Binary, p: &Probe) -> ProbePlan {
    plan_probe(b, p, 64).unwrap_or_else(|e| panic!("{} in {}: {e}", p.symbol, b.path().display()))
}

/// The capture named `name` of a plan.
pub fn cap(p: &ProbePlan, name: &str) -> (Decode, GpCapture) {
    let c = p
        .entry_captures
        .iter()
        .chain(&p.return_captures)
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no capture {name}"));
    (c.decode, c.bpf)
}

pub fn reg(r: u8) -> GpLoc {
    GpLoc {
        kind: abi::LOC_REG,
        reg: r,
        ..Default::default()
    }
}

/// What the program prints in `offsets` mode: PATH lines (capture -> hops, offset), TYPE
/// lines (%T name, address of the type word) and the MAP line.
pub struct Printed {
    pub paths: BTreeMap<String, (Vec<i32>, i32)>,
    pub types: Vec<(String, u64)>,
    pub map: (u64, u64),
}

pub fn printed(bin: &Path) -> Printed {
    let o = Command::new(bin)
        .arg("offsets")
        .output()
        .expect("run values offsets");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let mut p = Printed {
        paths: BTreeMap::new(),
        types: Vec::new(),
        map: (0, 0),
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "PATH" => {
                let hops = match f[2] {
                    "-" => Vec::new(),
                    h => h.split(',').map(|x| x.parse().unwrap()).collect(),
                };
                p.paths.insert(f[1].into(), (hops, f[3].parse().unwrap()));
            }
            "TYPE" => p.types.push((f[1].into(), hex(f[2]))),
            "MAP" => p.map = (hex(f[1]), hex(f[2])),
            _ => {}
        }
    }
    p
}

/// A layout whose type names are spelled with package names, not import paths: Go's
/// descriptors spell the types inside composite types so (`[]chan<- singleflight.Result`
/// in Go 1.19), DWARF with paths. Function and struct literals are spelled differently
/// in other ways (DWARF qualifies unexported field names): left out.
fn shortened(l: &StructLayout) -> StructLayout {
    let short = |s: &str| {
        if s.contains(['(', '{']) {
            return String::new();
        }
        let mut out = String::new();
        for c in s.chars() {
            if c == '/' {
                while out.ends_with(|c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | '-')) {
                    out.pop();
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    StructLayout {
        name: short(&l.name),
        size: l.size,
        fields: l
            .fields
            .iter()
            .map(|(n, o, t, e)| (n.clone(), *o, short(t), *e))
            .collect(),
    }
}

#[test]
fn descriptors_describe_structs_as_dwarf_does() {
    for v in GoVersion::ALL {
        // Unstripped builds have both sources: every named struct the descriptors
        // describe has the same size, fields, offsets and field types in DWARF.
        let mut full_layouts = BTreeMap::new();
        for kind in ["full", "pie", "external"] {
            let b = open(&values_bin(v, kind));
            let names = b.descriptor_type_names();
            assert!(
                names.len() > 100,
                "{} {kind}: {} named types",
                v.tag(),
                names.len()
            );
            let mut compared = 0;
            for name in &names {
                let (desc, dwarf) = b.struct_layout_from_both(name).unwrap();
                let Some(desc) = desc else { continue };
                if kind == "full" {
                    full_layouts.insert(name.clone(), desc.clone());
                }
                // DWARF leaves out types no function's variables have (crypto/rsa.CRTValue
                // in these builds): compare where both describe the type.
                let Some(dwarf) = dwarf else {
                    continue;
                };
                assert_eq!(shortened(&desc), shortened(&dwarf), "{} {kind}", v.tag());
                compared += 1;
            }
            assert!(
                compared > 50,
                "{} {kind}: {compared} structs compared",
                v.tag()
            );
        }
        for name in [
            "main.order",
            "main.Customer",
            "main.note",
            "main.pair",
            "net/http.Request",
            "net/url.URL",
        ] {
            assert!(
                full_layouts.contains_key(name),
                "{} describes {name}",
                v.tag()
            );
        }
        // Stripped builds: the descriptors alone, equal to the unstripped build's layouts.
        for kind in ["stripped", "pie-stripped"] {
            let b = open(&values_bin(v, kind));
            assert!(!b.has_dwarf());
            for name in b.descriptor_type_names() {
                if let (Some(desc), None) = b.struct_layout_from_both(&name).unwrap() {
                    assert_eq!(
                        Some(&desc),
                        full_layouts.get(&name),
                        "{} {kind} {name}",
                        v.tag()
                    );
                }
            }
            assert!(b.struct_layout_from_both("main.order").unwrap().0.is_some());
        }
    }
}

#[test]
fn dynamic_type_names_for_the_decoder() {
    for v in GoVersion::ALL {
        for kind in ["full", "stripped", "pie-stripped"] {
            let path = values_bin(v, kind);
            let b = open(&path);
            let names = TypeNames::of(&b);
            let run = printed(&path);
            let bias = names
                .load_bias(run.map.0, run.map.1)
                .expect("the mapping is in a segment");
            if !kind.starts_with("pie") {
                assert_eq!(bias, 0, "{} {kind}", v.tag());
            }
            assert_eq!(run.types.len(), 8, "{} {kind}", v.tag());
            for (name, addr) in &run.types {
                // Errors hold an itab: its type is found through the binary's itabs.
                assert_eq!(
                    names.name_at(*addr, bias),
                    Some(name.as_str()),
                    "{} {kind} {addr:#x}",
                    v.tag()
                );
            }
        }
    }
}

#[test]
fn gprobe_types_lists_layouts_of_stripped_binaries() {
    for v in VERSIONS {
        let mut out = Vec::new();
        let n = gprobe_agent::types::list(
            &values_bin(v, "stripped"),
            Some(r"^main\.(order|Base)$"),
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(n, 2, "{text}");
        assert!(text.contains("runtime type descriptors"), "{text}");
        for line in [
            "main.order (160 bytes)",
            "       0  Base      main.Base  (embedded)",
            "      16  Customer  *main.Customer",
            "      48  Tags      []string",
            "      96  Meta      map[string]int",
            "     128  Err       error",
            "main.Base (16 bytes)",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
        let mut out = Vec::new();
        gprobe_agent::types::list(&values_bin(v, "full"), Some(r"^main\.secret$"), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("from DWARF") && text.contains("main.secret (16 bytes)"),
            "{text}"
        );
    }
}

#[test]
fn error_tables_read_each_binary_s_layouts() {
    use gprobe_agent::plan::ErrFormat;
    for v in GoVersion::ALL {
        let mut ids = Vec::new();
        for kind in KINDS {
            let b = open(&values_bin(v, kind));
            let t = b.error_table();
            let what = format!("{} {kind}", v.tag());
            assert_ne!(t.id, 0, "{what}");
            let names: Vec<&str> = t.types.iter().map(|t| t.name.as_str()).collect();
            for want in [
                "*errors.errorString",
                "*fmt.wrapError",
                "*fs.PathError",
                "*os.SyscallError",
                "*net.OpError",
                "*url.Error",
                "syscall.Errno",
                "*net.TCPAddr",
            ] {
                assert!(names.contains(&want), "{what}: {want} not in {names:?}");
            }
            let op = t.by_name("*net.OpError").unwrap();
            assert_eq!(op.format, ErrFormat::Op);
            let (s, i, w) = (abi::EF_STR, abi::EF_IFACE, abi::EF_WORD);
            assert_eq!(
                op.fields,
                [(s, 0), (s, 16), (i, 32), (i, 48), (i, 64)],
                "{what}"
            );
            assert_eq!(t.by_name("syscall.Errno").unwrap().fields, [(w, 0)]);
            assert_eq!(
                t.by_name("*net.TCPAddr").unwrap().fields,
                [(s, 0), (w, 24), (s, 32)]
            );
            // Go 1.23 put UnwrapErr before Err: the offsets come from the binary.
            if let Some(dns) = t.by_name("*net.DNSError") {
                let err_at = if matches!(v, GoVersion::Go119 | GoVersion::Go121) {
                    0
                } else {
                    16
                };
                assert_eq!(
                    dns.fields,
                    [(s, err_at), (s, err_at + 16), (s, err_at + 32)],
                    "{what}"
                );
            }
            // Each hash is unique in the binary, so BPF cannot take one type for another.
            let mut hashes: Vec<u32> = t.types.iter().map(|t| t.hash).collect();
            hashes.dedup();
            assert_eq!(hashes.len(), t.types.len(), "{what}");
            ids.push(t.id);
        }
        // The descriptors of one build are the same stripped or not: one table.
        assert_eq!(ids[0], ids[1], "{}", v.tag());
    }
}
