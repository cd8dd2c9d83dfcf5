//! USDT notes are checked before a uprobe goes where they point: the pc must start an
//! instruction (decoded from the start of the function holding it) and that instruction
//! must be the `nop` sys/sdt.h emits. e2e/testdata/forged has two notes that sys/sdt.h did
//! not write (one into the middle of a `movabs`, one at an `add`) next to a real one; every
//! note of the packaged programs passes (`usdt.rs` checks that each has no problem). A
//! malformed `.note.stapsdt` section is reported as malformed, with what is wrong.

use std::path::PathBuf;

use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::{Binary, PlanError, ResolveError};
use gprobe_crds::Probe;
use gprobe_e2e::cc;
use gprobe_e2e::go::repo_root;

use crate::{open, section_range, write_tmp};

/// e2e/testdata/forged built for test `test` alone: the tests run at once in one process,
/// and each removes its copy when done (one shared path let a test lose its file to the
/// other's cleanup).
fn forged(test: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("usdt-checks");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("forged-{test}.{}", std::process::id()));
    cc::build(
        &repo_root().join("e2e/testdata/forged/forged.c"),
        &out,
        &["-g"],
        None,
    )
}

fn usdt(point: &str) -> Probe {
    Probe {
        usdt: Some(point.into()),
        ..Probe::default()
    }
}

#[test]
fn notes_that_sys_sdt_did_not_write_are_refused_with_the_reason() {
    let path = forged("notes");
    let b = open(&path);
    let probes = b.usdt_probes().unwrap();
    let site = |name: &str| {
        probes
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no forged:{name}"))
            .sites[0]
            .clone()
    };
    assert_eq!(site("good").problem, None);
    let inside = site("inside")
        .problem
        .expect("a pc inside a movabs")
        .to_string();
    assert!(
        inside.contains("inside the instruction [48 b8 88 77 66 55 44 33 22 11]")
            && inside.contains("compute"),
        "{inside}"
    );
    let notnop = site("notnop").problem.expect("a pc at an add").to_string();
    assert!(
        notnop.contains("not the `nop`") && notnop.contains("compute"),
        "{notnop}"
    );
    for (point, why) in [("forged:inside", "inside"), ("forged:notnop", "nop")] {
        let e = plan_probe(&b, &usdt(point), 64).unwrap_err();
        assert!(matches!(e, PlanError::UsdtBadNote { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("usdt:{point}: ")) && msg.contains(why),
            "{msg}"
        );
    }
    let good = plan_probe(&b, &usdt("forged:good"), 64).unwrap();
    assert_eq!(good.entry_offset, site("good").offset);

    // Stripped of its symbols, the function that holds each pc is found by its unwind
    // entry (.eh_frame), and the same notes are refused for the same reasons.
    let stripped = path.with_extension("stripped");
    let st = std::process::Command::new("strip")
        .arg("-s")
        .arg("-o")
        .arg(&stripped)
        .arg(&path)
        .status()
        .unwrap();
    assert!(st.success());
    let b = open(&stripped);
    let probes = b.usdt_probes().unwrap();
    for p in probes {
        let problem = p.sites[0].problem.as_ref().map(ToString::to_string);
        let problem = problem.as_deref();
        match p.name.as_str() {
            "good" => assert_eq!(problem, None),
            "inside" => assert!(
                problem.is_some_and(
                    |m| m.contains("inside the instruction") && m.contains("unwind entry")
                ),
                "{problem:?}"
            ),
            "notnop" => assert!(problem.is_some_and(|m| m.contains("not the `nop`"))),
            other => panic!("{other}"),
        }
    }
    let _ = std::fs::remove_file(&stripped);
    let _ = std::fs::remove_file(&path);
}

/// A change to the bytes of the file.
type Corrupt = Box<dyn Fn(&mut Vec<u8>)>;

/// Each way to break the section's framing or a note's descriptor is named; none reads as
/// "no .note.stapsdt section".
#[test]
fn a_malformed_note_section_is_reported_as_malformed() {
    let path = forged("malformed");
    let data = std::fs::read(&path).unwrap();
    let (off, _) = section_range(&path, ".note.stapsdt");
    let dir = path.parent().unwrap();
    let cases: [(&str, Corrupt, &str); 3] = [
        (
            "huge-name",
            Box::new(move |d| d[off..off + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes())),
            "note 0 at offset 0x0: its name (2147483632 bytes) and descriptor",
        ),
        (
            "short-desc",
            // The first note's descriptor cut to 16 bytes: less than three addresses, and
            // what follows it no longer frames as notes.
            Box::new(move |d| d[off + 4..off + 8].copy_from_slice(&16u32.to_le_bytes())),
            "malformed",
        ),
        (
            "no-nul",
            // The provider name "forged" runs into the name without a NUL.
            Box::new(move |d| {
                let desc = off + 12 + 8 + 24;
                d[desc + 6] = b'_';
                d[desc + 13] = b'_';
                d[desc + 14] = b'_';
            }),
            "terminating NUL",
        ),
    ];
    for (name, corrupt, want) in &cases {
        let mut d = data.clone();
        corrupt(&mut d);
        let p = write_tmp(dir, &format!("forged-{name}.{}", std::process::id()), &d);
        let b = Binary::open(&p).unwrap();
        let e = b.usdt_probes().unwrap_err();
        assert!(
            matches!(e, ResolveError::MalformedStapsdt { .. }),
            "{name}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(".note.stapsdt section is malformed") && msg.contains(want),
            "{name}: {msg}"
        );
        let planned = plan_probe(&b, &usdt("forged:good"), 64).unwrap_err();
        let planned = planned.to_string();
        assert!(
            planned.contains("malformed") && !planned.contains("no .note.stapsdt"),
            "{name}: {planned}"
        );
        let _ = std::fs::remove_file(&p);
    }
    let _ = std::fs::remove_file(&path);
}
