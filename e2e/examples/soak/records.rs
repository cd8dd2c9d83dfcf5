//! The calls on both sides: the records the agent delivered (its JSONL, read as it comes)
//! and what each process of the churn program said it did (its log).

use crate::{PROC_SPAN, SPEC};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::sync::{Arc, Mutex};

/// What each function returns (wrapping, as Go's int64 does).
pub fn expected(func: &str, i: i64) -> Option<i64> {
    Some(match func {
        "main.add" => i.wrapping_add(7),
        "main.double" => i.wrapping_mul(2),
        "main.square" => i.wrapping_mul(i),
        "main.negate" => i.wrapping_neg(),
        "main.mix" => i.wrapping_mul(31).wrapping_add(3),
        _ => return None,
    })
}

/// Records of one function of one process, as the agent delivered them.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub records: u64,
    pub argsum: i64,
    pub max_arg: i64,
}

/// The agent's records of the main spec, by process and function.
#[derive(Debug, Default)]
pub struct Records {
    /// By (process base, function).
    pub seen: HashMap<(i64, String), Seen>,
    pub total: u64,
    /// Records whose result is not the function of the argument.
    pub wrong: Vec<String>,
    pub other_specs: u64,
    pub unfinished: u64,
    pub malformed: u64,
}

pub fn read_records(out: impl std::io::Read, into: Arc<Mutex<Records>>) {
    for line in std::io::BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => {
                into.lock().unwrap().malformed += 1;
                continue;
            }
        };
        let mut r = into.lock().unwrap();
        if v["probe"] != SPEC {
            r.other_specs += 1;
            continue;
        }
        r.total += 1;
        if v["unfinished"].as_bool() == Some(true) {
            r.unfinished += 1;
        }
        let func = v["symbol"].as_str().unwrap_or("").to_string();
        let Some(i) = v["args"]["i"].as_i64() else {
            r.malformed += 1;
            continue;
        };
        if let Some(r0) = v["returns"]["r0"].as_i64() {
            if expected(&func, i) != Some(r0) && r.wrong.len() < 20 {
                r.wrong.push(line.clone());
            }
        }
        let e = r
            .seen
            .entry((i - i.rem_euclid(PROC_SPAN), func))
            .or_default();
        e.records += 1;
        e.argsum = e.argsum.wrapping_add(i);
        e.max_arg = e.max_arg.max(i);
    }
}

/// What a process of the churn program said it did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub calls: BTreeMap<String, (u64, i64)>,
    pub first_ns: i64,
    pub last_ns: i64,
}

pub fn reports(logs: &str) -> BTreeMap<i64, Report> {
    let mut out: BTreeMap<i64, Report> = BTreeMap::new();
    for line in logs.lines() {
        let mut words = line.split_whitespace();
        let Some(base) = words
            .next()
            .and_then(|w| w.strip_prefix("base="))
            .and_then(|b| b.parse::<i64>().ok())
        else {
            continue;
        };
        let what = words.next().unwrap_or("");
        let kv: BTreeMap<&str, i64> = words
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect();
        let r = out.entry(base).or_default();
        if what == "done" {
            r.first_ns = kv.get("first").copied().unwrap_or(0);
            r.last_ns = kv.get("last").copied().unwrap_or(0);
        } else if let (Some(c), Some(s)) = (kv.get("calls"), kv.get("argsum")) {
            r.calls.insert(what.to_string(), (*c as u64, *s));
        }
    }
    out
}
