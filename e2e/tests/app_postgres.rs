//! `gprobe run` on the USDT probes of Debian's PostgreSQL 15: `postgresql:query__start`
//! gives each query's text as postgres received it. The server's own statement log
//! (`log_statement = all`) is the record gprobe's must equal. Needs root (BPF) and the
//! postgresql-15 package (`scripts/setup.sh --test`); postgres runs as the `postgres`
//! user, with its cluster and unix socket in a folder of the test.

use gprobe_e2e::go::TempDir;
use gprobe_e2e::harness::{require_program, require_trace, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = "/usr/lib/postgresql/15/bin";
const PROBE: &str = "usdt:postgresql:query__start";

/// The `postgres` user's uid and gid (initdb and the server refuse to run as root).
fn postgres_user() -> Option<(u32, u32)> {
    let name = CString::new("postgres").unwrap();
    // SAFETY: getpwnam with a NUL-terminated name; the result is read at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    // SAFETY: a non-null result points to a valid passwd entry.
    (!pw.is_null()).then(|| unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// A PostgreSQL cluster in a folder of the test, its server listening on a unix socket
/// there only; stopped by pid (SIGINT: fast shutdown).
struct Postgres {
    server: Child,
    dir: TempDir,
}

impl Postgres {
    fn start(uid: u32, gid: u32) -> Postgres {
        let dir = TempDir::new("postgres");
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        let data = dir.path().join("data");
        let out = Command::new(format!("{BIN}/initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .env("HOME", dir.path())
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = dir.path().join("server.log");
        let server = Command::new(format!("{BIN}/postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .args(["-c", "listen_addresses=", "-c", "log_statement=all"])
            .args(["-c", "log_line_prefix=%p ", "-c", "fsync=off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .uid(uid)
            .gid(gid)
            .spawn()
            .unwrap();
        let mut pg = Postgres { server, dir };
        pg.wait_log("database system is ready to accept connections");
        pg
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn wait_log(&mut self, what: &str) {
        let t0 = Instant::now();
        while !self.log().contains(what) {
            if let Some(s) = self.server.try_wait().unwrap() {
                panic!("postgres exited ({s}):\n{}", self.log());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "postgres did not log {what:?} in 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the server logged as statements of the backend `pid`, in order.
    fn statements(&self, pid: u32) -> Vec<String> {
        let prefix = format!("{pid} LOG:  statement: ");
        self.log()
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
            .collect()
    }

    fn socket_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.server.id() as i32, libc::SIGINT) };
        let _ = self.server.wait();
    }
}

/// One psql session: queries written to its stdin, results (unaligned, tuples only) read
/// from its stdout.
struct Psql {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Psql {
    fn connect(socket_dir: &Path) -> Psql {
        let mut child = Command::new("psql")
            .arg("-h")
            .arg(socket_dir)
            .args(["-U", "postgres", "-d", "postgres", "-X", "-A", "-t", "-q"])
            .args(["-v", "ON_ERROR_STOP=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start psql");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Psql {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one query (one line) and returns what it printed (its rows, one per line;
    /// nothing for a command), up to a marker that psql itself echoes.
    fn query(&mut self, q: &str) -> String {
        const MARK: &str = "--end-of-query--";
        writeln!(self.stdin.as_mut().unwrap(), "{q}\n\\echo {MARK}").unwrap();
        let mut out = Vec::new();
        loop {
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "psql ended after {q:?}");
            if line.trim_end() == MARK {
                return out.join("\n");
            }
            out.push(line.trim_end().to_string());
        }
    }

    fn quit(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "psql: {status}");
    }
}

impl Drop for Psql {
    fn drop(&mut self) {
        // A test that failed mid-session: end psql (by its pid) so nothing is left behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Queries of several shapes, each printing one line: quotes, UTF-8, a comment, a
/// parameterless DDL/DML round, and one longer than the default 256-byte string limit.
fn queries() -> Vec<String> {
    let long = format!("select length('{}') as n;", "p".repeat(600));
    vec![
        "create table orders (id int primary key, item text, qty int);".to_string(),
        "insert into orders values (1, 'apple', 3), (2, 'pear', 1) returning id;".into(),
        "select item || ':' || qty from orders where id = 1;".into(),
        "select 'it''s café ✓' as quoted;".into(),
        "/* by id */ select count(*) from orders;".into(),
        "update orders set qty = qty + 1 where item = 'pear' returning qty;".into(),
        long,
        "select sum(qty) from orders;".into(),
    ]
}

fn spec() -> String {
    SpecBuilder::new("postgres-queries")
        .executable(format!("{BIN}/postgres"))
        .probe(
            ProbeBuilder::usdt("postgresql:query__start")
                .signature("(const char *query)")
                .capture(["query"]),
        )
        .max_string_bytes(4096)
        .yaml()
}

/// Fails the test unless it can run here; the `postgres` user's uid and gid.
fn setup(test: &str) -> (u32, u32) {
    require_trace(test);
    for program in ["initdb", "postgres"] {
        require_program(test, &format!("{BIN}/{program}"), "postgresql-15");
    }
    require_program(test, "psql", "postgresql-client-15");
    postgres_user().unwrap_or_else(|| {
        panic!(
            "{test}: there is no postgres user, which the postgresql-15 package creates: \
             scripts/setup.sh --test installs it (or apt-get install --reinstall postgresql-15)"
        )
    })
}

/// The backend a psql session talks to was forked by the postmaster; gprobe, started
/// while the session is open, attaches to the running backend and sees its next queries.
#[test]
fn query_start_of_a_running_backend_equals_the_server_statement_log() {
    let (uid, gid) = setup("postgres");
    let _guard = serial();
    let pg = Postgres::start(uid, gid);
    let mut psql = Psql::connect(pg.socket_dir());
    let backend: u32 = psql.query("select pg_backend_pid();").parse().unwrap();

    let g = Gprobe::cmd(&spec()).summary_file().start();
    g.wait_for_stderr(
        |s| s.contains(&format!("pid {backend})")),
        Duration::from_secs(30),
    );
    let sent = queries();
    let replies: Vec<String> = sent.iter().map(|q| psql.query(q)).collect();
    assert_eq!(replies[2], "apple:3");
    assert_eq!(replies[3], "it's café ✓");
    assert_eq!(replies[6], "600");
    // The server has run (and logged) every query once psql printed its result.
    psql.quit();
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);

    let (logged, traced) = logged_and_traced(&pg, &run, backend, &sent);
    assert_eq!(traced, logged[1..], "stderr:\n{}", run.stderr);
    let p = run.summary().probe(PROBE).clone();
    assert_eq!((p.lost, p.throttled), (0, 0));
}

/// The server's statement log of `backend` (checked to be its first query, then `sent`)
/// and the queries gprobe traced in it.
fn logged_and_traced(
    pg: &Postgres,
    run: &gprobe_e2e::harness::Run,
    backend: u32,
    sent: &[String],
) -> (Vec<String>, Vec<String>) {
    let logged = pg.statements(backend);
    let mut want = vec!["select pg_backend_pid();".to_string()];
    want.extend(sent.iter().cloned());
    assert_eq!(logged, want, "the server's statement log");
    let traced = run
        .records_of(PROBE)
        .into_iter()
        .filter(|r| r["pid"] == backend)
        .map(|r| r["args"]["query"].as_str().unwrap().to_string())
        .collect();
    (logged, traced)
}

/// A backend forked (without exec) by the postmaster after gprobe started: held at fork
/// until gprobe has attached to it, so every query it runs is traced, the first included.
#[test]
fn query_start_of_backends_forked_after_gprobe_started() {
    let (uid, gid) = setup("postgres fork");
    let _guard = serial();
    let g = Gprobe::cmd(&spec()).summary_file().start();
    // Started after gprobe: the postmaster is held at exec; each backend is its fork.
    let pg = Postgres::start(uid, gid);
    let mut psql = Psql::connect(pg.socket_dir());
    let backend: u32 = psql.query("select pg_backend_pid();").parse().unwrap();
    let sent = queries();
    for q in &sent {
        psql.query(q);
    }
    psql.quit();
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    let (logged, traced) = logged_and_traced(&pg, &run, backend, &sent);
    assert_eq!(traced, logged, "stderr:\n{}", run.stderr);
    let missed = run.summary().processes.missed;
    assert!(
        missed.iter().all(|m| m.pid != backend),
        "the backend is listed as missed: {missed:?}"
    );
}

/// 30 sessions, each served by a new backend (a fork of the postmaster) whose first query
/// comes at once: each backend is held at fork until its probe is attached, so every first
/// query is traced, in the backend the server's statement log names.
#[test]
fn the_first_query_of_every_new_backend_is_traced() {
    let (uid, gid) = setup("postgres first queries");
    let _guard = serial();
    let g = Gprobe::cmd(&spec()).summary_file().start();
    let pg = Postgres::start(uid, gid);
    let mut sent = Vec::new();
    for i in 0..30 {
        let q = format!("select 'first query {i}';");
        let out = Command::new("psql")
            .arg("-h")
            .arg(pg.socket_dir())
            .args([
                "-U", "postgres", "-d", "postgres", "-X", "-A", "-t", "-q", "-c",
            ])
            .arg(&q)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("first query {i}")
        );
        sent.push(q);
    }
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    // The backend that ran each query, from the server's log.
    let log = pg.log();
    let ran: std::collections::BTreeMap<&str, u64> = log
        .lines()
        .filter_map(|l| l.split_once(" LOG:  statement: "))
        .filter(|(_, q)| sent.iter().any(|s| s == q))
        .map(|(pid, q)| (q, pid.parse().unwrap()))
        .collect();
    assert_eq!(ran.len(), 30, "the server's statement log:\n{log}");
    let traced: std::collections::BTreeSet<(u64, String)> = run
        .records_of(PROBE)
        .into_iter()
        .map(|r| {
            (
                r["pid"].as_u64().unwrap(),
                r["args"]["query"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let got = ran
        .iter()
        .filter(|(q, pid)| traced.contains(&(**pid, q.to_string())))
        .count();
    eprintln!("first queries of 30 new backends traced: {got}");
    assert_eq!(got, 30, "stderr:\n{}", run.stderr);
}
