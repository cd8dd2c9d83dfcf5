//! Compiles the BPF programs in agent-ebpf/ with clang, and measures the event ABI header's
//! struct layouts with the host compiler so the Rust mirror can be checked at compile time.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const STRUCTS: &[(&str, &[&str])] = &[
    ("gp_loc", &["kind", "reg", "off"]),
    (
        "gp_capture",
        &[
            "kind",
            "size",
            "max_len",
            "flags",
            "n_hops",
            "max_elems",
            "loc",
            "hops",
            "off",
            "table",
        ],
    ),
    ("gp_err_key", &["table", "hash"]),
    ("gp_err_type", &["n", "kind", "off"]),
    (
        "gp_probe_cfg",
        &[
            "func_id",
            "kind",
            "n_captures",
            "flags",
            "jcc",
            "rate_limit",
            "cost_ns",
            "aux",
            "sample_bound",
            "caps",
        ],
    ),
    (
        "gp_event",
        &[
            "ts_ns",
            "call_id",
            "goroutine",
            "duration_ns",
            "pid",
            "tid",
            "probe_id",
            "kind",
            "data_len",
        ],
    ),
    ("gp_value", &["cap", "flags", "len", "full_len"]),
    (
        "gp_stats",
        &[
            "hits",
            "emitted",
            "lost",
            "throttled",
            "unpaired",
            "too_deep",
            "incomplete",
            "filtered",
            "undecided",
        ],
    ),
    ("gp_control", &["holds_until_ns", "agent"]),
    ("gp_hold", &["since_ns", "holder", "kind", "ppid"]),
    ("gp_proc_stats", &["lost", "hold_failed", "released"]),
    ("gp_span_key", &["goroutine", "tgid"]),
    ("gp_site_key", &["tgid", "addr"]),
    ("gp_inflight_key", &["goroutine", "tgid", "func_id"]),
    (
        "gp_inflight",
        &["depth", "overflow", "ts", "call_id", "fbits"],
    ),
    ("gp_out", &["trace", "span", "map", "writer", "ts", "flags"]),
    ("gp_out_key", &["writer", "tgid"]),
    (
        "gp_span_ctx",
        &[
            "depth",
            "flags",
            "trace",
            "span",
            "call_id",
            "parent_g",
            "parent_span",
        ],
    ),
    ("gp_proc_event", &["kind", "pid", "ppid", "hold"]),
    ("gp_proc_exec", &["ev", "ino", "filename"]),
    (
        "gp_filter_term",
        &["test", "flags", "len", "cap", "vsize", "lit", "str"],
    ),
    ("gp_filter", &["n_terms", "n_ops", "n_out", "ops", "terms"]),
    ("gp_fval", &["word", "len", "state", "n", "bytes"]),
    ("gp_fvals", &["v"]),
    ("gp_durations", &["n"]),
];

/// How every BPF source is compiled: the programs, and each header alone (`check_headers`).
const BPF_FLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-target",
    "bpf",
    "-mcpu=v3",
    "-D__TARGET_ARCH_x86",
    "-Wall",
    "-Werror",
    "-I/usr/include/x86_64-linux-gnu",
];

fn clang() -> Result<PathBuf> {
    if let Some(c) = std::env::var_os("CLANG") {
        return Ok(PathBuf::from(c));
    }
    for c in ["clang-19", "clang"] {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(PathBuf::from(c));
        }
    }
    bail!(
        "clang was not found: gprobe's BPF programs are C compiled by clang. \
         Install it with `apt-get install clang-19 llvm-19 libbpf-dev linux-libc-dev` \
         (or run scripts/setup.sh), or set CLANG=/path/to/clang"
    )
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// Compiles every header of agent-ebpf on its own, included twice in an otherwise empty
/// file, with the programs' flags: a header that uses what it does not include (and so
/// compiles only after whatever its includer defined first) or lacks an include guard fails
/// the build here, naming itself. Unused functions are no error here: a header's functions
/// are for its includers.
fn check_headers(clang: &Path, ebpf: &Path, out: &Path) -> Result<()> {
    let mut headers = Vec::new();
    // src/ and its folders (the auxiliary probes' own code: src/propagate/, src/loader/).
    let mut dirs = vec![ebpf.join("include"), ebpf.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "h") {
                headers.push(path);
            }
        }
    }
    headers.sort();
    // All at once: each takes a fraction of a second, most of it clang starting.
    let mut checks = Vec::new();
    for (i, header) in headers.iter().enumerate() {
        let file = out.join(format!("header_check_{i}.c"));
        std::fs::write(
            &file,
            format!("#include \"{0}\"\n#include \"{0}\"\n", header.display()),
        )?;
        let child = Command::new(clang)
            .args(BPF_FLAGS)
            .args(["-Wno-unused-function", "-fsyntax-only"])
            .arg("-I")
            .arg(ebpf.join("include"))
            .arg("-I")
            .arg(ebpf.join("src"))
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running clang (header check)")?;
        checks.push((header, child));
    }
    let mut failed = String::new();
    for (header, child) in checks {
        let res = child
            .wait_with_output()
            .context("running clang (header check)")?;
        if !res.status.success() {
            failed += &format!(
                "\n{} does not compile on its own: it must include what it uses and have an \
                 include guard:\n{}",
                header.display(),
                String::from_utf8_lossy(&res.stderr)
            );
        }
    }
    if !failed.is_empty() {
        bail!("BPF headers that do not stand alone:{failed}");
    }
    Ok(())
}

fn main() -> Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let ebpf = manifest
        .parent()
        .context("workspace root")?
        .join("agent-ebpf");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let include = ebpf.join("include");
    println!("cargo:rerun-if-changed={}", ebpf.display());
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = clang()?;

    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        bail!(
            "bpf/bpf_helpers.h was not found: install it with `apt-get install libbpf-dev` (or \
            run scripts/setup.sh)"
        );
    }
    // The uprobe programs (loaded by aya) in three builds: with bpf_loop (5.17+); without
    // it for older kernels (gprobe_noloop: Go maps not searched); and without BPF cookies
    // or atomic fetch either, for kernels before 5.15 (gprobe_nocookie: probes found by
    // their address, agent-ebpf/src/cookie.h). The process hooks (loaded by attach/hooks.rs)
    // in two builds: with kfuncs (6.13+), and without them for older kernels (procs_compat:
    // holds released by the guardian process, forks not held). And the filter evaluator's
    // test program (attach/filter_run.rs).
    let objects: [(&str, &str, &[&str]); 6] = [
        ("gprobe", "gprobe", &[]),
        ("gprobe", "gprobe_noloop", &["-DGP_NO_BPF_LOOP"]),
        (
            "gprobe",
            "gprobe_nocookie",
            &["-DGP_NO_BPF_LOOP", "-DGP_NO_COOKIE"],
        ),
        ("procs", "procs", &[]),
        ("procs", "procs_compat", &["-DGP_NO_KFUNCS"]),
        ("filter_test", "filter_test", &[]),
    ];
    for (name, output, define) in objects {
        run(
            Command::new(&clang)
                .args(BPF_FLAGS)
                .args(define)
                .arg("-I")
                .arg(&include)
                // A header in a folder of src/ includes the shared ones by name ("maps.h").
                .arg("-I")
                .arg(ebpf.join("src"))
                .arg("-c")
                .arg(ebpf.join(format!("src/{name}.bpf.c")))
                .arg("-o")
                .arg(out.join(format!("{output}.bpf.o"))),
            "clang (BPF programs)",
        )?;
    }

    check_headers(&clang, &ebpf, &out)?;

    // Layout probe: a host program printing each struct's size and field offsets.
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"gprobe.h\"\nint main(void){\n",
    );
    for (s, fields) in STRUCTS {
        let up = s.to_uppercase();
        c += &format!("printf(\"pub const SIZEOF_{up}: usize = %zu;\\n\", sizeof(struct {s}));\n");
        for f in *fields {
            let uf = f.to_uppercase();
            c += &format!("printf(\"pub const OFFSETOF_{up}_{uf}: usize = %zu;\\n\", offsetof(struct {s}, {f}));\n");
        }
    }
    for k in [
        "GP_MAX_CAPTURES",
        "GP_MAX_STR",
        "GP_MAX_PROBES",
        "GP_CFG_SLOT_BITS",
        "GP_MAX_BUDGET_SLOTS",
        "GP_MAX_DEPTH",
        "GP_DATA_MASK",
        "GP_SCRATCH",
        "GP_MAX_HOPS",
        "GP_MAX_ELEMS",
        "GP_MAX_ELEM_STR",
        "GP_PATH_MAX",
        "GP_COMM_LEN",
        "GP_CFG_WORDS",
        "GP_CFG_ONE_BYTES",
        "GP_CFG_PAIR_BY_THREAD",
        "GP_EV_AFTER_LOSS",
        "GP_CAP_HEADER",
        "GP_CAP_SPAN",
        "GP_CFG_PROPAGATE",
        "GP_CFG_NEWPROC",
        "GP_PROBE_HTTP_OUT",
        "GP_PROBE_HTTP_WRITE",
        "GP_PROBE_HTTP_CONN",
        "GP_PROBE_HTTP_DONE",
        "GP_PROBE_FREED",
        "GP_MAP_HMAP",
        "GP_MAP_SWISS",
        "GP_MAP_SWISS_SPLIT",
        "GP_CAPF_LEN_SIGNED",
        "GP_VAL_INVALID",
        "GP_CAP_ERROR",
        "GP_ERR_NODES",
        "GP_ERR_FIELDS",
        "GP_ERR_STRS",
        "GP_EF_STR",
        "GP_EF_IFACE",
        "GP_EF_WORD",
        "GP_HOLD_EXEC",
        "GP_HOLD_FORK",
        "GP_HOLD_LOADER",
        "GP_FILTER_TERMS",
        "GP_FILTER_OPS",
        "GP_FILTER_STR",
        "GP_FT_EQ",
        "GP_FT_NE",
        "GP_FT_LT",
        "GP_FT_LE",
        "GP_FT_GT",
        "GP_FT_GE",
        "GP_FT_STR_EQ",
        "GP_FT_STR_NE",
        "GP_FT_PREFIX",
        "GP_FT_NIL",
        "GP_FT_NOT_NIL",
        "GP_FT_TRUE",
        "GP_FT_FALSE",
        "GP_FTF_SIGNED",
        "GP_FTF_STR",
        "GP_FTF_NIL_ZERO",
        "GP_DUR_BUCKETS",
        "GP_FCAP_DURATION",
        "GP_FCAP_ENTRY",
        "GP_FCAP_NONE",
        "GP_CFG_FILTER",
        "GP_CFG_WHEN_RETURN",
        "GP_EV_FILTERED",
        "GP_FOP_NOT",
        "GP_FOP_AND",
        "GP_FOP_OR",
        "GP_TRUTH_FALSE",
        "GP_TRUTH_TRUE",
        "GP_TRUTH_UNKNOWN",
        "GP_FV_UNKNOWN",
        "GP_FV_KNOWN",
        "GP_FV_UNREADABLE",
    ] {
        c += &format!("printf(\"pub const {k}: usize = %d;\\n\", {k});\n");
    }
    c += "return 0;}\n";
    let probe_c = out.join("layout_probe.c");
    let probe_bin = out.join("layout_probe");
    std::fs::write(&probe_c, c)?;
    run(
        Command::new(&clang)
            .arg("-I")
            .arg(&include)
            .arg(&probe_c)
            .arg("-o")
            .arg(&probe_bin),
        "clang (layout probe)",
    )?;
    let layout = run(&mut Command::new(&probe_bin), "layout probe")?;
    std::fs::write(out.join("c_layout.rs"), layout)?;
    Ok(())
}
