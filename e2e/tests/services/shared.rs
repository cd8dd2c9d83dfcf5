//! Requests that share one http.Header, made by calls on many goroutines at once: the
//! back service and the sharing client under gprobe, and what BPF keeps of them.

use crate::service::{attached, id, text, Service};
use gprobe_e2e::harness::{program_lines, Gprobe};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// Requests made inside calls per round, requests made outside any, rounds.
const SHARED: (usize, usize, usize) = (30, 10, 2);

/// Runs the back service and the sharing client under gprobe; checks each request's
/// traceparent (where written) and the counts; returns the summary's propagation.
pub fn run_shared(bin: &Path, spec: &str, extra: &[&str], what: &str) -> Value {
    let (calls, outside, rounds) = SHARED;
    let g = Gprobe::cmd(spec).args(extra).summary_file().start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let barrier = (calls + outside).to_string();
    let back = Service::start(
        bin,
        &["-role", "back", "-barrier", &barrier],
        dir.join("shared-back.log"),
    );
    attached(&g, &back, 1);
    let (n, o, r) = (calls.to_string(), outside.to_string(), rounds.to_string());
    let args = [
        "-role",
        "shared",
        "-backend",
        &back.url(),
        "-n",
        &n,
        "-outside",
        &o,
    ];
    let mut client = Command::new(bin)
        .args(args)
        .args(["-rounds", &r, "-linger"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: start the client: {e}"));
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut out = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        out += &line;
        out.push('\n');
        if line == "client done" {
            break;
        }
    }
    assert!(
        out.ends_with("client done\n"),
        "{what}: the client ended early:\n{out}"
    );
    // Every round trip returned, the client still runs: BPF keeps nothing of its requests.
    let pid = client.id();
    for map in ["requests", "conns"] {
        assert_eq!(
            bpf_map_entries_of(map, pid),
            0,
            "{what}: BPF map {map} still holds requests of the client"
        );
    }
    drop(client.stdin.take());
    assert!(
        client.wait().unwrap().success(),
        "{what}: the client failed"
    );
    let received = back.lines("back ");
    drop(back);
    let run = g.stop();
    assert!(run.status.success(), "{what}: {}", run.stderr);
    let sent: Vec<String> = program_lines(&out, "sent ")
        .into_iter()
        .map(|l| l["id"].clone())
        .collect();
    assert_eq!(sent.len(), (calls + outside) * rounds, "{what}");
    let summary = run.summary_json();
    let prop = summary["propagation"].clone();
    let made = (calls * rounds) as u64;
    assert_eq!(
        prop["requests"], made,
        "{what}: requests made in calls: {prop}"
    );
    assert_eq!(prop["incomplete"], 0, "{what}: {prop}");
    let dry_run = prop["dry_run"] == true;
    let kernel_writes = prop["error"].is_null() && !dry_run;
    if dry_run || kernel_writes {
        // Each request of a call found its own hand-off: none took another's, none was
        // left for a request outside the calls.
        assert_eq!(prop["written"], made, "{what}: {prop}");
    } else {
        assert_eq!(prop["written"], 0, "{what}: {prop}");
    }
    let calls_made = run.records_of("main.call");
    assert_eq!(
        calls_made.len(),
        calls * rounds,
        "{what}: every call recorded"
    );
    let handled = run.records_of("main.backHandler");
    assert_eq!(handled.len(), sent.len(), "{what}: every request handled");
    for line in &sent {
        let (i, from) = line.split_once('/').unwrap();
        let h = handled
            .iter()
            .find(|r| r["args"]["r.URL.RawQuery"] == format!("id={i}&from={from}").as_str())
            .unwrap_or_else(|| panic!("{what}: no handler record of {line}"));
        let c = calls_made
            .iter()
            .find(|r| text(&r["args"]["id"]) == i)
            .filter(|_| from == "call");
        match c.filter(|_| kernel_writes) {
            Some(c) => {
                let (ct, cs) = (id(c, "trace_id").unwrap(), id(c, "span_id").unwrap());
                assert_eq!(
                    received[line],
                    format!("00-{ct}-{cs}-01"),
                    "{what}: request {line} carries its own call's span"
                );
                assert_eq!(
                    (id(h, "trace_id"), id(h, "parent_span_id")),
                    (Some(ct), Some(cs)),
                    "{what}: {h}"
                );
            }
            None => {
                assert_eq!(
                    received[line], "-",
                    "{what}: request {line} carries nothing"
                );
                assert_eq!(id(h, "parent_span_id"), None, "{what}: {h} is a root");
            }
        }
    }
    prop
}

/// Entries of the BPF maps named `map` (gprobe's `requests` and `conns`: keys of a u64 then
/// the process's tgid) that belong to process `tgid`, read with bpftool.
fn bpf_map_entries_of(map: &str, tgid: u32) -> usize {
    let out = Command::new("bpftool")
        .args(["-j", "map", "dump", "name", map])
        .output()
        .expect("bpftool runs (scripts/setup.sh --test installs it)");
    assert!(out.status.success(), "bpftool map dump name {map}: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let byte = |b: &Value| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16);
    // One map: its entries; several of that name (other gprobe processes): each with its
    // entries under "elements".
    let entries: Vec<&Value> = v
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| match e["elements"].as_array() {
            Some(elements) => elements.iter().collect(),
            None => vec![e],
        })
        .collect();
    entries
        .into_iter()
        .filter(|e| {
            let key: Vec<u8> = e["key"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| byte(b).unwrap())
                .collect();
            u32::from_le_bytes(key[8..12].try_into().unwrap()) == tgid
        })
        .count()
}
