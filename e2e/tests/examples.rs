//! Every ProbeSpec under examples/ is one gprobe loads and finds nothing wrong with (the
//! CRD schema check is in e2e/chart_test.sh). No root needed.

use gprobe_e2e::go::repo_root;

#[test]
fn every_example_probespec_loads_and_validates() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("examples")).unwrap() {
        let path = entry.unwrap().path().join("probespec.yaml");
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let specs = gprobe_crds::load_specs(&text, &path.display().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for spec in &specs {
            let issues = gprobe_crds::validate_spec(spec);
            assert!(issues.is_empty(), "{}: {issues:?}", path.display());
            assert!(
                spec.spec.selector.executable.is_some(),
                "{}: local-mode examples select by executable",
                path.display()
            );
        }
        seen.push(path.parent().unwrap().file_name().unwrap().to_owned());
    }
    seen.sort();
    let seen: Vec<_> = seen.iter().map(|s| s.to_string_lossy()).collect();
    for want in ["jvm", "postgres", "python", "redis"] {
        assert!(seen.iter().any(|s| s == want), "examples/{want}: {seen:?}");
    }
}
