//! Small helpers shared by several stages.

use std::borrow::Cow;

/// `s` with control characters escaped (`\n`, `\u{1b}`), for logs: a file name or symbol
/// chosen by whoever controls a traced program must not forge log lines.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// An error and its causes on one line, `msg: cause: cause`, each cause once.
///
/// gprobe's error types include their cause in their own message (`reading x: No such
/// file or directory (os error 2)`), so that a message logged or stored alone says
/// everything; they also expose it as `source()` for code that looks. Printing every link
/// of such a chain (anyhow's `{:#}`) would repeat each cause: a link whose text the
/// message already holds is left out.
pub fn error_chain<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut out = String::new();
    for e in chain {
        let text = e.to_string();
        if out.is_empty() {
            out = text;
        } else if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// The chain of `e`: itself, then each `source()`.
pub fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(printable("/usr/bin/x"), Cow::Borrowed(_)));
        assert_eq!(
            printable("/tmp/a\nERROR forged\x1b[31m"),
            "/tmp/a\\nERROR forged\\u{1b}[31m"
        );
        assert_eq!(printable("é/ü"), "é/ü");
    }
}

/// Every error type of gprobe's command line whose message holds its cause: printed as a
/// chain, the cause appears once.
#[cfg(test)]
mod chain_tests {
    use super::{causes, error_chain};
    use std::io::Error;
    use std::path::PathBuf;

    fn enoent() -> Error {
        Error::from_raw_os_error(libc::ENOENT)
    }

    const CAUSE: &str = "No such file or directory (os error 2)";

    fn once(e: &(dyn std::error::Error + 'static)) -> String {
        let text = error_chain(causes(e));
        assert_eq!(text.matches(CAUSE).count(), 1, "{text}");
        text
    }

    #[test]
    fn each_cause_is_printed_once() {
        let errors: Vec<Box<dyn std::error::Error + Send + Sync>> = vec![
            Box::new(crate::local::RunError::Read {
                path: "/x/spec.yaml".into(),
                source: enoent(),
            }),
            Box::new(crate::local::RunError::Io(enoent())),
            Box::new(crate::pipeline::PipelineError::Io(enoent())),
            Box::new(crate::resolve::ResolveError::Io {
                path: "/x/bin".into(),
                source: enoent(),
            }),
            Box::new(crate::symbols::SymbolsError::Resolve(
                crate::resolve::ResolveError::Io {
                    path: "/x/bin".into(),
                    source: enoent(),
                },
            )),
            Box::new(crate::symbols::SymbolsError::Maps {
                pid: 1,
                path: "/proc/1/maps".into(),
                source: enoent(),
            }),
            Box::new(crate::symbols::SymbolsError::Io(enoent())),
            Box::new(crate::types::TypesError::Io(enoent())),
            Box::new(crate::export::summary::SummaryError::Write {
                path: PathBuf::from("/x/summary.json"),
                source: enoent(),
            }),
            Box::new(crate::export::summary::SummaryError::Rename {
                from: PathBuf::from("/x/.summary.json.tmp"),
                to: PathBuf::from("/x/summary.json"),
                source: enoent(),
            }),
            Box::new(crate::discover::ProcError::Io {
                pid: 1,
                what: "reading its maps",
                source: enoent(),
            }),
            Box::new(crate::export::otlp::OtlpError::Certificate {
                path: "/x/ca.pem".into(),
                source: enoent(),
            }),
            Box::new(crate::attach::LoadError::Cpus(enoent())),
            Box::new(crate::command::CommandError::Exec {
                path: "/x/prog".into(),
                err: enoent(),
            }),
            Box::new(crate::check::CheckError::Read {
                path: "/x/spec.yaml".into(),
                source: enoent(),
            }),
        ];
        for e in &errors {
            let e: &(dyn std::error::Error + 'static) = e.as_ref();
            once(e);
            // With a context on top, as main.rs adds them.
            let any = anyhow::Error::msg(e.to_string()).context("in context");
            let text = error_chain(any.chain());
            assert_eq!(text.matches(CAUSE).count(), 1, "{text}");
        }
    }

    #[test]
    fn causes_not_in_the_message_are_kept_in_order() {
        let e = anyhow::Error::new(Error::other("disk on fire"))
            .context("writing --summary-file /x")
            .context("stopping");
        assert_eq!(
            error_chain(e.chain()),
            "stopping: writing --summary-file /x: disk on fire"
        );
        // anyhow's own chain printer repeats a cause held in the message; this one does not.
        let r = crate::local::RunError::Read {
            path: "/x/s.yaml".into(),
            source: enoent(),
        };
        let any = anyhow::Error::new(r);
        assert_eq!(format!("{any:#}").matches(CAUSE).count(), 2);
        assert_eq!(
            error_chain(any.chain()),
            format!("reading /x/s.yaml: {CAUSE}")
        );
    }
}
