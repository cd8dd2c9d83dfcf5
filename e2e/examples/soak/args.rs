//! The soak's command line: how long, how fast, how many pods (`--help` lists it).

use std::path::PathBuf;
use std::time::Duration;

/// What the soak runs, and for how long.
pub struct Args {
    pub gprobe: PathBuf,
    pub duration: Duration,
    pub spec_every: Duration,
    pub settle: Duration,
    pub sample_every: Duration,
    pub warmup: Duration,
    pub steady: usize,
    pub steady_rate: u32,
    pub spawners: usize,
    pub spawn_every: Duration,
    pub child_calls: u32,
    pub child_rate: u32,
}

fn parse_duration(s: &str) -> Duration {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let n: f64 = num.parse().unwrap_or_else(|_| panic!("bad duration {s:?}"));
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => panic!("bad duration unit in {s:?} (ms, s, m, h)"),
    };
    Duration::from_secs_f64(secs)
}

pub fn args() -> Args {
    let mut a = Args {
        gprobe: PathBuf::from("target/release/gprobe"),
        duration: Duration::from_secs(3600),
        spec_every: Duration::from_millis(1500),
        settle: Duration::from_secs(60),
        sample_every: Duration::from_secs(10),
        warmup: Duration::from_secs(120),
        steady: 4,
        steady_rate: 20,
        spawners: 2,
        spawn_every: Duration::from_millis(500),
        child_calls: 100,
        child_rate: 50,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(k) = it.next() {
        let mut v = || {
            it.next()
                .unwrap_or_else(|| panic!("{k} needs a value"))
                .clone()
        };
        match k.as_str() {
            "--gprobe" => a.gprobe = v().into(),
            "--duration" => a.duration = parse_duration(&v()),
            "--spec-every" => a.spec_every = parse_duration(&v()),
            "--settle" => a.settle = parse_duration(&v()),
            "--sample-every" => a.sample_every = parse_duration(&v()),
            "--warmup" => a.warmup = parse_duration(&v()),
            "--steady" => a.steady = v().parse().expect("--steady N"),
            "--steady-rate" => a.steady_rate = v().parse().expect("--steady-rate N"),
            "--spawners" => a.spawners = v().parse().expect("--spawners N"),
            "--spawn-every" => a.spawn_every = parse_duration(&v()),
            "--child-calls" => a.child_calls = v().parse().expect("--child-calls N"),
            "--child-rate" => a.child_rate = v().parse().expect("--child-rate N"),
            "-h" | "--help" => {
                println!(
                    "soak [--gprobe PATH] [--duration 1h] [--spec-every 1.5s] [--settle 60s] \
                     [--sample-every 10s] [--warmup 2m] [--steady 4] [--steady-rate 20] \
                     [--spawners 2] [--spawn-every 500ms] [--child-calls 100] [--child-rate 50]"
                );
                std::process::exit(0);
            }
            _ => panic!("unknown argument {k} (--help)"),
        }
    }
    a
}
