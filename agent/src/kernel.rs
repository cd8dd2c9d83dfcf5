//! What the running kernel offers gprobe: each kernel feature it uses, whether this kernel
//! has it (found by trying it at start: attach/features.rs), and what a user loses where
//! it is missing. One model for every place that says so: the line at start, `gprobe
//! check`, the summary file, the agent's /readyz and the ProbeAttachment status.

use serde::Serialize;
use std::fmt;

/// A kernel feature gprobe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureName {
    /// Kernel type information (/sys/kernel/btf/vmlinux).
    Btf,
    /// The uprobe perf PMU.
    Uprobes,
    /// BPF ring buffers.
    Ringbuf,
    /// BPF cookies on uprobes (bpf_get_attach_cookie).
    BpfCookie,
    /// BPF links on perf events.
    PerfLink,
    /// The bpf_loop helper.
    BpfLoop,
    /// uprobe_multi links.
    UprobeMulti,
    /// The task kfuncs of the process hooks: bpf_task_from_pid, bpf_task_release,
    /// bpf_send_signal_task.
    TaskKfuncs,
    /// BPF memory charged to the memory cgroup rather than RLIMIT_MEMLOCK.
    MemcgAccounting,
    /// bpf_probe_write_user (not refused by lockdown).
    ProbeWriteUser,
}

/// Every feature, in the order they are listed, with the release that added it (for the
/// reader: the decision is always made by trying the feature) and what its absence costs.
const FEATURES: [(FeatureName, &str, &str, Need); 10] = [
    (FeatureName::Btf, "btf", "kernel BTF, CONFIG_DEBUG_INFO_BTF=y", Need::Required),
    (FeatureName::Uprobes, "uprobes", "CONFIG_UPROBE_EVENTS=y", Need::Required),
    (FeatureName::Ringbuf, "ringbuf", "Linux 5.8", Need::Required),
    (
        FeatureName::BpfCookie,
        "bpf_cookie",
        "Linux 5.15",
        Need::Optional(
            "a probe is found by its address in each process (gprobe writes them at attach), \
             and the uprobe program without cookies has no bpf_loop either (Go maps are not \
             searched, as without bpf_loop); a C function's return cannot be probed (a return \
             probe fires at its caller's address): a probe with a C function's `result` or \
             latency is refused with the reason; an address of a process takes one probe (a \
             second ProbeSpec on a function already probed there is refused with the reason)",
        ),
    ),
    (
        FeatureName::PerfLink,
        "perf_link",
        "Linux 5.15",
        Need::Optional(
            "the uprobe program is set on each uprobe's perf event (PERF_EVENT_IOC_SET_BPF); \
             without a link no cookie is passed, so probes are found as without bpf_cookie",
        ),
    ),
    (
        FeatureName::BpfLoop,
        "bpf_loop",
        "Linux 5.17",
        Need::Optional(
            "Go maps are not searched: `Header[...]` captures are recorded empty and \
             truncated, a handler does not join its caller's trace (its spans start a \
             trace), and propagate writes a traceparent only into requests without other \
             headers",
        ),
    ),
    (
        FeatureName::UprobeMulti,
        "uprobe_multi",
        "Linux 6.6",
        Need::Optional("one perf event per uprobe: attaching and detaching take longer"),
    ),
    (
        FeatureName::TaskKfuncs,
        "task_kfuncs",
        "Linux 6.13",
        Need::Optional(
            "a forked child of a traced process is not held (its calls before gprobe attaches \
             are missed; counted as not held); a guardian process resumes what a killed gprobe held",
        ),
    ),
    (
        FeatureName::MemcgAccounting,
        "memcg_accounting",
        "Linux 5.11",
        Need::Optional(
            "BPF memory is charged to RLIMIT_MEMLOCK: gprobe raises the limit, which needs \
             CAP_SYS_RESOURCE (chart: agent.raiseMemlock=true)",
        ),
    ),
    (
        FeatureName::ProbeWriteUser,
        "probe_write_user",
        "kernel lockdown off and CAP_SYS_ADMIN",
        Need::Optional(
            "no traceparent is written into requests (propagate: true): spans are still \
             traced, the requests carry no traceparent",
        ),
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// gprobe cannot trace without it.
    Required,
    /// gprobe does this instead.
    Optional(&'static str),
}

impl FeatureName {
    fn entry(self) -> &'static (FeatureName, &'static str, &'static str, Need) {
        FEATURES
            .iter()
            .find(|f| f.0 == self)
            .expect("every feature is in FEATURES")
    }

    pub fn as_str(self) -> &'static str {
        self.entry().1
    }

    /// Where it comes from: the kernel release that added it, or the kernel option.
    pub fn origin(self) -> &'static str {
        self.entry().2
    }

    pub fn required(self) -> bool {
        self.entry().3 == Need::Required
    }

    /// What gprobe does without it (`None` for what it cannot trace without).
    pub fn instead(self) -> Option<&'static str> {
        match self.entry().3 {
            Need::Required => None,
            Need::Optional(s) => Some(s),
        }
    }

    pub fn all() -> impl Iterator<Item = FeatureName> {
        FEATURES.iter().map(|f| f.0)
    }
}

impl fmt::Display for FeatureName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why BPF features could not be tried.
pub const NOT_ALLOWED: &str =
    "loading a BPF program was refused here: gprobe needs root with CAP_BPF and CAP_PERFMON";

/// What trying a feature found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum Found {
    Available,
    Missing,
    /// It could not be tried (e.g. without CAP_BPF): why.
    Unknown(String),
}

/// The running kernel's features.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelFeatures {
    /// `uname -r`.
    pub release: String,
    pub features: Vec<(FeatureName, Found)>,
}

impl KernelFeatures {
    pub fn found(&self, name: FeatureName) -> &Found {
        static NOT_TRIED: Found = Found::Unknown(String::new());
        self.features
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f)
            .unwrap_or(&NOT_TRIED)
    }

    pub fn has(&self, name: FeatureName) -> bool {
        *self.found(name) == Found::Available
    }

    /// The features this kernel lacks.
    pub fn missing(&self) -> impl Iterator<Item = FeatureName> + '_ {
        self.features
            .iter()
            .filter(|(_, f)| *f == Found::Missing)
            .map(|(n, _)| *n)
    }

    /// Why gprobe cannot trace on this kernel, when a feature it needs is missing.
    pub fn blocker(&self) -> Option<String> {
        let missing: Vec<String> = self
            .missing()
            .filter(|n| n.required())
            .map(|n| format!("{n} ({})", n.origin()))
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "this kernel ({}) lacks what gprobe's uprobe programs need: {}; gprobe traces \
                 on Linux 5.10 and later (README: Kernels)",
                self.release,
                missing.join(", ")
            )
        })
    }

    /// One line a feature: what is available, and for each missing one what gprobe does
    /// instead.
    pub fn lines(&self) -> Vec<String> {
        self.features
            .iter()
            .map(|(n, f)| match f {
                Found::Available => format!("{n}: available"),
                Found::Missing => match n.instead() {
                    Some(instead) => format!("{n}: missing ({}): {instead}", n.origin()),
                    None => format!("{n}: missing ({}): gprobe cannot trace", n.origin()),
                },
                Found::Unknown(why) => format!("{n}: not checked: {why}"),
            })
            .collect()
    }

    /// Why the features that need loading a program could not be tried (without CAP_BPF),
    /// if so: then the kernel was not checked.
    pub fn not_checked(&self) -> Option<&'static str> {
        self.features
            .iter()
            .any(|(_, f)| matches!(f, Found::Unknown(why) if why == NOT_ALLOWED))
            .then_some(NOT_ALLOWED)
    }

    /// The one line said at start: the release, and what is missing with its cost.
    pub fn summary(&self) -> String {
        let missing: Vec<FeatureName> = self.missing().collect();
        if missing.is_empty() {
            return format!(
                "kernel {}: every feature gprobe uses is available",
                self.release
            );
        }
        let list: Vec<String> = missing
            .iter()
            .map(|n| match n.instead() {
                Some(instead) => format!("{n} missing: {instead}"),
                None => format!("{n} missing ({}): gprobe cannot trace", n.origin()),
            })
            .collect();
        format!("kernel {}: {}", self.release, list.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(missing: &[FeatureName]) -> KernelFeatures {
        KernelFeatures {
            release: "6.1.0-56-amd64".into(),
            features: FeatureName::all()
                .map(|n| {
                    let f = if missing.contains(&n) {
                        Found::Missing
                    } else {
                        Found::Available
                    };
                    (n, f)
                })
                .collect(),
        }
    }

    #[test]
    fn a_kernel_with_everything_says_so_in_one_line() {
        let k = with(&[]);
        assert_eq!(k.blocker(), None);
        assert_eq!(
            k.summary(),
            "kernel 6.1.0-56-amd64: every feature gprobe uses is available"
        );
        assert!(k.lines().iter().all(|l| l.ends_with(": available")));
    }

    #[test]
    fn a_missing_optional_feature_says_what_gprobe_does_instead() {
        let k = with(&[FeatureName::TaskKfuncs, FeatureName::UprobeMulti]);
        assert_eq!(k.blocker(), None);
        let s = k.summary();
        assert!(
            s.contains("uprobe_multi missing: one perf event per uprobe"),
            "{s}"
        );
        assert!(s.contains("task_kfuncs missing: a forked child"), "{s}");
        let lines = k.lines();
        assert!(lines.contains(&format!(
            "task_kfuncs: missing (Linux 6.13): {}",
            FeatureName::TaskKfuncs.instead().unwrap()
        )));
    }

    #[test]
    fn a_missing_required_feature_blocks_tracing_and_names_what_is_needed() {
        let k = with(&[
            FeatureName::Ringbuf,
            FeatureName::BpfCookie,
            FeatureName::PerfLink,
            FeatureName::BpfLoop,
        ]);
        let b = k.blocker().unwrap();
        assert!(
            b.contains("lacks what gprobe's uprobe programs need: ringbuf (Linux 5.8);"),
            "{b}"
        );
        for optional in ["bpf_loop", "bpf_cookie", "perf_link"] {
            assert!(!b.contains(optional), "{optional} is not needed: {b}");
        }
        assert!(b.starts_with("this kernel (6.1.0-56-amd64) lacks"), "{b}");
        assert!(with(&[
            FeatureName::BpfLoop,
            FeatureName::BpfCookie,
            FeatureName::PerfLink
        ])
        .blocker()
        .is_none());
    }

    #[test]
    fn without_the_right_to_load_a_program_the_kernel_is_not_checked() {
        let mut k = with(&[]);
        assert_eq!(k.not_checked(), None);
        k.features[3].1 = Found::Unknown("fork failed".into());
        assert_eq!(k.not_checked(), None, "one feature that could not be tried");
        k.features[2].1 = Found::Unknown(NOT_ALLOWED.into());
        assert_eq!(k.not_checked(), Some(NOT_ALLOWED));
    }

    #[test]
    fn serializes_as_names_and_states() {
        let k = with(&[FeatureName::TaskKfuncs]);
        let v = serde_json::to_value(&k).unwrap();
        assert_eq!(v["features"][7][0], "task_kfuncs");
        assert_eq!(v["features"][7][1]["state"], "missing");
    }
}
