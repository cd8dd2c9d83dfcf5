//! The text parsers' fuzz targets (gprobe_crds::fuzzing) in every `cargo test`: each file of
//! `fuzz/regressions/<target>/` (inputs that once crashed a parser, kept when it was fixed)
//! goes through its target again; and the seeds the fuzzers start from are taken from real
//! examples: the `when:`, `signature:` and `capture:` of every ProbeSpec in examples/ and
//! the `gprobe trace` expressions of the README. With `GPROBE_FUZZ_SEEDS=DIR` the seeds are
//! also written to `DIR/<target>/` (scripts/fuzz.sh starts the fuzzers from them).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gprobe_crds::{fuzzing, load_specs};

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 5] = [
    ("when", fuzzing::when),
    ("go_signature", fuzzing::go_signature),
    ("c_signature", fuzzing::c_signature),
    ("capture", fuzzing::capture),
    ("oneliner", fuzzing::oneliner),
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn every_kept_crash_input_runs_through_its_target_again() {
    let mut replayed = 0;
    for (name, target) in TARGETS {
        let dir = repo_root().join("fuzz/regressions").join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                continue;
            }
            eprintln!("{name}: {}", p.display());
            // A parser that recurses without a bound overflows this thread's stack (2 MiB,
            // smaller than a main thread's), as the agent's tokio workers would.
            let data = std::fs::read(&p).unwrap();
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || target(&data))
                .unwrap()
                .join()
                .unwrap_or_else(|_| panic!("{name}: {} fails", p.display()));
            replayed += 1;
        }
    }
    assert!(replayed >= 5, "{replayed} text regression inputs replayed");
}

/// Every ProbeSpec file under examples/.
fn example_specs() -> Vec<gprobe_crds::ProbeSpec> {
    let mut out = Vec::new();
    let mut dirs = vec![repo_root().join("examples")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                let text = std::fs::read_to_string(&p).unwrap();
                if let Ok(specs) = load_specs(&text, &p.display().to_string()) {
                    out.extend(specs);
                }
            }
        }
    }
    out
}

/// The `gprobe trace '...'` expressions of the README, with their `--when`.
fn readme_oneliners() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let mut out = Vec::new();
    for line in readme.lines() {
        let Some(rest) = line.split("gprobe trace '").nth(1) else {
            continue;
        };
        let Some((expr, flags)) = rest.split_once('\'') else {
            continue;
        };
        let when = flags
            .split("--when '")
            .nth(1)
            .and_then(|w| w.split_once('\''))
            .map_or("", |(w, _)| w);
        out.push(format!("{expr}\n{when}"));
    }
    out
}

#[test]
fn the_seeds_are_real_examples_and_pass_their_targets() {
    let specs = example_specs();
    let mut seeds: Vec<(&str, BTreeSet<String>)> =
        TARGETS.iter().map(|(n, _)| (*n, BTreeSet::new())).collect();
    let mut add = |target: &str, s: String| {
        seeds
            .iter_mut()
            .find(|(n, _)| *n == target)
            .unwrap()
            .1
            .insert(s);
    };
    for spec in &specs {
        for p in &spec.spec.probes {
            if let Some(w) = &p.when {
                add("when", w.clone());
            }
            let sig = p.signature.clone().unwrap_or_default();
            if gprobe_crds::csig::is_go_signature(&sig) {
                add("go_signature", sig.clone());
            } else if !sig.is_empty() {
                add("c_signature", sig.clone());
            }
            for c in &p.capture {
                add("capture", format!("{sig}\n{c}"));
            }
        }
    }
    for o in readme_oneliners() {
        if let Some((_, w)) = o.split_once('\n').filter(|(_, w)| !w.is_empty()) {
            add("when", w.to_string());
        }
        add("oneliner", o);
    }
    let out = std::env::var_os("GPROBE_FUZZ_SEEDS").map(PathBuf::from);
    for ((name, target), (_, set)) in TARGETS.iter().zip(&seeds) {
        assert!(!set.is_empty(), "no seed for {name}");
        for (i, s) in set.iter().enumerate() {
            target(s.as_bytes());
            if let Some(dir) = &out {
                let d = dir.join(name);
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join(format!("example-{i}")), s).unwrap();
            }
        }
        eprintln!("{name}: {} seeds", set.len());
    }
}
