//! Go programs built with cgo as position-independent executables linked by the external
//! linker (`-buildmode=pie -ldflags=-linkmode=external`, as Debian builds its Go packages),
//! where Go 1.19 leaves no `.gopclntab` section (the table is inside `.data.rel.ro`). They
//! must be traced as Go: arguments read with Go's register ABI, and a latency probe's
//! returns seen by uprobes on RET instructions, never a uretprobe, which kills a program
//! whose goroutine stack moves ("unexpected return pc"). The program must not be harmed:
//! it exits 0 with its own results. Debian's `age` (Go 1.19, PIE, external linking,
//! stripped) is traced the same way. They need root (BPF).

use gprobe_e2e::go::{self, GoVersion, TempDir};
use gprobe_e2e::harness::{
    build_dir, program_lines, require_program, require_trace, run_program, serial, Gprobe,
};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// e2e/testdata/pieext built by `v` as cgo PIE linked externally, stripped or not, copied
/// for this test process (a uprobe follows the file). The build stays under Cargo's
/// per-target temp dir, so its Go build cache stays warm.
fn pieext(v: GoVersion, stripped: bool) -> PathBuf {
    let name = format!("pieext-{}-{}", v.tag(), if stripped { "s" } else { "full" });
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pieext");
    std::fs::create_dir_all(&dir).unwrap();
    let ldflags = if stripped {
        "-ldflags=-linkmode=external -s -w"
    } else {
        "-ldflags=-linkmode=external"
    };
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    let src = go::repo_root().join("e2e/testdata/pieext");
    go::build_with(v, &src, &tmp, &["-buildmode=pie", ldflags], true);
    let out = build_dir().join(&name);
    std::fs::rename(&tmp, &out)
        .or_else(|_| std::fs::copy(&tmp, &out).map(|_| ()))
        .unwrap();
    out
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// `(n, tag, r0)` of every record of main.grow.
fn grow_records(records: &[Value]) -> Vec<(i64, String, i64)> {
    records
        .iter()
        .map(|r| {
            assert!(r["duration_ns"].as_u64().is_some_and(|d| d > 0), "{r}");
            (
                r["args"]["n"].as_i64().unwrap_or_else(|| panic!("{r}")),
                text(&r["args"]["tag"]),
                r["returns"]["r0"].as_i64().unwrap_or_else(|| panic!("{r}")),
            )
        })
        .collect()
}

const ROUNDS: i64 = 6;
/// 13 nested calls of grow with 1 KiB frames: a new goroutine's first stack (8 KiB) grows
/// and moves during each round, and every call is paired (gprobe pairs 16 nested calls).
const DEPTH: i64 = 12;

/// Traces `bin` with a latency probe on main.grow (and, where the binary has symbols, on
/// the C function cadd, whose return is a uretprobe) and checks every record against what
/// the program computed.
fn trace_and_compare(bin: &Path, stripped: bool) {
    let what = bin.display().to_string();
    let mut spec = SpecBuilder::new("pieext").executable(bin).probe({
        let p = ProbeBuilder::new("main.grow")
            .capture(["n", "tag", "r0"])
            .latency();
        if stripped {
            p.signature("func(n int64, tag string) int64")
        } else {
            p
        }
    });
    if !stripped {
        spec = spec.probe(
            ProbeBuilder::new("cadd")
                .signature("int cadd(int a, int b)")
                .capture(["a", "b", "r0"])
                .latency(),
        );
    }
    let g = Gprobe::cmd(&spec.yaml()).summary_file().start();
    let rounds = ROUNDS.to_string();
    let depth = DEPTH.to_string();
    // run_program asserts that the program exited 0.
    let out = run_program(bin, &["-rounds", &rounds, "-depth", &depth]);
    let run = g.stop();
    assert!(
        run.status.success(),
        "{what}: gprobe failed:\n{}",
        run.stderr
    );

    // The program's own results: grow(n, tag) = n + len(tag).
    let lines = program_lines(&out, "grow ");
    assert_eq!(lines.len(), ROUNDS as usize, "{what}:\n{out}");
    let mut want = Vec::new();
    for l in &lines {
        let tag = l["tag"].clone();
        assert_eq!(
            l["r"].parse::<i64>().unwrap(),
            DEPTH + tag.len() as i64,
            "{what}: the program computed a wrong result:\n{out}"
        );
        want.extend((0..=DEPTH).map(|k| (k, tag.clone(), k + tag.len() as i64)));
    }
    let got = grow_records(&run.records_of("main.grow"));
    assert_eq!(sorted(got), sorted(want), "{what}: main.grow records");

    let summary = run.summary();
    let grow = summary.probe("main.grow");
    assert!(grow.attached && grow.error.is_none(), "{what}: {grow:?}");
    assert_eq!(grow.delivered, (ROUNDS * (DEPTH + 1)) as u64, "{what}");
    assert_eq!(
        summary.processes.traced, 1,
        "{what}: {:?}",
        summary.processes
    );

    if !stripped {
        let want: Vec<BTreeMap<String, String>> = program_lines(&out, "cadd ");
        assert_eq!(want.len(), ROUNDS as usize);
        let got: Vec<BTreeMap<String, String>> = run
            .records_of("cadd")
            .iter()
            .map(|r| {
                [
                    ("a", &r["args"]["a"]),
                    ("b", &r["args"]["b"]),
                    ("r", &r["returns"]["r0"]),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), text(v)))
                .collect()
            })
            .collect();
        assert_eq!(got, want, "{what}: cadd records");
    }
}

#[test]
fn latency_probes_in_externally_linked_pie_go_binaries_read_exact_values_and_harm_nothing() {
    let _serial = serial();
    require_trace(
        "latency_probes_in_externally_linked_pie_go_binaries_read_exact_values_and_harm_nothing",
    );
    for v in [GoVersion::Go119, GoVersion::Go127] {
        for stripped in [false, true] {
            trace_and_compare(&pieext(v, stripped), stripped);
        }
    }
}

/// Debian's age: Go 1.19, PIE, linked externally, stripped. A latency probe on its stream
/// writer's Write sees every chunk io.Copy hands it (their lengths add up to the file's
/// size, each call returning its length and a nil error), and age still encrypts: the
/// file decrypts to the original.
#[test]
fn debians_age_is_traced_as_go_and_still_encrypts_correctly() {
    let test = "debians_age_is_traced_as_go_and_still_encrypts_correctly";
    require_trace(test);
    let age = require_program(test, "/usr/bin/age", "age");
    let age_keygen = require_program(test, "/usr/bin/age-keygen", "age");
    let _serial = serial();
    let dir = TempDir::new("age");
    // A copy of this test process's own: a uprobe follows the file.
    let bin = dir.path().join("age");
    std::fs::copy(&age, &bin).unwrap();
    let key = dir.path().join("key.txt");
    let keygen = Command::new(&age_keygen)
        .arg("-o")
        .arg(&key)
        .output()
        .expect("run age-keygen");
    assert!(keygen.status.success(), "age-keygen: {keygen:?}");
    let recipient = String::from_utf8_lossy(&keygen.stderr)
        .split_whitespace()
        .last()
        .unwrap()
        .to_string();
    assert!(recipient.starts_with("age1"), "{keygen:?}");
    // 300 000 bytes: io.Copy writes them in 32 KiB chunks, the last one partial.
    let plain: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let input = dir.path().join("plain");
    std::fs::write(&input, &plain).unwrap();
    let sealed = dir.path().join("sealed.age");

    const WRITE: &str = "filippo.io/age/internal/stream.(*Writer).Write";
    let spec = SpecBuilder::new("age")
        .executable(&bin)
        .probe(
            ProbeBuilder::new(WRITE)
                .signature("func(w *stream.Writer, p []byte) (n int, err error)")
                .capture(["len(p)", "n", "err"])
                .latency(),
        )
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let (sealed_s, input_s) = (sealed.to_str().unwrap(), input.to_str().unwrap());
    run_program(&bin, &["-e", "-r", &recipient, "-o", sealed_s, input_s]);
    let run = g.stop();
    assert!(run.status.success(), "gprobe failed:\n{}", run.stderr);

    let writes = run.records_of(WRITE);
    assert!(writes.len() >= 2, "{}\n{}", run.stdout, run.stderr);
    let mut total = 0;
    for r in &writes {
        let len = r["args"]["len(p)"]
            .as_u64()
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(r["returns"]["n"].as_u64(), Some(len), "{r}");
        assert!(r["returns"]["err"].is_null(), "{r}");
        assert!(r["duration_ns"].as_u64().is_some_and(|d| d > 0), "{r}");
        total += len;
    }
    assert_eq!(total, plain.len() as u64, "the lengths of every Write");
    let summary = run.summary();
    let p = summary.probe(WRITE);
    assert!(p.attached && p.error.is_none(), "{p:?}");

    // age was not harmed: what it wrote decrypts to the input (run untraced).
    let opened = Command::new(&age)
        .args(["-d", "-i"])
        .arg(&key)
        .arg(&sealed)
        .output()
        .unwrap();
    assert!(opened.status.success(), "age -d: {opened:?}");
    assert!(
        opened.stdout == plain,
        "the decrypted file differs from the input"
    );
}
