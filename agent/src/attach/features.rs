//! Finds what the running kernel offers gprobe by trying each feature: a tiny program or
//! map, a function looked up in the kernel's BTF, a file of sysfs. Never from the version
//! number: distributions backport features, and configurations leave them out.

use super::sys::{self, Cmd};
use crate::kernel::{FeatureName, Found, KernelFeatures, NOT_ALLOWED};
use aya::maps::MapType;
use aya::programs::ProgramType;
use aya::sys::{is_helper_supported, is_map_supported, is_program_supported, BpfHelper};
use aya::Btf;
use std::path::Path;
use std::sync::OnceLock;

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe/type";

/// The kernel functions the process hooks call (procs.bpf.c).
pub const TASK_KFUNCS: [&str; 3] = [
    "bpf_task_from_pid",
    "bpf_task_release",
    "bpf_send_signal_task",
];

/// The features of the running kernel, tried once per process.
pub fn probe() -> &'static KernelFeatures {
    static FEATURES: OnceLock<KernelFeatures> = OnceLock::new();
    FEATURES.get_or_init(probe_now)
}

fn probe_now() -> KernelFeatures {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let file = |p: &str| {
        if Path::new(p).exists() {
            Found::Available
        } else {
            Found::Missing
        }
    };
    let mut features = vec![
        (FeatureName::Btf, file(BTF_PATH)),
        (FeatureName::Uprobes, file(UPROBE_PMU)),
    ];
    // Without the right to load a program, every try below would look like a missing
    // feature: the first one tells which.
    let allowed = matches!(is_program_supported(ProgramType::KProbe), Ok(true));
    let bpf = |f: &dyn Fn() -> Found| -> Found {
        if allowed {
            f()
        } else {
            Found::Unknown(NOT_ALLOWED.into())
        }
    };
    let yes = |b: bool| if b { Found::Available } else { Found::Missing };
    let helper = |h: BpfHelper| match is_helper_supported(ProgramType::KProbe, h) {
        Ok(b) => yes(b),
        Err(e) => Found::Unknown(e.to_string()),
    };
    let btf = Btf::from_sys_fs().ok();
    let in_btf = |names: &[&str]| match &btf {
        Some(btf) => yes(names.iter().all(|n| {
            btf.id_by_type_name_kind(n, aya_obj::btf::BtfKind::Func)
                .is_ok()
        })),
        None => Found::Missing,
    };
    features.push((
        FeatureName::Ringbuf,
        bpf(&|| match is_map_supported(MapType::RingBuf) {
            Ok(b) => yes(b),
            Err(e) => Found::Unknown(e.to_string()),
        }),
    ));
    features.push((
        FeatureName::BpfCookie,
        bpf(&|| yes(aya::features().bpf_cookie())),
    ));
    features.push((
        FeatureName::PerfLink,
        bpf(&|| yes(aya::features().bpf_perf_link())),
    ));
    features.push((
        FeatureName::BpfLoop,
        bpf(&|| helper(BpfHelper::BPF_FUNC_loop)),
    ));
    // The kernel function behind uprobe_multi links; the tracer then tries a real link.
    features.push((
        FeatureName::UprobeMulti,
        in_btf(&["bpf_uprobe_multi_link_attach"]),
    ));
    features.push((FeatureName::TaskKfuncs, in_btf(&TASK_KFUNCS)));
    features.push((
        FeatureName::MemcgAccounting,
        bpf(&|| match memlock_charged() {
            Ok(charged) => yes(!charged),
            Err(e) => Found::Unknown(e.to_string()),
        }),
    ));
    // Refused under kernel lockdown, and to a loader without CAP_SYS_ADMIN.
    features.push((
        FeatureName::ProbeWriteUser,
        bpf(&|| helper(BpfHelper::BPF_FUNC_probe_write_user)),
    ));
    // Features turned off by the user, to run the paths of older kernels on this one.
    if let Ok(off) = std::env::var(DISABLE_ENV) {
        for name in off.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match features.iter_mut().find(|(n, _)| n.as_str() == name) {
                Some((n, found)) if !n.required() => *found = Found::Missing,
                Some(_) => {
                    tracing::warn!("{DISABLE_ENV}: {name} cannot be turned off: gprobe needs it")
                }
                None => tracing::warn!(
                    "{DISABLE_ENV}: no feature {name}; the ones that can be turned off: {}",
                    FeatureName::all()
                        .filter(|n| !n.required())
                        .map(FeatureName::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    }
    KernelFeatures { release, features }
}

/// Names features (comma-separated) to treat as missing: gprobe then takes the path it
/// takes on kernels without them (e.g. `task_kfuncs,uprobe_multi` for a 6.1 kernel's).
pub const DISABLE_ENV: &str = "GPROBE_DISABLE_FEATURES";

/// Whether this kernel charges BPF maps to RLIMIT_MEMLOCK (before 5.11; later kernels
/// charge the memory cgroup): a child process with a soft limit of 0 creates a map.
fn memlock_charged() -> Result<bool, MemlockCheckError> {
    // SAFETY: the child only makes system calls and exits (nothing that could need a lock
    // another thread of this process held at fork).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(MemlockCheckError::Fork(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = match create_tiny_map_without_memlock() {
            Ok(()) => 0,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => 1,
            Err(_) => 2,
        };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid || !libc::WIFEXITED(status) {
        return Err(MemlockCheckError::Unfinished);
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(MemlockCheckError::MapCreate),
    }
}

fn create_tiny_map_without_memlock() -> std::io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads into a live rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    lim.rlim_cur = 0;
    // SAFETY: lowers only the soft limit of this (child) process.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // union bpf_attr, map_create: map_type (BPF_MAP_TYPE_ARRAY), key_size, value_size,
    // max_entries.
    let mut attr = [0u8; 48];
    for (i, v) in [2u32, 4, 8, 1].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    // SAFETY: a zero-initialized bpf_attr of the size passed, with no pointers.
    unsafe { sys::bpf_fd(Cmd::MapCreate, &mut attr) }.map(drop)
}

/// Why the memory accounting could not be tried.
#[derive(Debug, thiserror::Error)]
enum MemlockCheckError {
    #[error("fork: {0}")]
    Fork(#[source] std::io::Error),
    #[error("the memory accounting check did not finish")]
    Unfinished,
    #[error("creating a BPF map failed")]
    MapCreate,
}

/// This kernel charges BPF memory to RLIMIT_MEMLOCK, and raising the limit failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "this kernel ({release}) charges BPF memory to RLIMIT_MEMLOCK and raising it failed \
     ({source}): give gprobe CAP_SYS_RESOURCE (chart: --set agent.raiseMemlock=true) or raise \
     the limit (ulimit -l unlimited)"
)]
pub struct MemlockError {
    release: String,
    #[source]
    source: std::io::Error,
}

/// Raises RLIMIT_MEMLOCK where this kernel charges BPF memory to it, and only there.
/// Fails without CAP_SYS_RESOURCE (the hard limit cannot be raised).
pub fn raise_memlock_if_charged(k: &KernelFeatures) -> Result<(), MemlockError> {
    if *k.found(FeatureName::MemcgAccounting) != Found::Missing {
        return Ok(());
    }
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: sets this process's limit from a live rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } == 0 {
        return Ok(());
    }
    Err(MemlockError {
        release: k.release.clone(),
        source: std::io::Error::last_os_error(),
    })
}
