//! Records of error captures, made as the BPF side writes them (GpCapture's CAP_ERROR),
//! to texts.

use super::*;
use crate::events::{DecodeCtx, TypeLookup};
use crate::plan::{ErrTable, ErrType, TypeNames};

const STR: u8 = abi::EF_STR;
const IFACE: u8 = abi::EF_IFACE;
const WORD: u8 = abi::EF_WORD;

// Type descriptor addresses of the test binary.
const OP: u64 = 0x1000;
const SYSCALL: u64 = 0x2000;
const ERRNO: u64 = 0x3000;
const TCP: u64 = 0x4000;
const URL: u64 = 0x5000;
const PATH: u64 = 0x6000;
const DNS: u64 = 0x7000;
const MSG: u64 = 0x8000;
const DEADLINE: u64 = 0x9000;
const MINE: u64 = 0xa000;

fn ty(name: &str, hash: u32, fields: &[(u8, u8)], format: ErrFormat) -> ErrType {
    ErrType {
        name: name.into(),
        hash,
        fields: fields.to_vec(),
        format,
    }
}

fn table() -> ErrTable {
    ErrTable {
        id: 9,
        types: vec![
            ty(
                "*net.OpError",
                1,
                &[(STR, 0), (STR, 16), (IFACE, 32), (IFACE, 48), (IFACE, 64)],
                ErrFormat::Op,
            ),
            ty(
                "*os.SyscallError",
                2,
                &[(STR, 0), (IFACE, 16)],
                ErrFormat::Syscall,
            ),
            ty("syscall.Errno", 3, &[(WORD, 0)], ErrFormat::Errno),
            ty(
                "*net.TCPAddr",
                4,
                &[(STR, 0), (WORD, 24), (STR, 32)],
                ErrFormat::HostPort,
            ),
            ty(
                "*url.Error",
                5,
                &[(STR, 0), (STR, 16), (IFACE, 32)],
                ErrFormat::Url,
            ),
            ty(
                "*fs.PathError",
                6,
                &[(STR, 0), (STR, 16), (IFACE, 32)],
                ErrFormat::Path,
            ),
            ty(
                "*net.DNSError",
                7,
                &[(STR, 16), (STR, 32), (STR, 48)],
                ErrFormat::Dns,
            ),
            ty("*errors.errorString", 8, &[(STR, 0)], ErrFormat::Message),
            ty(
                "*poll.DeadlineExceededError",
                10,
                &[],
                ErrFormat::Constant("i/o timeout"),
            ),
        ],
        estale: Some("stale file handle"),
    }
}

fn names() -> TypeNames {
    TypeNames::from_parts(
        &[
            (OP, "*net.OpError"),
            (SYSCALL, "*os.SyscallError"),
            (ERRNO, "syscall.Errno"),
            (TCP, "*net.TCPAddr"),
            (URL, "*url.Error"),
            (PATH, "*fs.PathError"),
            (DNS, "*net.DNSError"),
            (MSG, "*errors.errorString"),
            (DEADLINE, "*poll.DeadlineExceededError"),
            (MINE, "*main.myError"),
        ],
        table(),
    )
}

/// A record being written as BPF writes it.
#[derive(Default)]
struct Rec(Vec<u8>);

enum F<'a> {
    /// A string read whole.
    S(&'a str),
    /// A string cut: its first bytes, its full length.
    Cut(&'a str, u64),
    /// An interface queued as node `child`.
    I(u8),
    Nil,
    W(u64),
    Fault(u8),
}

impl Rec {
    fn node(mut self, ty: u64, fields: &[(u8, F<'_>)]) -> Self {
        self.0.extend_from_slice(&ty.to_le_bytes());
        self.0.extend_from_slice(&0u32.to_le_bytes());
        self.0.extend_from_slice(&[fields.len() as u8, 0, 0, 0]);
        for (off, f) in fields {
            let (kind, flags, child, w, bytes): (u8, u8, u8, u64, &[u8]) = match f {
                F::S(s) => (STR, 0, 0xff, s.len() as u64, s.as_bytes()),
                F::Cut(s, full) => (STR, VAL_TRUNCATED, 0xff, *full, s.as_bytes()),
                F::I(c) => (IFACE, 0, *c, 0, &[]),
                F::Nil => (IFACE, VAL_NIL, 0xff, 0, &[]),
                F::W(w) => (WORD, 0, 0xff, *w, &[]),
                F::Fault(k) => (*k, VAL_FAULT, 0xff, 0, &[]),
            };
            self.0.extend_from_slice(&[kind, *off, flags, child]);
            self.0
                .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            self.0.extend_from_slice(&w.to_le_bytes());
            self.0.extend_from_slice(bytes);
            self.0.resize(self.0.len().next_multiple_of(8), 0);
        }
        self
    }
}

fn decode(r: &Rec, max: u16) -> ValueKind {
    let names = names();
    let ctx = DecodeCtx {
        redact: true,
        types: Some(TypeLookup::with_bias(&names, 0)),
    };
    error_text(&r.0, max, &ctx)
}

fn s(t: &str) -> ValueKind {
    ValueKind::Str {
        text: t.into(),
        truncated: false,
    }
}

fn cut(t: &str) -> ValueKind {
    ValueKind::Str {
        text: t.into(),
        truncated: true,
    }
}

/// `dial tcp 127.0.0.1:1: connect: connection refused`, as net.Dial returns it.
fn dial_refused() -> Rec {
    Rec::default()
        .node(
            OP,
            &[
                (0, F::S("dial")),
                (16, F::S("tcp")),
                (32, F::Nil),
                (48, F::I(1)),
                (64, F::I(2)),
            ],
        )
        .node(
            TCP,
            &[(0, F::S("\x7f\0\0\x01")), (24, F::W(1)), (32, F::S(""))],
        )
        .node(SYSCALL, &[(0, F::S("connect")), (16, F::I(3))])
        .node(ERRNO, &[(0, F::W(111))])
}

#[test]
fn a_dial_error_is_its_text() {
    assert_eq!(
        decode(&dial_refused(), 256),
        s("dial tcp 127.0.0.1:1: connect: connection refused")
    );
}

#[test]
fn a_url_error_quotes_its_url_and_redacts_it() {
    let mut r = Rec::default().node(
        URL,
        &[
            (0, F::S("Get")),
            (16, F::S("http://u:pw@x/\"a\"\n")),
            (32, F::I(1)),
        ],
    );
    // The OpError's nodes follow, renumbered after the url.Error's.
    let inner = Rec::default()
        .node(
            OP,
            &[
                (0, F::S("dial")),
                (16, F::S("tcp")),
                (32, F::Nil),
                (48, F::I(2)),
                (64, F::I(3)),
            ],
        )
        .node(
            TCP,
            &[
                (0, F::S("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01")),
                (24, F::W(8080)),
                (32, F::S("lo")),
            ],
        )
        .node(SYSCALL, &[(0, F::S("connect")), (16, F::I(4))])
        .node(ERRNO, &[(0, F::W(111))]);
    r.0.extend_from_slice(&inner.0);
    assert_eq!(
        decode(&r, 256),
        s("Get \"http://REDACTED@x/\\\"a\\\"\\n\": dial tcp [::1%lo]:8080: connect: connection refused")
    );
}

#[test]
fn path_errors_dns_errors_constants_and_sources() {
    let r = Rec::default()
        .node(
            PATH,
            &[(0, F::S("open")), (16, F::S("/nope")), (32, F::I(1))],
        )
        .node(ERRNO, &[(0, F::W(2))]);
    assert_eq!(decode(&r, 256), s("open /nope: no such file or directory"));

    let r = Rec::default().node(
        DNS,
        &[
            (16, F::S("no such host")),
            (32, F::S("nope.invalid")),
            (48, F::S("127.0.0.53:53")),
        ],
    );
    assert_eq!(
        decode(&r, 256),
        s("lookup nope.invalid on 127.0.0.53:53: no such host")
    );
    let r = Rec::default().node(
        DNS,
        &[
            (16, F::S("no such host")),
            (32, F::S("nope.invalid")),
            (48, F::S("")),
        ],
    );
    assert_eq!(decode(&r, 256), s("lookup nope.invalid: no such host"));

    // A read on a connection: Source and Addr, and a constant-text error.
    let r = Rec::default()
        .node(
            OP,
            &[
                (0, F::S("read")),
                (16, F::S("tcp")),
                (32, F::I(1)),
                (48, F::I(2)),
                (64, F::I(3)),
            ],
        )
        .node(
            TCP,
            &[(0, F::S("\n\0\0\x01")), (24, F::W(5)), (32, F::S(""))],
        )
        .node(
            TCP,
            &[(0, F::S("\n\0\0\x02")), (24, F::W(6)), (32, F::S(""))],
        )
        .node(DEADLINE, &[]);
    assert_eq!(
        decode(&r, 256),
        s("read tcp 10.0.0.1:5->10.0.0.2:6: i/o timeout")
    );
    // An OpError without Net or addresses.
    let r = Rec::default()
        .node(
            OP,
            &[
                (0, F::S("close")),
                (16, F::S("")),
                (32, F::Nil),
                (48, F::Nil),
                (64, F::I(1)),
            ],
        )
        .node(MSG, &[(0, F::S("boom"))]);
    assert_eq!(decode(&r, 256), s("close: boom"));
}

#[test]
fn a_cut_string_ends_the_text_and_the_whole_is_kept_to_max_len() {
    let r = Rec::default()
        .node(
            PATH,
            &[
                (0, F::S("open")),
                (16, F::Cut("/very/lo", 300)),
                (32, F::I(1)),
            ],
        )
        .node(ERRNO, &[(0, F::W(2))]);
    assert_eq!(decode(&r, 8), cut("open /ve"));
    assert_eq!(decode(&r, 256), cut("open /very/lo"));
    assert_eq!(decode(&dial_refused(), 20), cut("dial tcp 127.0.0.1:1"));
}

#[test]
fn anything_unsure_falls_back_to_the_type_name() {
    let name = s("*net.OpError");
    // A wrapped error of the program's own type.
    let r = Rec::default()
        .node(
            OP,
            &[
                (0, F::S("dial")),
                (16, F::S("tcp")),
                (32, F::Nil),
                (48, F::Nil),
                (64, F::I(1)),
            ],
        )
        .node(MINE, &[]);
    assert_eq!(decode(&r, 256), name);
    // A field that could not be read.
    let r = Rec::default().node(
        OP,
        &[
            (0, F::Fault(STR)),
            (16, F::S("tcp")),
            (32, F::Nil),
            (48, F::Nil),
            (64, F::Nil),
        ],
    );
    assert_eq!(decode(&r, 256), name);
    // Fields that are not the table's layout for the type (a hash taken for another's).
    let r = Rec::default().node(OP, &[(0, F::S("dial"))]);
    assert_eq!(decode(&r, 256), name);
    // A nil Err: Go would panic; no text.
    let r = Rec::default().node(
        OP,
        &[
            (0, F::S("dial")),
            (16, F::S("tcp")),
            (32, F::Nil),
            (48, F::Nil),
            (64, F::Nil),
        ],
    );
    assert_eq!(decode(&r, 256), name);
    // A URL that is not ASCII is not quoted here.
    let r = Rec::default()
        .node(
            URL,
            &[(0, F::S("Get")), (16, F::S("http://é")), (32, F::I(1))],
        )
        .node(MSG, &[(0, F::S("EOF"))]);
    assert_eq!(decode(&r, 256), s("*url.Error"));
    let r = Rec::default()
        .node(
            URL,
            &[(0, F::S("Get")), (16, F::S("http://x")), (32, F::I(1))],
        )
        .node(MSG, &[(0, F::S("EOF"))]);
    assert_eq!(decode(&r, 256), s("Get \"http://x\": EOF"));
    // A type of the program's own at the top: its name, as before.
    assert_eq!(
        decode(&Rec::default().node(MINE, &[]), 256),
        s("*main.myError")
    );
    // Nil.
    assert_eq!(decode(&Rec::default().node(0, &[]), 256), ValueKind::Null);
}

#[test]
fn errno_116_needs_the_release_s_text() {
    let r = Rec::default()
        .node(SYSCALL, &[(0, F::S("read")), (16, F::I(1))])
        .node(ERRNO, &[(0, F::W(116))]);
    assert_eq!(decode(&r, 256), s("read: stale file handle"));
    let unknown = TypeNames::from_parts(
        &[(SYSCALL, "*os.SyscallError"), (ERRNO, "syscall.Errno")],
        ErrTable {
            estale: None,
            ..table()
        },
    );
    let ctx = DecodeCtx {
        redact: true,
        types: Some(TypeLookup::with_bias(&unknown, 0)),
    };
    assert_eq!(error_text(&r.0, 256, &ctx), s("*os.SyscallError"));
}

#[test]
fn addresses_print_as_go_prints_them() {
    let f = |b: &'static [u8]| Field {
        kind: STR,
        off: 0,
        flags: 0,
        child: 0xff,
        w: b.len() as u64,
        bytes: b,
    };
    let ip = |b: &'static [u8]| ip_text(&f(b)).ok().unwrap();
    assert_eq!(ip(&[]), "");
    assert_eq!(ip(&[192, 168, 0, 1]), "192.168.0.1");
    assert_eq!(
        ip(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4]),
        "1.2.3.4"
    );
    assert_eq!(ip(&[0; 16]), "::");
    assert_eq!(
        ip(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]),
        "2001:db8::1:0:0:1"
    );
    assert_eq!(
        ip(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]),
        "2001:db8:0:1:1:1:1:1"
    );
    assert_eq!(
        ip(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        "fe80::"
    );
    assert_eq!(ip(&[1, 2, 3]), "?010203");
}
