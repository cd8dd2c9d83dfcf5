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
            "rate_limit",
            "aux",
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
        ],
    ),
    ("gp_control", &["holds_until_ns", "agent"]),
    ("gp_hold", &["since_ns", "holder", "kind", "ppid"]),
    ("gp_proc_stats", &["lost", "hold_failed", "released"]),
    ("gp_span_key", &["goroutine", "tgid"]),
    ("gp_out", &["trace", "span", "map", "writer", "ts"]),
    ("gp_out_key", &["writer", "tgid"]),
    (
        "gp_span_ctx",
        &[
            "depth",
            "trace",
            "span",
            "call_id",
            "parent_g",
            "parent_span",
        ],
    ),
    ("gp_proc_event", &["kind", "pid", "ppid", "hold"]),
    ("gp_proc_exec", &["ev", "ino", "filename"]),
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
        bail!("bpf/bpf_helpers.h was not found: install it with `apt-get install libbpf-dev` (or run scripts/setup.sh)");
    }
    // The uprobe programs (loaded by aya) and the process hooks (loaded by attach/hooks.rs).
    for name in ["gprobe", "procs"] {
        run(
            Command::new(&clang)
                .args([
                    "-O2",
                    "-g",
                    "-target",
                    "bpf",
                    "-mcpu=v3",
                    "-D__TARGET_ARCH_x86",
                    "-Wall",
                    "-Werror",
                ])
                .arg("-I")
                .arg(&include)
                .arg("-I/usr/include/x86_64-linux-gnu")
                .arg("-c")
                .arg(ebpf.join(format!("src/{name}.bpf.c")))
                .arg("-o")
                .arg(out.join(format!("{name}.bpf.o"))),
            "clang (BPF programs)",
        )?;
    }

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
