//! A service of the test program (stopped by pid when dropped), waiting for gprobe to
//! attach to it, and reading the ids and values of records and traceparents.

use gprobe_e2e::harness::{program_lines, Gprobe};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A service of the test program, stopped (by pid) when dropped.
pub struct Service {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Service {
    pub fn start(bin: &Path, args: &[&str], log: PathBuf) -> Service {
        let _ = std::fs::remove_file(&log);
        let child = Command::new(bin)
            .args(args)
            .arg("-log")
            .arg(&log)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        // Owned from here: stopped (by pid) on any failure below.
        let mut s = Service {
            child,
            port: 0,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&s.log).unwrap_or_default();
            if let Some(l) = program_lines(&text, "listening ").first() {
                s.port = l["port"].parse().unwrap();
                return s;
            }
            assert!(Instant::now() < deadline, "{args:?} never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn lines(&self, prefix: &str) -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(&self.log).unwrap();
        program_lines(&text, prefix)
            .into_iter()
            .map(|l| (l["id"].clone(), l["traceparent"].clone()))
            .collect()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn id(r: &Value, key: &str) -> Option<String> {
    r.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A captured value as the program prints it: a string as it is, a number in decimal.
pub fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// `(trace id, span id)` of a traceparent, or None for "-".
pub fn ctx(tp: &str) -> Option<(String, String)> {
    let p: Vec<&str> = tp.split('-').collect();
    (p.len() >= 4).then(|| (p[1].to_string(), p[2].to_string()))
}

/// Waits until gprobe has attached `probes` probes to `s`.
pub fn attached(g: &Gprobe, s: &Service, probes: usize) {
    let tag = format!("pid {})", s.pid());
    g.wait_for_stderr(
        |e| e.matches(&tag).count() >= probes,
        Duration::from_secs(30),
    );
}
