//! gprobe's command line without tracing: clear errors for malformed specs, and
//! `gprobe symbols` on binaries with and without DWARF.

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{gprobe_bin, gprobe_once, program};
use gprobe_e2e::spec::{raw, ProbeBuilder, SpecBuilder};

#[test]
fn malformed_specs_are_clear_errors() {
    // Not YAML: the flow mapping is never closed.
    let run = gprobe_once(
        &raw(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: x}\nspec:\n  \
            selector: {executable: /bin/x\n",
        ),
        &[],
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("spec.yaml: document 1:") && run.stderr.contains("line"),
        "{}",
        run.stderr
    );

    // An empty selector.
    let run = gprobe_once(
        &SpecBuilder::new("x")
            .probe(ProbeBuilder::new("main.f"))
            .yaml(),
        &[],
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("no ProbeSpec can run") && run.stderr.contains("selects nothing"),
        "{}",
        run.stderr
    );
}

#[test]
fn symbols_lists_functions_with_dwarf_signatures_and_stripped_ones_without() {
    let full = program("e2e/testdata/zoo", GoVersion::Go127, false);
    let stripped = program("e2e/testdata/zoo", GoVersion::Go127, true);
    let list = |bin: &std::path::Path| {
        let o = std::process::Command::new(gprobe_bin())
            .args([
                "symbols",
                bin.to_str().unwrap(),
                "--filter",
                r"^main\.(kinds|fail)$",
            ])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let out = list(&full);
    assert!(
        out.starts_with(&format!("# {}: Go binary (go1.27", full.display())),
        "{out}"
    );
    assert!(out.contains("main.fail  func(n int) (r0 error)"), "{out}");
    assert!(
        out.contains(
            "main.kinds  func(b bool, i8 int8, u16 uint16, i32 int32, u64 uint64, p \
            *int, bs []uint8, e error) (ok bool, n int)"
        ),
        "{out}"
    );
    let out = list(&stripped);
    assert!(
        out.contains("stripped (no symbol table), no DWARF: probes need a signature"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("main.")).count(),
        2,
        "{out}"
    );
    let o = std::process::Command::new(gprobe_bin())
        .args(["symbols", "/nonexistent/binary"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/binary"));
}

/// A pipe whose reading end is closed already: the first write to it fails.
fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array we pass.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both are ours; the reading end is closed at once.
    unsafe {
        libc::close(fds[0]);
        std::process::Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

#[test]
fn listings_into_a_closed_pipe_end_quietly() {
    let bin = program("e2e/testdata/zoo", GoVersion::Go127, false);
    let bin = bin.to_str().unwrap();
    for args in [vec!["symbols", bin], vec!["types", bin]] {
        // The reader is gone before the first write.
        let o = std::process::Command::new(gprobe_bin())
            .args(&args)
            .stdout(closed_pipe())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
        // As people use it: `| head -1`, stderr into the same pipe (where a panic while
        // printing the error used to exit 101).
        let o = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "\"$0\" {} 2>&1 | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
                args.join(" ")
            ))
            .arg(gprobe_bin())
            .output()
            .unwrap();
        let status = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            status.trim(),
            "0",
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn an_error_names_each_cause_once() {
    let dir = gprobe_e2e::go::TempDir::new("cli-errors");
    let missing = dir.path().join("missing");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["symbols", m],
        vec!["types", m],
        vec!["run", m],
        vec!["check", m],
    ] {
        let o = std::process::Command::new(gprobe_bin())
            .args(&args)
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.status.success(), "{args:?}: {out}");
        assert_eq!(
            out.matches("No such file or directory (os error 2)")
                .count(),
            1,
            "{args:?}: {out}"
        );
        assert!(out.contains(m), "{args:?}: {out}");
    }
}

fn ctarget(dir: &std::path::Path) -> std::path::PathBuf {
    let src = gprobe_e2e::go::repo_root().join("e2e/testdata/ctarget/ctarget.c");
    gprobe_e2e::cc::build(&src, &dir.join("ctarget"), &["-g"], None)
}

/// A ctarget that sleeps before its calls, killed (by pid) when dropped.
struct Sleeping(std::process::Child);

impl Sleeping {
    fn start(bin: &std::path::Path) -> Self {
        let child = std::process::Command::new(bin)
            .args(["-delay-ms", "60000", "-n", "1"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Until it has exec'd and mapped its libraries.
        let t0 = std::time::Instant::now();
        while !std::fs::read_to_string(format!("/proc/{}/maps", child.id()))
            .unwrap_or_default()
            .contains("libc.so")
        {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Sleeping(child)
    }
}

impl Drop for Sleeping {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn symbols_of_a_process_list_only_libraries_with_something_to_list() {
    let dir = gprobe_e2e::go::TempDir::new("cli-symbols-pid");
    let bin = ctarget(dir.path());
    let p = Sleeping::start(&bin);
    let pid = p.0.id().to_string();
    let list = |extra: &[&str]| {
        let o = std::process::Command::new(gprobe_bin())
            .args(["symbols", "--pid", &pid])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    // libc has an `add`-less symbol table: with a filter only the executable has a match.
    let out = list(&["--filter", "^add$"]);
    let headers: Vec<&str> = out.lines().filter(|l| l.starts_with("# /")).collect();
    assert_eq!(headers.len(), 1, "{out}");
    assert!(
        headers[0].starts_with(&format!("# {}:", bin.display())),
        "{out}"
    );
    assert!(out.contains("\nadd  int add(int a, int b)\n"), "{out}");
    assert!(
        out.contains("more mapped libraries have nothing to list that matches --filter"),
        "{out}"
    );
    // Without one, a library is listed only with its USDT probes.
    let out = list(&[]);
    let sections: Vec<&str> = out.split("\n\n").skip(1).collect();
    for s in &sections {
        assert!(
            s.starts_with("# ") && (s.contains("\nusdt ") || s.contains("nothing to list")),
            "a library with nothing listed:\n{s}"
        );
    }
    eprintln!("{out}");
}

#[test]
fn check_resolves_every_probe_without_attaching_and_lists_each_problem_once() {
    let dir = gprobe_e2e::go::TempDir::new("cli-check");
    let bin = ctarget(dir.path());
    let good = SpecBuilder::new("good")
        .executable(&bin)
        .probe(ProbeBuilder::new("add").capture(["a", "b", "r0"]).latency())
        .probe(ProbeBuilder::new("greet").capture(["name", "buf[:len]"]))
        .probe(ProbeBuilder::usdt("ctarget:order").capture(["arg0"]))
        .yaml();
    let bad = SpecBuilder::new("bad")
        .executable(&bin)
        .probe(ProbeBuilder::new("no_such_function"))
        .probe(ProbeBuilder::new("add").capture(["c"]))
        .probe(ProbeBuilder::usdt("ctarget:nothing"))
        .probe(ProbeBuilder::new("sub").capture(["a", "a"]))
        .yaml();
    let good_path = dir.path().join("good.yaml");
    let bad_path = dir.path().join("bad.yaml");
    std::fs::write(&good_path, good).unwrap();
    std::fs::write(&bad_path, bad).unwrap();
    // Without the capabilities to load BPF programs: check needs none.
    let check = |args: &[&str]| {
        let o = std::process::Command::new("setpriv")
            .args(["--bounding-set", "-bpf,-perfmon,-sys_admin", "--"])
            .arg(gprobe_bin())
            .arg("check")
            .args(args)
            .output()
            .expect("setpriv (util-linux)");
        (
            o.status.code(),
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let (g, b) = (good_path.to_str().unwrap(), bad_path.to_str().unwrap());
    let bin_s = bin.to_str().unwrap();

    let (code, out, err) = check(&[g, "--binary", bin_s]);
    assert_eq!(code, Some(0), "{out}{err}");
    // Without CAP_BPF the kernel's features cannot be tried: said in one line.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("kernel ")
            && lines[0].ends_with(
                ": not checked: loading a BPF program was refused here: gprobe needs root \
                 with CAP_BPF and CAP_PERFMON"
            ),
        "{out}"
    );
    assert_eq!(
        lines[1],
        format!("ok: 1 ProbeSpec (3 probes); 3 probes resolved in {bin_s}")
    );

    let (code, out, err) = check(&[g, b, "--binary", bin_s]);
    assert_eq!(code, Some(1), "{out}{err}");
    let problems: Vec<&str> = out.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(problems.len(), 4, "{out}");
    for (what, needle) in [
        ("the missing function", "bad / no_such_function in "),
        ("the missing parameter", "bad / add in "),
        ("the missing USDT probe", "bad / usdt:ctarget:nothing in "),
        (
            "the duplicate capture",
            "bad / sub: spec.probes[3].capture[1]",
        ),
    ] {
        assert_eq!(
            problems.iter().filter(|p| p.contains(needle)).count(),
            1,
            "{what}: {out}"
        );
    }
    assert!(
        out.ends_with(&format!(
            "4 problems in 2 ProbeSpecs (7 probes); 3 probes resolved in {bin_s}\n"
        )),
        "{out}"
    );

    // A process: its executable, and whether the spec selects it.
    let p = Sleeping::start(&bin);
    let pid = p.0.id().to_string();
    let (code, out, err) = check(&[g, "--pid", &pid]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!("3 probes resolved in process {pid}")),
        "{out}"
    );
    let other = SpecBuilder::new("other")
        .executable("/usr/bin/elsewhere")
        .probe(ProbeBuilder::new("add"))
        .yaml();
    let other_path = dir.path().join("other.yaml");
    std::fs::write(&other_path, other).unwrap();
    let (code, out, _) = check(&[other_path.to_str().unwrap(), "--pid", &pid]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("error: other: does not select process {pid}")),
        "{out}"
    );
    // Nothing was placed in it: `add`'s first byte is its own, not a breakpoint.
    let o = std::process::Command::new(gprobe_bin())
        .args(["symbols", bin_s, "--verbose", "--filter", "^add$"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let entry = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("entry=0x"))
        .unwrap_or_else(|| panic!("no entry= in {text}"));
    let offset = u64::from_str_radix(entry, 16).unwrap();
    let byte = gprobe_e2e::procmem::byte_at_file_offset(p.0.id(), offset);
    let file_byte = std::fs::read(&bin).unwrap()[offset as usize];
    assert_eq!(byte, file_byte, "the checked process's code is unchanged");
    assert_ne!(byte, 0xcc);
}

/// A spec with one probe of `ctarget`'s `greet(name, buf, len)`, with the fields `probe`
/// (YAML lines) and the `limits`.
fn spec_of(probe: &str, limits: &str) -> String {
    format!(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: t}}\nspec:\n  \
         selector: {{executable: \"**/ctarget\"}}\n  probes:\n    - symbol: greet\n      \
         signature: \"size_t greet(const char *name, const char *buf, size_t len)\"\n{probe}\n  \
         limits: {{maxStringBytes: 8{limits}}}\n"
    )
}

#[test]
fn bad_conditions_and_values_are_refused_by_check_and_run_without_a_crash() {
    use std::os::unix::process::ExitStatusExt;
    let dir = gprobe_e2e::go::TempDir::new("cli-bad-when");
    let bin = ctarget(dir.path());
    let terms =
        |n: usize| -> Vec<String> { (0..n).map(|i| format!("len == {}", 100_000 + i)).collect() };
    let cases: Vec<(&str, String, &str)> = vec![
        // Once a stack overflow (exit 134) in check and run.
        (
            "parens",
            format!(
                "      when: '{}len == 1{}'",
                "(".repeat(20_000),
                ")".repeat(20_000)
            ),
            "spec.probes[0].when: is 40008 characters long; a condition has at most 4096",
        ),
        (
            "nots",
            format!("      when: '{}len == 1'", "!".repeat(200_000)),
            "spec.probes[0].when: is 200008 characters long; a condition has at most 4096",
        ),
        (
            "deep",
            format!("      when: '{}len == 1{}'", "(".repeat(33), ")".repeat(33)),
            "spec.probes[0].when: nests `(` and `!` more than 32 deep",
        ),
        (
            "long",
            format!("      when: 'len == 1{}'", " ".repeat(4207)),
            "spec.probes[0].when: is 4215 characters long; a condition has at most 4096",
        ),
        // Once `ok` without a binary.
        (
            "literal",
            format!(
                "      when: 'len == 1 || hasPrefix(name, \"{}\")'",
                "x".repeat(65)
            ),
            "\")`: the string is 65 bytes; at most 64 can be compared",
        ),
        (
            "steps",
            format!("      when: '!!({})'", terms(16).join(" || ")),
            "spec.probes[0].when: has 33 steps (terms and `&&`, `||`, `!`); at most 32",
        ),
        // Once without the field.
        (
            "sample",
            "      sample: \"abc\"".into(),
            "spec.probes[0].sample: invalid type: string \"abc\", expected f64",
        ),
        (
            "when-seq",
            "      when: [a]".into(),
            "spec.probes[0].when: invalid type: sequence, expected a string",
        ),
        // Once accepted: the value read is never 9 bytes long.
        (
            "prefix",
            "      when: 'hasPrefix(name, \"abcdefghX\")'".into(),
            "`hasPrefix(name, \"abcdefghX\")` can never hold: its string is 9 bytes, and \
             spec.limits.maxStringBytes reads 8",
        ),
        // Once "expected an integer" and "expected a duration".
        (
            "nil-first",
            "      when: 'nil == len'".into(),
            "`nil` is a literal: write the value first, as in `len == nil`",
        ),
        (
            "duration",
            "      latency: true\n      when: 'duration > 18446744073709551615ns'".into(),
            "the duration is out of range",
        ),
    ];
    let mut files = Vec::new();
    for (name, probe, says) in &cases {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, spec_of(probe, "")).unwrap();
        files.push((path, *says));
    }
    let overhead = dir.path().join("overhead.yaml");
    std::fs::write(
        &overhead,
        spec_of("      latency: true", ", maxOverheadPercent: \"abc\""),
    )
    .unwrap();
    files.push((
        overhead,
        "spec.limits.maxOverheadPercent: invalid type: string \"abc\", expected f64",
    ));
    let bin_s = bin.to_str().unwrap();
    for (path, says) in &files {
        let p = path.to_str().unwrap();
        for args in [vec!["check", p], vec!["check", p, "--binary", bin_s]] {
            let o = std::process::Command::new(gprobe_bin())
                .args(&args)
                .output()
                .unwrap();
            let out = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(o.status.signal(), None, "{args:?}: {out}");
            assert_eq!(o.status.code(), Some(1), "{args:?}: {out}");
            assert_eq!(out.matches(says).count(), 1, "{args:?}: {says}: {out}");
            // A long condition is quoted by an excerpt, not whole.
            assert!(
                out.len() < 2000,
                "{args:?}: {} bytes: {out:.2000}",
                out.len()
            );
        }
        // `gprobe run` reports the same and runs no probe (it stops at --duration).
        let o = std::process::Command::new(gprobe_bin())
            .args(["run", p, "--duration", "1s"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.signal(), None, "run {p}: {err}");
        assert!(err.contains(says), "run {p}: {says}: {err}");
    }
}
