//! `gprobe run` on a real C program: Debian's redis-server, whose binary has no `.symtab`
//! and no DWARF, probed on `createStringObject` with a C prototype. Every argument of every
//! command a client sends goes through that function; the bytes gprobe captures must be
//! those arguments, and the values must be what redis itself then holds (GET).
//! Needs root (BPF) and the redis-server package (`scripts/setup.sh --test`).

use gprobe_e2e::go::TempDir;
use gprobe_e2e::harness::{require_program, require_trace, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REDIS: &str = "/usr/bin/redis-server";
const MAX_STRING: usize = 4096;

/// A redis-server on a loopback port, its files in a folder of the test; stopped by pid.
struct Redis {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Redis {
    fn start() -> Redis {
        let dir = TempDir::new("redis");
        // A port nobody listens on now; redis fails loudly (and the test with it) in the
        // unlikely case another process takes it before redis binds it.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(REDIS)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {REDIS}: {e}"));
        Redis {
            child,
            port,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Connects once redis listens (it may still be held at exec by gprobe, or starting).
    fn connect(&mut self) -> Client {
        let t0 = Instant::now();
        loop {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) {
                return Client {
                    reader: BufReader::new(s.try_clone().unwrap()),
                    writer: s,
                };
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("redis-server exited ({status}) before listening");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "redis-server did not listen on port {} in 20 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// A RESP client: commands as arrays of bulk strings, which redis parses argument by
/// argument into string objects.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

/// One RESP reply (the kinds these commands get).
#[derive(Debug, PartialEq)]
enum Reply {
    Status(String),
    Bulk(Option<Vec<u8>>),
    Int(i64),
}

impl Client {
    fn call(&mut self, args: &[&[u8]]) -> Reply {
        let mut msg = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            msg.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            msg.extend_from_slice(a);
            msg.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&msg).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Reply::Status(rest.to_string()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut buf = vec![0; n as usize + 2];
                self.reader.read_exact(&mut buf).unwrap();
                buf.truncate(n as usize);
                Reply::Bulk(Some(buf))
            }
            _ => panic!(
                "redis replied {line:?} to {:?}",
                String::from_utf8_lossy(args[0])
            ),
        }
    }
}

/// Keys and values of every shape the capture must keep byte for byte: empty, around
/// redis's 44-byte limit of embedded strings, with CR LF and spaces inside, UTF-8, longer
/// than the default 256-byte limit, and longer than the spec's limit (truncated).
fn pairs() -> Vec<(String, String)> {
    let mut v = vec![
        ("gprobe:empty".to_string(), String::new()),
        ("gprobe:one".into(), "x".into()),
        ("gprobe:44".into(), "e".repeat(44)),
        ("gprobe:45".into(), "r".repeat(45)),
        ("gprobe:crlf".into(), "line one\r\nline two\r\n".into()),
        ("gprobe:utf8".into(), "café ünïcode ✓".into()),
        (
            "gprobe:json".into(),
            r#"{"user":"ada","cart":[1,2,3]}"#.into(),
        ),
        (
            "gprobe:1000".into(),
            (0..1000).map(|i| (b'a' + (i % 26) as u8) as char).collect(),
        ),
        ("gprobe:long".into(), "L".repeat(MAX_STRING + 500)),
    ];
    for i in 0..20 {
        v.push((
            format!("gprobe:key:{i}"),
            format!("value-{i}-{}", "v".repeat(i)),
        ));
    }
    v
}

fn redis_exe() -> PathBuf {
    let redis = require_program("redis", REDIS, "redis-server");
    // /usr/bin/redis-server is a symlink: the process's executable is the file behind it.
    std::fs::canonicalize(&redis).unwrap_or_else(|e| panic!("{}: {e}", redis.display()))
}

fn spec(exe: &Path) -> String {
    SpecBuilder::new("redis-strings")
        .executable(exe)
        .probe(
            ProbeBuilder::new("createStringObject")
                .signature("robj *createStringObject(const char *ptr, size_t len)")
                .capture(["ptr[:len]", "len", "r0"]),
        )
        .events_per_second(0)
        .max_string_bytes(MAX_STRING as u32)
        .yaml()
}

#[test]
fn every_argument_redis_parses_is_captured_byte_for_byte() {
    require_trace("redis");
    let exe = redis_exe();
    let _guard = serial();
    let g = Gprobe::cmd(&spec(&exe)).summary_file().start();
    // Started after gprobe: held at exec until attached, so nothing it parses is missed.
    let mut redis = Redis::start();
    let mut client = redis.connect();

    let pairs = pairs();
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for (k, v) in &pairs {
        let args: [&[u8]; 3] = [b"SET", k.as_bytes(), v.as_bytes()];
        assert_eq!(client.call(&args), Reply::Status("OK".into()));
        sent.extend(args.iter().map(|a| a.to_vec()));
    }
    // What redis holds now is its own record of what it was sent.
    for (k, v) in &pairs {
        let args: [&[u8]; 2] = [b"GET", k.as_bytes()];
        let held = client.call(&args);
        assert_eq!(held, Reply::Bulk(Some(v.as_bytes().to_vec())), "GET {k}");
        sent.extend(args.iter().map(|a| a.to_vec()));
    }
    let args: [&[u8]; 1] = [b"DBSIZE"];
    assert_eq!(client.call(&args), Reply::Int(pairs.len() as i64));
    sent.extend(args.iter().map(|a| a.to_vec()));

    let pid = redis.pid();
    let run = g.stop();
    drop(client);
    drop(redis);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("pid {pid})")),
        "attached to redis {pid}:\n{}",
        run.stderr
    );

    let ours: Vec<Value> = run
        .records_of("createStringObject")
        .into_iter()
        .filter(|r| r["pid"] == pid)
        .collect();
    // Startup creates shared strings first; the client's commands follow, in order, with
    // nothing in between.
    let first_key = pairs[0].0.as_str();
    let start = ours
        .iter()
        .position(|r| r["args"]["ptr[:len]"] == first_key)
        .unwrap_or_else(|| panic!("no record of {first_key}; stderr:\n{}", run.stderr))
        - 1;
    let got = &ours[start..];
    assert!(
        got.len() >= sent.len(),
        "{} records after the first SET, {} arguments sent",
        got.len(),
        sent.len()
    );
    for (i, (r, want)) in got.iter().zip(&sent).enumerate() {
        let a = &r["args"];
        assert_eq!(a["len"], want.len(), "record {i}: {r}");
        let kept = &want[..want.len().min(MAX_STRING)];
        assert_eq!(
            a["ptr[:len]"].as_str().unwrap().as_bytes(),
            kept,
            "record {i}: {r}"
        );
        let truncated = r["truncated"]
            .as_array()
            .is_some_and(|t| t.iter().any(|n| n == "ptr[:len]"));
        assert_eq!(truncated, want.len() > MAX_STRING, "record {i}: {r}");
        let obj = r["returns"]["r0"].as_str().unwrap();
        assert!(obj.starts_with("0x") && obj != "0x0", "robj pointer: {r}");
    }
    let s = run.summary();
    let p = s.probe("createStringObject");
    assert_eq!((p.lost, p.throttled), (0, 0));
    assert_eq!(
        p.delivered,
        run.records_of("createStringObject").len() as u64
    );
}
