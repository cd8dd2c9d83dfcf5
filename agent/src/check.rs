//! `gprobe check`: ProbeSpecs checked without attaching anything. Every spec is validated
//! as `gprobe run` would; against a binary (`--binary`) or a running process (`--pid`)
//! every probe is also planned as the engine plans it: symbol or USDT probe found,
//! signature read, each capture located. No BPF program is loaded.

use crate::discover::{inspect, MappedFile, ProcError, ProcInfo};
use crate::engine::select::Selector;
use crate::engine::LibraryGlob;
use crate::resolve::planner::plan_probe;
use crate::resolve::{Binary, ResolveError};
use crate::util::printable;
use gprobe_crds::{load_specs, validate_spec, Probe, ProbeSpec};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CheckError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Process(#[from] ProcError),
}

/// What to resolve the probes in.
#[derive(Debug, Clone)]
pub enum Target {
    /// Validation only.
    None,
    Binary(PathBuf),
    Pid(u32),
}

/// The outcome: problems (each once; any makes `gprobe check` fail) and notes (what was
/// not checked, or what will work differently than it may seem).
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<String>,
    pub notes: Vec<String>,
    pub specs: usize,
    pub probes: usize,
    /// Probes planned in a binary without a problem.
    pub resolved: usize,
}

impl Report {
    fn problem(&mut self, p: String) {
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
}

/// Where the probes of a spec go: the executable (a path valid from here, and as shown),
/// and in a process its mapped libraries.
struct Resolved {
    exe: Result<Binary, ResolveError>,
    shown: PathBuf,
    process: Option<ProcInfo>,
}

fn read_specs(files: &[PathBuf], report: &mut Report) -> Vec<ProbeSpec> {
    let mut specs: Vec<ProbeSpec> = Vec::new();
    for f in files {
        let text = match std::fs::metadata(f).and_then(|m| {
            if m.len() > gprobe_crds::MAX_SPEC_BYTES as u64 {
                Ok(None)
            } else {
                std::fs::read_to_string(f).map(Some)
            }
        }) {
            Ok(Some(t)) => t,
            Ok(None) => {
                report.problem(
                    gprobe_crds::LoadError::TooLarge {
                        source_name: f.display().to_string(),
                        bytes: std::fs::metadata(f).map_or(0, |m| m.len() as usize),
                    }
                    .to_string(),
                );
                continue;
            }
            Err(source) => {
                report.problem(
                    CheckError::Read {
                        path: f.clone(),
                        source,
                    }
                    .to_string(),
                );
                continue;
            }
        };
        match load_specs(&text, &f.display().to_string()) {
            Ok(list) => {
                for s in list {
                    if specs.iter().any(|o| o.display_name() == s.display_name()) {
                        report.problem(format!(
                            "{}: a ProbeSpec of this name is already loaded; names must be unique \
                            (is the same file given twice?)",
                            s.display_name()
                        ));
                    } else {
                        specs.push(s);
                    }
                }
            }
            Err(e) => report.problem(e.to_string()),
        }
    }
    specs
}

/// Checks `files` (and resolves their probes in `target`).
pub fn check(files: &[PathBuf], target: &Target) -> Result<Report, CheckError> {
    let mut report = Report::default();
    let specs = read_specs(files, &mut report);
    check_into(&specs, target, report)
}

/// Checks specs given whole (`gprobe trace`), and resolves their probes in `target`.
pub fn check_specs(specs: &[ProbeSpec], target: &Target) -> Result<Report, CheckError> {
    check_into(specs, target, Report::default())
}

fn check_into(
    specs: &[ProbeSpec],
    target: &Target,
    mut report: Report,
) -> Result<Report, CheckError> {
    let resolved = match target {
        Target::None => None,
        Target::Binary(p) => Some(Resolved {
            exe: Binary::open(p),
            shown: p.clone(),
            process: None,
        }),
        Target::Pid(pid) => {
            let info = inspect(*pid, None)?;
            Some(Resolved {
                exe: Binary::open_as(&info.exe_link, &info.exe),
                shown: info.exe.clone(),
                process: Some(info),
            })
        }
    };
    if let Some(Resolved { exe: Err(e), .. }) = &resolved {
        report.problem(e.to_string());
    }
    for spec in specs {
        check_spec(spec, resolved.as_ref(), &mut report);
    }
    if resolved.is_none() && report.probes > 0 {
        report.note(
            "symbols, signatures and captures were not checked: give --binary PATH or --pid PID"
                .into(),
        );
    }
    Ok(report)
}

fn check_spec(spec: &ProbeSpec, resolved: Option<&Resolved>, report: &mut Report) {
    let name = spec.display_name();
    report.specs += 1;
    report.probes += spec.spec.probes.len();
    let issues = validate_spec(spec);
    let mut invalid = BTreeSet::new();
    for i in &issues {
        match i.probe {
            None => report.problem(format!("{name}: {i}")),
            Some(p) => {
                invalid.insert(p);
                report.problem(format!("{name} / {}: {i}", spec.spec.probes[p].point()));
            }
        }
    }
    if issues.iter().any(|i| i.probe.is_none()) {
        return;
    }
    let Ok(selector) = Selector::new(spec, None) else {
        // validate_spec reports bad globs.
        return;
    };
    if let Some(why) = crate::local::selects_nothing_locally(spec) {
        report.note(format!("{why} (fine for cluster mode)"));
    }
    let Some(r) = resolved else { return };
    let shown = printable(&r.shown.to_string_lossy()).into_owned();
    match &r.process {
        Some(info) if !selector.selects(info, None) && !selector.needs_container() => report
            .problem(format!(
                "{name}: does not select process {} ({shown}): check selector.executable {:?}",
                info.pid,
                selector.executable_pattern().unwrap_or("")
            )),
        None => {
            if let Some(g) = selector.executable_pattern() {
                let path = std::fs::canonicalize(&r.shown).unwrap_or_else(|_| r.shown.clone());
                let glob = gprobe_crds::glob::Glob::new(g).ok();
                if glob.is_some_and(|gl| {
                    !gl.matches(&r.shown.to_string_lossy()) && !gl.matches(&path.to_string_lossy())
                }) {
                    report.note(format!(
                        "{name}: selector.executable {g:?} does not match {shown}: `gprobe run` \
                        would not select a process running it from there"
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, probe) in spec.spec.probes.iter().enumerate() {
        if invalid.contains(&i) {
            continue;
        }
        let key = format!("{name} / {}", probe.point());
        match &probe.library {
            None => {
                let Ok(bin) = &r.exe else { continue };
                plan_in(bin, &key, &shown, probe, spec, report);
            }
            Some(lib) => check_library(&key, lib, probe, spec, r, report),
        }
    }
}

fn plan_in(
    bin: &Binary,
    key: &str,
    shown: &str,
    probe: &Probe,
    spec: &ProbeSpec,
    report: &mut Report,
) {
    match plan_probe(bin, probe, spec.spec.limits.max_string_bytes) {
        Ok(plan) => {
            report.resolved += 1;
            for w in &plan.warnings {
                report.note(format!("{key} in {shown}: {w}"));
            }
        }
        Err(e) => report.problem(format!("{key} in {shown}: {e}")),
    }
}

/// A probe with `library`: planned in each library of the process the glob matches (with
/// --pid), or in the file the glob names exactly (with --binary).
fn check_library(
    key: &str,
    lib: &str,
    probe: &Probe,
    spec: &ProbeSpec,
    r: &Resolved,
    report: &mut Report,
) {
    let Some(glob) = LibraryGlob::new(lib) else {
        return;
    };
    let files: Vec<(PathBuf, PathBuf)> = match &r.process {
        Some(info) => matching_libraries(info, &glob),
        None if lib.starts_with('/') && !lib.contains(['*', '?', '[']) => {
            vec![(PathBuf::from(lib), PathBuf::from(lib))]
        }
        None => {
            report.note(format!(
                "{key}: not checked: library {lib:?} is found among a process's mapped libraries \
                (give --pid PID, or an absolute library path)"
            ));
            return;
        }
    };
    if files.is_empty() {
        report.note(format!(
            "{key}: process {} has no library matching {lib:?} mapped now (gprobe run attaches it when it is loaded)",
            r.process.as_ref().map_or(0, |p| p.pid)
        ));
    }
    for (open, shown) in files {
        let shown = printable(&shown.to_string_lossy()).into_owned();
        match Binary::open_as(&open, Path::new(&shown)) {
            Ok(bin) => plan_in(&bin, key, &shown, probe, spec, report),
            Err(e) => report.problem(format!("{key}: {e}")),
        }
    }
}

/// The mapped libraries of `info` that `glob` matches: (a path valid from here, the path
/// the process sees).
fn matching_libraries(info: &ProcInfo, glob: &LibraryGlob) -> Vec<(PathBuf, PathBuf)> {
    info.libraries
        .iter()
        .filter(|m: &&MappedFile| glob.matches(&m.path))
        .map(|m| (info.host_path(&m.path), m.path.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const HEAD: &str = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\n";

    #[test]
    fn every_problem_of_the_specs_is_listed_once() {
        let dir = std::env::temp_dir().join(format!("gprobe-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = write(
            &dir,
            "good.yaml",
            &format!(
                "{HEAD}metadata: {{name: a}}\nspec:\n  selector: {{executable: /bin/x}}\n  \
                probes: [{{symbol: main.f, capture: [n]}}]\n"
            ),
        );
        let bad = write(
            &dir,
            "bad.yaml",
            &format!("{HEAD}metadata: {{name: b}}\nspec:\n  selector: {{executable: /bin/x}}\n  \
                probes:\n    - {{usdt: \"p:q\", latency: true}}\n    - {{symbol: main.g, capture: [x, x]}}\n"),
        );
        let files = vec![
            good.clone(),
            bad.clone(),
            good.clone(),
            dir.join("missing.yaml"),
        ];
        let r = check(&files, &Target::None).unwrap();
        assert_eq!(r.specs, 2, "{r:?}");
        assert_eq!(r.problems.len(), 4, "{:#?}", r.problems);
        let has = |p: &str| r.problems.iter().filter(|x| x.starts_with(p)).count();
        assert_eq!(
            has("b / usdt:p:q: spec.probes[0].latency"),
            1,
            "{:?}",
            r.problems
        );
        assert_eq!(
            has("b / main.g: spec.probes[1].capture[1]"),
            1,
            "{:?}",
            r.problems
        );
        assert_eq!(has("a: a ProbeSpec of this name is already loaded"), 1);
        assert_eq!(
            has(&format!(
                "reading {}: No such file or directory (os error 2)",
                dir.join("missing.yaml").display()
            )),
            1
        );
        assert!(r.notes[0].contains("give --binary PATH or --pid PID"));
        let r = check(&[good], &Target::None).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
