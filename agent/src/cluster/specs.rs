//! ProbeSpecs from a folder of YAML files (`--spec-dir`): for nodes without the API server
//! and for tests. The folder is read again every `--spec-dir-interval` (1 s by default);
//! changes become spec events.

use crate::engine::driver::SpecEvent;
use gprobe_crds::{load_specs, ProbeSpec};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

fn read_all(dir: &PathBuf) -> Vec<ProbeSpec> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect(),
        Err(e) => {
            tracing::warn!("reading --spec-dir {}: {e}", dir.display());
            return Vec::new();
        }
    };
    files.sort();
    let mut out = Vec::new();
    for f in files {
        match std::fs::read_to_string(&f) {
            Ok(text) => match load_specs(&text, &f.display().to_string()) {
                Ok(specs) => out.extend(specs.into_iter().map(|mut s| {
                    s.metadata.namespace.get_or_insert_with(|| "default".into());
                    s
                })),
                Err(e) => tracing::error!("{e}"),
            },
            Err(e) => tracing::warn!("reading {}: {e}", f.display()),
        }
    }
    out
}

pub async fn watch_dir(dir: PathBuf, every: Duration, tx: mpsc::Sender<SpecEvent>) {
    // ProbeSpec has no PartialEq (kube derives it): compare serialized forms.
    let mut last: Option<String> = None;
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = read_all(&dir);
        let text = serde_json::to_string(&now).unwrap_or_default();
        if last.as_ref() != Some(&text) {
            if tx.send(SpecEvent::Resync(now)).await.is_err() {
                return;
            }
            last = Some(text);
        }
    }
}
