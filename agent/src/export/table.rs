//! A readable table for terminals (`--output table`): one row per call in 80 columns, its
//! captured values on indented lines below it, wrapped at 80 columns.
//!
//! ```text
//! # times: CET (UTC+01:00), when each call returned (or was made, without latency)
//! TIME                PID PROBE            SYMBOL                       DURATION
//! 10:46:40.000183    4242 http-client-urls net/http.(*Client).Get      183.000µs
//!     url="http://10.0.0.7:8080/cart" →err=nil
//! ```
//!
//! Rows are in the order their calls ended, each with the local time it ended, and the
//! times never go backwards: records reach gprobe in about that order, but calls that end
//! on different CPUs at nearly the same time may come in either order, and an unfinished
//! call is reported when its process exits. So rows wait [`HOLD`] before they are written,
//! and are written sorted. A row that still comes after a later one was written (its
//! record was held up longer than that) says `late` instead of a time, and carries its
//! time as `ended=`; an unfinished call, which has not ended, says `-` and `started=`.

use crate::events::CallRecord;
use cells::{cut_end, cut_start, duration, fmt_value, wrap};
use std::io::Write;
use std::time::Duration;

mod cells;

pub use cells::WIDTH;
const TIME_W: usize = 15;
const PROBE_W: usize = 16;
const SYMBOL_W: usize = 26;
/// How long a row waits for rows of calls that ended before it.
pub const HOLD: Duration = Duration::from_millis(100);

/// A Unix time as the local clock shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalTime {
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// Seconds east of UTC.
    pub offset: i32,
    /// The zone's abbreviation (`CET`), where the system names one.
    pub zone: String,
}

/// How Unix seconds become local time (the system's rules, or a fixed zone in tests).
pub type Zone = fn(i64) -> LocalTime;

/// The local time of `secs` by the system's rules (`TZ`, `/etc/localtime`).
pub fn system_zone(secs: i64) -> LocalTime {
    // SAFETY: localtime_r fills the tm we own; tm_zone then points to static storage of
    // the C library (or is null).
    unsafe {
        let t: libc::time_t = secs;
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return utc(secs);
        }
        let zone = if tm.tm_zone.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(tm.tm_zone)
                .to_string_lossy()
                .into_owned()
        };
        LocalTime {
            hour: tm.tm_hour as u32,
            minute: tm.tm_min as u32,
            second: tm.tm_sec as u32,
            offset: tm.tm_gmtoff as i32,
            zone,
        }
    }
}

/// UTC: the fallback where the local time cannot be had.
pub fn utc(secs: i64) -> LocalTime {
    let s = secs.rem_euclid(86_400) as u32;
    LocalTime {
        hour: s / 3600,
        minute: s / 60 % 60,
        second: s % 60,
        offset: 0,
        zone: "UTC".into(),
    }
}

fn offset_text(offset: i32) -> String {
    let a = offset.unsigned_abs();
    format!(
        "UTC{}{:02}:{:02}",
        if offset < 0 { '-' } else { '+' },
        a / 3600,
        a / 60 % 60
    )
}

fn zone_text(t: &LocalTime) -> String {
    if t.zone.is_empty() || t.zone.starts_with(['+', '-']) {
        offset_text(t.offset)
    } else {
        format!("{} ({})", t.zone, offset_text(t.offset))
    }
}

/// When a row's call ended: the key rows are sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowTime {
    /// Unix ns: when it returned, or was made (probes without latency).
    Ended(u64),
    /// It had not returned when its process exited or gprobe stopped.
    Unfinished,
}

fn row_time(rec: &CallRecord) -> RowTime {
    if rec.unfinished {
        RowTime::Unfinished
    } else {
        RowTime::Ended(
            rec.start_time_unix_nano
                .saturating_add(rec.duration_ns.unwrap_or(0)),
        )
    }
}

/// The table's state: rows waiting to be written in order, and what was written last.
pub struct Table {
    zone: Zone,
    header: bool,
    /// The zone of the rows written last (said again when it changes, as at a DST switch).
    shown_zone: Option<(i32, String)>,
    /// The time of the last row written.
    last: u64,
    /// (sort key, arrival order, record).
    pending: Vec<(u64, u64, CallRecord)>,
    seq: u64,
}

impl Default for Table {
    fn default() -> Self {
        Self::new(system_zone)
    }
}

impl Table {
    pub fn new(zone: Zone) -> Self {
        Self {
            zone,
            header: false,
            shown_zone: None,
            last: 0,
            pending: Vec::new(),
            seq: 0,
        }
    }

    /// Takes the calls of a batch that arrived at `now` (Unix ns).
    pub fn push(&mut self, batch: Vec<CallRecord>, now: u64) {
        for rec in batch {
            // An unfinished call goes after every call that ended before it was reported.
            let key = match row_time(&rec) {
                RowTime::Ended(t) => t,
                RowTime::Unfinished => now,
            };
            self.seq += 1;
            self.pending.push((key, self.seq, rec));
        }
    }

    /// When the oldest waiting row is due (Unix ns).
    pub fn next_due(&self) -> Option<u64> {
        self.pending
            .iter()
            .map(|(k, _, _)| k.saturating_add(HOLD.as_nanos() as u64))
            .min()
    }

    /// Writes, in time order, the rows that have waited [`HOLD`] at `now` (Unix ns), or
    /// every row (`None`: the output ends).
    pub fn write_due(&mut self, now: Option<u64>, out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            return;
        }
        self.pending.sort_unstable_by_key(|(k, s, _)| (*k, *s));
        let hold = HOLD.as_nanos() as u64;
        let n = match now {
            None => self.pending.len(),
            Some(now) => self
                .pending
                .partition_point(|(k, _, _)| k.saturating_add(hold) <= now),
        };
        let due: Vec<_> = self.pending.drain(..n).collect();
        for (_, _, rec) in due {
            self.write_row(&rec, out);
        }
    }

    fn clock(&self, unix_ns: u64) -> (LocalTime, String) {
        let t = (self.zone)((unix_ns / 1_000_000_000) as i64);
        let micros = (unix_ns / 1000) % 1_000_000;
        let text = format!("{:02}:{:02}:{:02}.{micros:06}", t.hour, t.minute, t.second);
        (t, text)
    }

    fn write_row(&mut self, rec: &CallRecord, out: &mut Vec<u8>) {
        let mut vals: Vec<String> = Vec::new();
        let time = match row_time(rec) {
            RowTime::Ended(t) => {
                let (local, text) = self.clock(t);
                let zone = (local.offset, local.zone.clone());
                if !self.header {
                    let _ = writeln!(
                        out,
                        "# times: {}, when each call returned (or was made, without latency)",
                        zone_text(&local)
                    );
                    write_header(out);
                    self.header = true;
                } else if self.shown_zone.as_ref() != Some(&zone) && t >= self.last {
                    let _ = writeln!(out, "# times: now {}", zone_text(&local));
                }
                if t >= self.last {
                    self.last = t;
                    self.shown_zone = Some(zone);
                    text
                } else {
                    vals.push(format!("ended={text}"));
                    "late".to_string()
                }
            }
            RowTime::Unfinished => {
                let (local, text) = self.clock(rec.start_time_unix_nano);
                if !self.header {
                    let _ = writeln!(out, "# times: {}", zone_text(&local));
                    write_header(out);
                    self.header = true;
                }
                vals.push(format!("started={text}"));
                "-".to_string()
            }
        };
        let _ = writeln!(
            out,
            "{time:<TIME_W$} {:>7} {:<PROBE_W$} {:<SYMBOL_W$} {:>10}",
            rec.pid,
            cut_end(&rec.probe.spec, PROBE_W),
            cut_start(&rec.probe.symbol, SYMBOL_W),
            duration(rec),
        );
        vals.extend(rec.args.iter().map(fmt_value));
        if let Some(r) = &rec.returns {
            vals.extend(r.iter().map(|v| format!("→{}", fmt_value(v))));
        }
        wrap(&vals, out);
    }
}

pub fn write_header(out: &mut Vec<u8>) {
    let _ = writeln!(
        out,
        "{:<TIME_W$} {:>7} {:<PROBE_W$} {:<SYMBOL_W$} {:>10}",
        "TIME", "PID", "PROBE", "SYMBOL", "DURATION"
    );
}
#[cfg(test)]
mod tests {
    use super::cells::show;
    use super::*;
    use crate::events::{ProbeMeta, Resource, Value, ValueKind};
    use std::sync::Arc;

    /// 00:06:40.123456 UTC is 05:36:40.123456 here.
    fn india(secs: i64) -> LocalTime {
        let mut t = utc(secs + 5 * 3600 + 1800);
        t.offset = 5 * 3600 + 1800;
        t.zone = "IST".into();
        t
    }

    const START: u64 = 1_763_770_000_123_456_789;

    fn call(spec: &str, symbol: &str, args: Vec<(&str, ValueKind)>) -> CallRecord {
        CallRecord {
            probe: Arc::new(ProbeMeta::simple(spec, symbol, true)),
            pid: 4194304,
            tid: 1,
            // 00:06:40.123456 UTC
            start_time_unix_nano: START,
            duration_ns: Some(183_000),
            args: args
                .into_iter()
                .map(|(n, kind)| Value {
                    name: n.into(),
                    kind,
                })
                .collect(),
            returns: Some(vec![Value {
                name: "err".into(),
                kind: ValueKind::Interface { nil: true },
            }]),
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: Default::default(),
        }
    }

    fn text(recs: &[CallRecord]) -> String {
        let mut t = Table::new(india);
        let mut out = Vec::new();
        t.push(recs.to_vec(), START);
        t.write_due(None, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn s(t: &str) -> ValueKind {
        ValueKind::Str {
            text: t.into(),
            truncated: false,
        }
    }

    #[test]
    fn rows_fit_80_columns_and_show_the_local_time_they_ended() {
        let long_url = format!("http://10.0.0.7:8080/{}", "x".repeat(300));
        let t = text(&[
            call(
                "http-client-urls",
                "net/http.(*Client).Get",
                vec![("url", s("http://10.0.0.7:8080/cart"))],
            ),
            call(
                "a-very-long-spec-name-for-the-shop",
                "github.com/example/shop/internal/orders.(*Service).PlaceOrder",
                vec![
                    ("url", s(&long_url)),
                    ("n", ValueKind::Int(-42)),
                    ("r.URL.Path", s("/api/v1/orders/1234567890")),
                    ("r.Method", s("POST")),
                    ("r.Host", s("shop.example.internal:8443")),
                ],
            ),
        ]);
        for line in t.lines() {
            assert!(
                line.chars().count() <= WIDTH,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "# times: IST (UTC+05:30), when each call returned (or was made, without latency)"
        );
        assert!(lines[1].starts_with("TIME "), "{}", lines[1]);
        assert!(lines[1].ends_with("DURATION"));
        // Started 05:36:40.123456, returned 183 µs later.
        assert_eq!(
            lines[2],
            "05:36:40.123639 4194304 http-client-urls net/http.(*Client).Get      183.000µs"
        );
        assert_eq!(lines[3], "    url=\"http://10.0.0.7:8080/cart\" →err=nil");
        // Long names are cut with …: the spec at its end, the symbol at its start.
        assert!(
            lines[4].contains(" a-very-long-spe… …ers.(*Service).PlaceOrder "),
            "{}",
            lines[4]
        );
        // A value longer than a line takes at most three lines and is cut; the next
        // values follow on their own line.
        assert!(lines[5].starts_with("    url=\"http://10.0.0.7:8080/xxx"));
        assert!(lines[7].ends_with('…'), "{}", lines[7]);
        assert_eq!(
            lines[8],
            "    n=-42 r.URL.Path=\"/api/v1/orders/1234567890\" r.Method=\"POST\""
        );
        assert_eq!(
            lines[9],
            "    r.Host=\"shop.example.internal:8443\" →err=nil"
        );
        assert_eq!(lines.len(), 10);
    }

    #[test]
    fn negative_offsets_and_unnamed_zones() {
        let t = LocalTime {
            zone: "-03".into(),
            offset: -3 * 3600 - 1800,
            ..utc(0)
        };
        assert_eq!(zone_text(&t), "UTC-03:30");
        assert_eq!(zone_text(&utc(0)), "UTC (UTC+00:00)");
        assert!(system_zone(0).hour < 24);
    }

    #[test]
    fn rows_go_in_the_order_calls_ended_and_times_never_go_back() {
        let mut table = Table::new(utc);
        let mut out = Vec::new();
        let at = |start_us: u64, dur_us: u64, name: &str| {
            let mut c = call("p", name, vec![]);
            c.returns = None;
            c.start_time_unix_nano = START + start_us * 1000;
            c.duration_ns = Some(dur_us * 1000);
            c
        };
        // Returns arrive in the order they were read: a long call that started first
        // returned last; two calls ended on two CPUs came in reverse.
        let batch = vec![
            at(10, 5, "b"),
            at(0, 100, "long"),
            at(20, 1, "d"),
            at(19, 1, "c"),
        ];
        table.push(batch, START);
        // Not yet: they wait HOLD for calls that ended before them.
        table.write_due(Some(START + 50_000), &mut out);
        assert!(out.is_empty());
        table.write_due(Some(START + 150_000_000), &mut out);
        // Then a call that ended before the last one shown, read later still.
        table.push(vec![at(50, 1, "straggler")], START);
        let mut unfinished = at(5, 0, "open");
        unfinished.duration_ns = None;
        unfinished.unfinished = true;
        table.push(vec![unfinished], START + 200_000);
        table.write_due(None, &mut out);
        let t = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = t.lines().skip(2).filter(|l| !l.starts_with(' ')).collect();
        let names: Vec<&str> = rows
            .iter()
            .map(|r| r.split_whitespace().nth(3).unwrap())
            .collect();
        assert_eq!(names, ["b", "c", "d", "long", "straggler", "open"], "{t}");
        // b ended at 15 µs, c and d at 20 and 21 µs, long at 100 µs.
        let times: Vec<&str> = rows.iter().map(|r| &r[..15]).collect();
        assert_eq!(
            times,
            [
                "00:06:40.123471",
                "00:06:40.123476",
                "00:06:40.123477",
                "00:06:40.123556",
                "late           ",
                "-              "
            ],
            "{t}"
        );
        assert!(t.contains("    ended=00:06:40.123507\n"), "{t}");
        assert!(t.contains("    started=00:06:40.123461\n"), "{t}");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped() {
        let v = ValueKind::Bytes {
            bytes: b"ok\xff\xfe\"q\"\n\xe2\x82\xac".to_vec(),
            truncated: true,
        };
        assert_eq!(show(&v), r#""ok\xff\xfe\"q\"\n€"…"#);
        assert_eq!(show(&s("a\"\u{1b}")), r#""a\"\u{1b}""#);
    }

    #[test]
    fn durations_and_calls_without_values() {
        let mut c = call("p", "main.f", vec![]);
        c.returns = None;
        c.duration_ns = Some(2_500_000_000);
        let row = |c: &CallRecord| {
            text(std::slice::from_ref(c))
                .lines()
                .nth(2)
                .unwrap()
                .to_string()
        };
        assert!(row(&c).ends_with("    2.500s"));
        c.duration_ns = Some(1_500_000);
        assert!(row(&c).ends_with("   1.500ms"));
        c.duration_ns = Some(200_000 * 1_000_000_000);
        assert!(row(&c).ends_with("    55.56h"), "{}", row(&c));
        c.duration_ns = None;
        c.unfinished = true;
        let t = text(&[c]);
        assert!(t.lines().nth(2).unwrap().ends_with("unfinished"));
        assert_eq!(t.lines().count(), 4, "the started= line only:\n{t}");
    }
}
