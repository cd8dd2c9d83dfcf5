//! Processes gprobe holds (stopped until their probes are attached) and processes it
//! counts: a killed gprobe leaves none stopped and a new one traces them; children forked
//! by a traced process are held from their first instruction; a crowd of new processes is
//! traced from its first calls, and whatever could not be is counted. On real programs;
//! they need root (BPF).

use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{program, program_lines, require_trace, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn crowd() -> PathBuf {
    program("e2e/testdata/crowd", GoVersion::Go127, false)
}

const FUNCS: [&str; 5] = ["main.f1", "main.f2", "main.f3", "main.f4", "main.f5"];

/// Five latency probes on the crowd program's functions, with no rate limit.
fn crowd_spec(name: &str, exe: &Path) -> String {
    let mut s = SpecBuilder::new(name).executable(exe);
    for f in FUNCS {
        s = s.probe(
            ProbeBuilder::new(f)
                .signature("func(i int64) int64")
                .capture(["i"])
                .latency(),
        );
    }
    s.events_per_second(0).yaml()
}

/// The state letter of /proc/PID/stat (`T` stopped, `t` stopped by a tracer), or None when
/// the process is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

fn stopped(pid: u32) -> bool {
    matches!(state(pid), Some('T' | 't'))
}

/// Processes the test started, killed by pid when the test ends (passed or not).
#[derive(Default)]
struct Kids(Vec<Child>);

impl Kids {
    fn spawn(&mut self, cmd: &mut Command) -> u32 {
        let c = cmd.spawn().expect("start a test program");
        let pid = c.id();
        self.0.push(c);
        pid
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // A stopped process dies of SIGKILL too.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits (up to `limit`) until `cond` holds; returns whether it did.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// `gprobe run` killed with SIGKILL while it traces 16 processes (about 100 uprobe links,
/// whose teardown keeps its BPF programs loaded for a while after the kill) and while 10
/// more processes of the selected program start, some before the kill and some during the
/// teardown: none of them stays stopped, and a new gprobe traces them all.
#[test]
fn a_killed_gprobe_leaves_no_process_stopped_and_a_new_one_traces_them() {
    killed_gprobe_leaves_no_process_stopped(None);
}

/// The same where the process hooks cannot resume held processes themselves (kernels
/// before 6.13, here by turning their kfuncs off): the guardian process does.
#[test]
fn without_task_kfuncs_the_guardian_resumes_what_a_killed_gprobe_held() {
    killed_gprobe_leaves_no_process_stopped(Some("task_kfuncs"));
}

fn killed_gprobe_leaves_no_process_stopped(disable: Option<&str>) {
    require_trace("kill -9");
    let bin = crowd();
    let spec = crowd_spec("killed", &bin);
    let with_env = |c: gprobe_e2e::harness::GprobeCmd| match disable {
        Some(d) => c.env("GPROBE_DISABLE_FEATURES", d),
        None => c,
    };
    let _guard = serial();
    let mut kids = Kids::default();
    let forever = || {
        let mut c = Command::new(&bin);
        c.args(["-calls", "0", "-rate", "20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    let mut old = with_env(Gprobe::cmd(&spec)).start();
    if disable.is_some() {
        assert!(
            old.stderr_now().contains("a guardian process (pid "),
            "{}",
            old.stderr_now()
        );
    }
    let traced: Vec<u32> = (0..16).map(|_| kids.spawn(&mut forever())).collect();
    for pid in &traced {
        old.wait_for_stderr(
            |s| s.contains(&format!("pid {pid})")),
            Duration::from_secs(30),
        );
    }
    // 10 starts, 40 ms apart; the kill comes after the third.
    let mut started = Vec::new();
    let mut killed_at = None;
    let mut reaped = None;
    for i in 0..10 {
        started.push(kids.spawn(&mut forever()));
        if i == 2 {
            old.kill();
            killed_at = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let killed_at = killed_at.unwrap();
    if old.wait_exit(Duration::from_secs(60)) {
        reaped = Some(killed_at.elapsed());
    }
    eprintln!("the killed gprobe was gone {reaped:?} after SIGKILL");
    // Any process still stopped now was held by the dead gprobe: give it the 10 s the
    // issue allows (a hold in flight ends in microseconds) before calling it stuck.
    let all: Vec<u32> = traced.iter().chain(&started).copied().collect();
    let free_by = Instant::now();
    let ok = wait_until(Duration::from_secs(10), || all.iter().all(|p| !stopped(*p)));
    let stuck: Vec<u32> = all.iter().copied().filter(|p| stopped(*p)).collect();
    eprintln!(
        "stopped after the kill: {stuck:?} (all free {} ms after the old gprobe was gone)",
        free_by.elapsed().as_millis()
    );
    assert!(ok && stuck.is_empty(), "processes left stopped: {stuck:?}");
    for p in &all {
        assert!(state(*p).is_some(), "pid {p} died");
    }

    // A new gprobe traces every one of them.
    let new = with_env(Gprobe::cmd(&spec)).start();
    for pid in &started {
        new.wait_for_stderr(
            |s| s.contains(&format!("pid {pid})")),
            Duration::from_secs(30),
        );
    }
    let want: BTreeSet<u32> = started.iter().copied().collect();
    let seen_all = wait_until(Duration::from_secs(30), || {
        let out = new.stdout_now();
        let pids: BTreeSet<u32> = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|r| r["pid"].as_u64().map(|p| p as u32))
            .collect();
        want.is_subset(&pids)
    });
    let run = new.stop();
    drop(kids);
    assert!(seen_all, "not every process was traced:\n{}", run.stderr);
}

/// Children forked by a traced process, each calling the probed function once as the first
/// thing it does: each is held from its first instruction until its probes are attached,
/// so its call is recorded; a child that could not be is listed as missed with the reason.
#[test]
fn children_forked_by_a_traced_process_are_held_until_their_probes_are_attached() {
    require_trace("forked children held");
    let dir = TempDir::new("fork-hold");
    let src = gprobe_e2e::go::repo_root().join("e2e/testdata/forker/forker.c");
    let bin = gprobe_e2e::cc::build(&src, &dir.path().join("forker"), &["-g"], None);
    let spec = SpecBuilder::new("forks")
        .executable(&bin)
        .probe(ProbeBuilder::new("work").capture(["x"]))
        .events_per_second(0)
        .yaml();
    let _guard = serial();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let out = Command::new(&bin)
        .args(["-n", "300", "-quick"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.contains("children=300"), "{out}");
    let made: BTreeMap<u32, i64> = program_lines(&out, "work ")
        .iter()
        .map(|l| (l["pid"].parse().unwrap(), l["x"].parse().unwrap()))
        .collect();
    assert_eq!(made.len(), 300);
    let run = g.stop();
    let recorded: BTreeMap<u32, i64> = run
        .records_of("work")
        .iter()
        .map(|r| {
            (
                r["pid"].as_u64().unwrap() as u32,
                r["args"]["x"].as_i64().unwrap(),
            )
        })
        .collect();
    let s = run.summary();
    let missed: BTreeMap<u32, String> = s
        .processes
        .missed
        .iter()
        .map(|m| (m.pid, m.reason.clone()))
        .collect();
    let json = run.summary_json();
    let missed_total = json["processes"]["missed_total"].as_u64().unwrap();
    let got = made.keys().filter(|p| recorded.contains_key(p)).count();
    let counted = made
        .keys()
        .filter(|p| !recorded.contains_key(p) && missed.contains_key(p))
        .count();
    let errors = run.stderr.matches("bpf_link_create").count();
    eprintln!(
        "300 children: {got} calls recorded, {counted} of the rest listed as missed; summary: \
        matched {}, traced {}, missed {missed_total}; {errors} attach error lines; probe error {:?}",
        s.processes.matched,
        s.processes.traced,
        s.probe("work").error
    );
    for (pid, x) in &recorded {
        if let Some(want) = made.get(pid) {
            assert_eq!(x, want, "pid {pid}");
        }
    }
    assert!(got >= 297, "{got} of 300 calls recorded\n{}", run.stderr);
    assert_eq!(got + counted, 300, "children neither recorded nor counted");
    assert_eq!(
        (s.processes.matched, s.processes.traced + missed_total),
        (301, 301),
        "the parent and every child, traced or missed"
    );
    for (pid, why) in &missed {
        assert!(
            !recorded.contains_key(pid),
            "pid {pid} is listed as missed ({why}) but its only call was recorded"
        );
    }
    assert_eq!(errors, 0, "{}", run.stderr);
    assert_eq!(s.probe("work").error, None);
}

/// 200 copies of a program started within a fraction of a second, each calling five
/// probed functions 100 times (50 rounds a second) and counting its own calls: every call
/// is delivered, counted lost, or made before the probes of a process listed as missed
/// (the identity exact), at least 99% delivered, every process traced from its first call
/// or listed as missed.
#[test]
fn a_crowd_of_new_processes_is_traced_from_their_first_calls() {
    // 200,000 records (about 11 MB) in the crowd's first seconds, on 2 cores shared with
    // 200 busy processes: a ring that holds them all keeps what the reader did not read
    // yet (losses from a full ring are counted either way; the identity below holds).
    crowd_run(&["--ring-buffer-size", "16MiB"]);
}

/// The same crowd with gprobe's defaults (a 4 MiB ring; the reader's threads at a higher
/// priority than the crowd's): the reader is not starved. With a 1 MiB ring and the reader
/// at the crowd's priority, about 28% was delivered here. The release build delivers every
/// call (100% in 4 of 4 runs, `GPROBE_BIN=<release gprobe>`); the debug build the tests run
/// is paced by its unoptimized JSON output and delivered 87-100% (CI: 87.6% and 90.2%), the
/// rest counted lost. So the bound here is the starvation's, not the release build's rate:
/// a rate is a benchmark's to measure, not a test's.
#[test]
fn a_crowd_at_a_steady_rate_is_delivered_with_the_default_ring() {
    crowd_run_delivering(&[], 60);
}

fn crowd_run(args: &[&str]) {
    crowd_run_delivering(args, 99);
}

/// The crowd, with at least `min_percent` of its calls delivered.
fn crowd_run_delivering(args: &[&str], min_percent: u64) {
    require_trace("crowd");
    let bin = crowd();
    let spec = crowd_spec("crowd", &bin);
    let _guard = serial();
    let g = Gprobe::cmd(&spec).args(args).summary_file().start();
    let mut kids = Kids::default();
    let t0 = Instant::now();
    let pids: Vec<u32> = (0..200)
        .map(|_| {
            kids.spawn(
                Command::new(&bin)
                    .args(["-calls", "100", "-rate", "50"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    let spawned_in = t0.elapsed();
    let mut made: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    for c in &mut kids.0 {
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(c.wait().unwrap().success());
        for l in program_lines(&out, "calls ") {
            let pid: u32 = l["pid"].parse().unwrap();
            let counts = (1..=5)
                .map(|i| (format!("main.f{i}"), l[&format!("f{i}")].parse().unwrap()))
                .collect();
            made.insert(pid, counts);
        }
    }
    let done_in = t0.elapsed();
    assert_eq!(
        made.keys().copied().collect::<Vec<_>>(),
        pids.iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    let run = g.stop();
    let s = run.summary();
    let json = run.summary_json();
    let mut by_pid: BTreeMap<(u32, String), BTreeSet<i64>> = BTreeMap::new();
    for r in run.records() {
        let (Some(pid), Some(sym)) = (r["pid"].as_u64(), r["symbol"].as_str()) else {
            continue;
        };
        by_pid
            .entry((pid as u32, sym.to_string()))
            .or_default()
            .insert(r["args"]["i"].as_i64().unwrap());
    }
    let (mut total_made, mut total_delivered, mut total_lost) = (0, 0, 0);
    let mut late = BTreeSet::new();
    let mut counted = Vec::new();
    for f in FUNCS {
        let want: u64 = made.values().map(|m| m[f]).sum();
        let p = s.probe(f);
        eprintln!(
            "{f}: made {want}, delivered {}, lost {}, throttled {}, unfinished {}",
            p.delivered, p.lost, p.throttled, p.unfinished
        );
        total_made += want;
        total_delivered += p.delivered;
        total_lost += p.lost;
        counted.push((f, want, p.delivered + p.lost + p.throttled));
        for pid in made.keys() {
            let first = by_pid
                .get(&(*pid, f.to_string()))
                .and_then(|s| s.first().copied());
            if first != Some(0) {
                late.insert(*pid);
            }
        }
    }
    let missed_total = json["processes"]["missed_total"].as_u64().unwrap();
    let listed: BTreeSet<u32> = s.processes.missed.iter().map(|m| m.pid).collect();
    // Every call is delivered, counted lost or throttled, or made by a process the summary
    // lists as missed before its probes were attached (no probe saw it: the process is what
    // is counted, with the reason).
    let mut unaccounted = Vec::new();
    for (f, want, seen) in counted {
        let unseen_in_missed: u64 = listed
            .iter()
            .filter_map(|pid| {
                let made_here = made.get(pid)?[f];
                let delivered = by_pid.get(&(*pid, f.to_string())).map_or(0, |s| s.len());
                Some(made_here.saturating_sub(delivered as u64))
            })
            .sum();
        if seen + unseen_in_missed < want {
            unaccounted.push((f, want - seen - unseen_in_missed));
        }
    }
    eprintln!(
        "200 processes started in {} ms, all done {} ms after the first: {total_delivered} of \
        {total_made} calls delivered ({:.2}%), {total_lost} lost, {} counted nowhere; {} \
            processes without their first call, of which {} listed as missed; summary: matched \
                {}, traced {}, missed {missed_total}, process events lost {}",
        spawned_in.as_millis(),
        done_in.as_millis(),
        100.0 * total_delivered as f64 / total_made as f64,
        total_made - total_delivered - total_lost,
        late.len(),
        late.intersection(&listed).count(),
        s.processes.matched,
        s.processes.traced,
        json["processes"]["events_lost"]
    );
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for m in &s.processes.missed {
        let general: String = m
            .reason
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        *reasons.entry(general).or_default() += 1;
    }
    for (reason, n) in &reasons {
        eprintln!("missed {n}: {reason}");
    }
    assert_eq!(
        unaccounted,
        [],
        "calls neither delivered, counted lost nor made by a process listed as missed"
    );
    assert!(
        total_delivered * 100 >= total_made * min_percent,
        "{total_delivered} of {total_made} delivered (at least {min_percent}% expected)"
    );
    assert_eq!(
        (s.processes.matched, s.processes.traced + missed_total),
        (200, 200)
    );
    if total_lost == 0 {
        // Every record arrived: a process without its first calls was not traced from them.
        let unlisted: Vec<&u32> = late.difference(&listed).collect();
        assert_eq!(
            unlisted,
            Vec::<&u32>::new(),
            "processes that lost their first calls, not listed as missed\n{}",
            run.stderr
        );
    }
}

/// Creates a BPF hash map shaped as gprobe's map of held processes (pid -> gp_hold),
/// holding `pid` as held at exec by the agent `agent`, and pins it at `path`. Raw bpf(2):
/// an agent that died, as the kernel would keep its pin.
fn pin_orphan_hold(path: &Path, pid: u32, agent: u32) {
    fn bpf(cmd: libc::c_long, attr: &[u8]) -> i64 {
        // SAFETY: a zero-initialized bpf_attr of the size passed; what it points to
        // outlives the call.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), attr.len() as u32) }
    }
    // BPF_MAP_CREATE: map_type, key_size, value_size, max_entries.
    let mut attr = [0u8; 72];
    for (i, w) in [1u32, 4, 24, 4096].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
    }
    let fd = bpf(0, &attr);
    assert!(
        fd >= 0,
        "BPF_MAP_CREATE: {}",
        std::io::Error::last_os_error()
    );
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let since = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    // struct gp_hold: since_ns, holder, kind (1: at exec), ppid, pad.
    let mut value = Vec::new();
    value.extend_from_slice(&since.to_ne_bytes());
    for w in [agent, 1, 0, 0] {
        value.extend_from_slice(&w.to_ne_bytes());
    }
    let key = pid.to_ne_bytes();
    // BPF_MAP_UPDATE_ELEM: map_fd, key, value, flags.
    let mut attr = [0u8; 32];
    attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(key.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(value.as_ptr() as u64).to_ne_bytes());
    assert_eq!(bpf(2, &attr), 0, "{}", std::io::Error::last_os_error());
    // BPF_OBJ_PIN: pathname, bpf_fd.
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut attr = [0u8; 16];
    attr[0..8].copy_from_slice(&(cpath.as_ptr() as u64).to_ne_bytes());
    attr[8..12].copy_from_slice(&(fd as u32).to_ne_bytes());
    assert_eq!(bpf(6, &attr), 0, "{}", std::io::Error::last_os_error());
    // SAFETY: closing the fd bpf(2) gave us; the pin keeps the map.
    unsafe { libc::close(fd as i32) };
}

/// bpffs at /sys/fs/bpf for the test, mounted if nothing is (and unmounted at the end).
struct Bpffs {
    mounted: bool,
}

impl Bpffs {
    fn ensure() -> Bpffs {
        let is_bpffs = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(4) == Some(&"/sys/fs/bpf") && l.contains(" - bpf ")
            });
        if is_bpffs {
            return Bpffs { mounted: false };
        }
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let (src, dst, ty) = (c("gprobe-test"), c("/sys/fs/bpf"), c("bpf"));
        // SAFETY: NUL-terminated strings that outlive the call.
        let r =
            unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) };
        assert_eq!(r, 0, "mount bpffs: {}", std::io::Error::last_os_error());
        Bpffs { mounted: true }
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::fs::remove_dir("/sys/fs/bpf/gprobe");
            let dst = std::ffi::CString::new("/sys/fs/bpf").unwrap();
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// A process that an agent which died left held (stopped, in its pinned map of holds):
/// a new gprobe takes it over, attaches to it, then resumes it, so its first call after
/// the hold is traced; the old pin is removed.
#[test]
fn a_new_gprobe_takes_over_the_holds_an_agent_that_died_left() {
    require_trace("orphan holds");
    let bin = crowd();
    let spec = crowd_spec("orphans", &bin);
    let _guard = serial();
    let _bpffs = Bpffs::ensure();
    let mut kids = Kids::default();
    // Its first calls come after 500 ms; it is stopped well before, as a hold would.
    let pid = kids.spawn(
        Command::new(&bin)
            .args(["-calls", "0", "-rate", "20", "-delay", "500ms"])
            .stdout(Stdio::null()),
    );
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == bin)
    }));
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    // Returns as soon as it is stopped. Once in the suite it was not stopped within 5 s
    // (cause not established: the state is printed if it happens again).
    assert!(
        wait_until(Duration::from_secs(30), || stopped(pid)),
        "pid {pid} not stopped 30 s after SIGSTOP: state {:?}",
        state(pid)
    );
    std::fs::create_dir_all("/sys/fs/bpf/gprobe").unwrap();
    // No process has pid_max + 7: its agent has ended.
    let pin = PathBuf::from("/sys/fs/bpf/gprobe/held_4194311_1");
    pin_orphan_hold(&pin, pid, 4_194_311);
    // Longer than its delay: when resumed, it calls at once.
    std::thread::sleep(Duration::from_millis(600));

    let g = Gprobe::cmd(&spec).summary_file().start();
    g.wait_for_stderr(
        |s| s.contains(&format!("pid {pid})")),
        Duration::from_secs(30),
    );
    assert!(
        wait_until(Duration::from_secs(5), || !stopped(pid)),
        "still stopped"
    );
    assert!(!pin.exists(), "the ended agent's pin is removed");
    let first_calls = wait_until(Duration::from_secs(10), || {
        g.stdout_now()
            .lines()
            .filter(|l| l.contains("\"main.f1\""))
            .count()
            >= 3
    });
    let run = g.stop();
    drop(kids);
    assert!(first_calls, "{}", run.stderr);
    assert!(run.stderr.contains("takes them over"), "{}", run.stderr);
    let mut f1: Vec<i64> = run
        .records_of("main.f1")
        .iter()
        .filter(|r| r["pid"] == pid)
        .map(|r| r["args"]["i"].as_i64().unwrap())
        .collect();
    f1.sort();
    assert_eq!(f1.first(), Some(&0), "attached before it was resumed");
    let s = run.summary();
    assert_eq!((s.processes.matched, s.processes.traced), (1, 1));
}
