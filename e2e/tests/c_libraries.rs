//! Probes on shared libraries loaded after the process started: OpenJDK 17's `java`
//! launcher dlopens libjvm.so, whose `hotspot:class__loaded` USDT probe fires for every
//! class the JVM loads. gprobe stops the process at the dynamic loader's hook, attaches,
//! and resumes it, so the records equal the JVM's own class-loading log from its first
//! class. It needs root (BPF) and openjdk-17-jre-headless (scripts/setup.sh --test).

use gprobe_e2e::harness::{require_trace, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::path::Path;
use std::process::Command;

const JAVA: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";

fn java() -> &'static Path {
    let java = Path::new(JAVA);
    assert!(
        java.is_file(),
        "{JAVA} is missing: install openjdk-17-jre-headless (scripts/setup.sh --test)"
    );
    java
}

/// The classes the JVM says it loaded (`-Xlog:class+load=info`), in its `a.b.C` spelling.
fn logged_classes(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_once("[class,load] "))
        .map(|(_, rest)| rest.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn classes_loaded_by_a_jvm_started_after_gprobe_are_all_seen_from_the_first() {
    let _serial = serial();
    require_trace("classes_loaded_by_a_jvm_started_after_gprobe_are_all_seen_from_the_first");
    let java = std::fs::canonicalize(java()).unwrap();
    let spec = SpecBuilder::new("jvm")
        .executable(&java)
        .probe(
            ProbeBuilder::usdt("hotspot:class__loaded")
                .library("libjvm.so")
                .signature("(const char *name, int len, long loader, bool shared)")
                .capture(["name[:len]", "shared"]),
        )
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let child = Command::new(&java)
        .args(["-Xshare:auto", "-Xlog:class+load=info", "-version"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run java");
    let pid = child.id();
    let out = child.wait_with_output().expect("run java");
    assert!(out.status.success(), "{out:?}");
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);

    let mut want = logged_classes(&String::from_utf8_lossy(&out.stdout));
    assert!(want.len() > 300, "the JVM logged {} classes", want.len());
    assert_eq!(
        want[0], "java.lang.Object",
        "the log starts at the first class"
    );
    let records = run.records_of("usdt:hotspot:class__loaded");
    let mut got: Vec<String> = records
        .iter()
        .map(|r| {
            r["args"]["name[:len]"]
                .as_str()
                .unwrap_or_else(|| panic!("a class name in {r}"))
                .replace('/', ".")
        })
        .collect();
    assert_eq!(got[0], "java.lang.Object", "gprobe saw the first class");
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // This JVM traced, never missed. Another java of the machine's, starting or ending
    // while gprobe starts, is its own (once: one that exited before gprobe could inspect
    // it, listed as missed).
    let processes = run.summary().processes;
    assert!(processes.traced >= 1, "{}", run.stderr);
    assert!(
        processes.missed.iter().all(|m| m.pid != pid),
        "pid {pid} missed: {}",
        run.stderr
    );
}

#[test]
fn a_library_glob_that_matches_nothing_is_said_with_what_is_loaded() {
    let _serial = serial();
    require_trace("a_library_glob_that_matches_nothing_is_said_with_what_is_loaded");
    let java = std::fs::canonicalize(java()).unwrap();
    let spec = SpecBuilder::new("jvm")
        .executable(&java)
        .probe(ProbeBuilder::usdt("hotspot:class__loaded").library("libjvmx.so"))
        .yaml();
    let g = Gprobe::start(&spec, &[]);
    let out = Command::new(&java).arg("-version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let run = g.stop();
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("\"libjvmx.so\""))
        .unwrap_or_else(|| panic!("no warning names the glob:\n{}", run.stderr));
    assert!(
        line.contains("WARN") && line.contains("libjli.so"),
        "{line}"
    );
    assert!(run.records_of("usdt:hotspot:class__loaded").is_empty());
}
