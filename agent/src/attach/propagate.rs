//! Trace-context propagation's side of the tracer: loading the header writer
//! (gprobe_propagate, or its dry run) once, on first use, with the reason when the kernel
//! refuses it, and the configurations of its probes (outgoing request, its end, the
//! header write and the connection).

use super::error::WriterRefused;
use super::BpfTracer;
use crate::abi::{self, GpProbeCfg};
use crate::engine::{ProbeConfig, TraceError};
use crate::resolve::propagate::PropagatePlan;
use aya::programs::UProbe;

impl WriterRefused {
    /// The reason: the capability gprobe lacks, or the lockdown mode this kernel is in.
    fn now() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if has_sys_admin(&status) == Some(false) {
            return WriterRefused::NoSysAdmin;
        }
        let lockdown = std::fs::read_to_string("/sys/kernel/security/lockdown")
            .ok()
            .and_then(|l| lockdown_mode(&l));
        WriterRefused::Kernel { lockdown }
    }
}

/// Whether the effective capabilities in the text of /proc/self/status (`CapEff:` in hex)
/// hold CAP_SYS_ADMIN (bit 21); `None` when the line is missing or unreadable.
fn has_sys_admin(status: &str) -> Option<bool> {
    const CAP_SYS_ADMIN: u32 = 21;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps >> CAP_SYS_ADMIN & 1 == 1)
}

/// The mode in force in the text of /sys/kernel/security/lockdown (`none [integrity]
/// confidentiality`), unless it is `[none]`.
fn lockdown_mode(text: &str) -> Option<String> {
    let on = text.split_whitespace().find(|w| w.starts_with('['))?;
    (on != "[none]").then(|| on.to_string())
}

impl BpfTracer {
    /// Loads gprobe_propagate (once): Err says why the kernel refused it.
    pub(super) fn load_propagate(&mut self) -> Result<(), WriterRefused> {
        if let Some(r) = &self.propagate_loaded {
            return r.clone();
        }
        let p: &mut UProbe = self
            .ebpf
            .program_mut(self.propagate_prog)
            .and_then(|p| p.try_into().ok())
            .expect("BPF object has its propagation programs");
        let r = p.load().map_err(|e| {
            tracing::debug!("gprobe_propagate: {e:#}");
            WriterRefused::now()
        });
        self.propagate_loaded = Some(r.clone());
        r
    }

    /// The configurations of the header writer's probes (`plan`); the reason the kernel
    /// refused gprobe_propagate, if it did (then only the requests are counted).
    pub(super) fn add_propagate_configs(
        &mut self,
        plan: &PropagatePlan,
    ) -> Result<(ProbeConfig, Option<String>), TraceError> {
        let one = |kind, cap: Option<&crate::plan::CapturePlan>| {
            let mut c = GpProbeCfg {
                kind,
                n_captures: cap.is_some() as u8,
                ..Default::default()
            };
            c.caps[0] = cap.map(|c| c.bpf).unwrap_or_default();
            c
        };
        let mut ids = Vec::new();
        let mut add = |this: &mut Self, c: &GpProbeCfg| match this.add_config(c) {
            Ok(id) => {
                ids.push(id);
                Ok(id)
            }
            Err(e) => {
                for id in ids.drain(..) {
                    this.remove_config(id);
                }
                Err(e)
            }
        };
        let entry = add(
            self,
            &one(abi::PROBE_HTTP_OUT, plan.out.entry_captures.first()),
        )?;
        let done = add(self, &one(abi::PROBE_HTTP_DONE, None))?;
        let cfg = |extra_entries| ProbeConfig {
            entry,
            extra_entries,
            ret: Some(done),
        };
        if let Err(why) = self.load_propagate() {
            // The requests are still counted; no connection is followed.
            // The engine and the stats carry the reason as the text users see.
            return Ok((cfg(vec![]), Some(why.to_string())));
        }
        let write = GpProbeCfg {
            kind: abi::PROBE_HTTP_WRITE,
            aux: plan.writer_type,
            ..Default::default()
        };
        let w = add(self, &write)?;
        let conn = add(
            self,
            &one(abi::PROBE_HTTP_CONN, plan.conn.entry_captures.first()),
        )?;
        self.propagate_cfgs.insert(w);
        Ok((cfg(vec![w, conn]), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_the_lockdown_mode_in_force() {
        assert_eq!(lockdown_mode("[none] integrity confidentiality\n"), None);
        assert_eq!(
            lockdown_mode("none [integrity] confidentiality\n").as_deref(),
            Some("[integrity]")
        );
        assert_eq!(lockdown_mode(""), None);
        let refused = |lockdown: Option<&str>| WriterRefused::Kernel {
            lockdown: lockdown.map(str::to_string),
        };
        assert_eq!(
            refused(Some("[integrity]")).to_string(),
            "this kernel does not let BPF programs write to a process's memory \
             (bpf_probe_write_user) (lockdown: [integrity]): kernels in lockdown mode (e.g. \
             with Secure Boot) forbid it"
        );
        assert_eq!(
            refused(None).to_string(),
            "this kernel does not let BPF programs write to a process's memory \
             (bpf_probe_write_user): kernels in lockdown mode (e.g. with Secure Boot) forbid it"
        );
    }

    #[test]
    fn a_gprobe_without_cap_sys_admin_is_told_so_not_blamed_on_the_kernel() {
        // The chart's agent (BPF, PERFMON, SYS_PTRACE, DAC_READ_SEARCH, KILL, SYS_NICE,
        // SYS_RESOURCE) and root.
        assert_eq!(
            has_sys_admin("Name:\tgprobe\nCapEff:\t000000c001880024\n"),
            Some(false)
        );
        assert_eq!(has_sys_admin("CapEff:\t000001ffffffffff\n"), Some(true));
        assert_eq!(has_sys_admin("CapEff:\t0000000000200000\n"), Some(true));
        assert_eq!(has_sys_admin("Name:\tgprobe\n"), None);
        assert_eq!(
            WriterRefused::NoSysAdmin.to_string(),
            "the kernel lets only programs loaded with CAP_SYS_ADMIN write to a process's memory \
             (bpf_probe_write_user), and gprobe runs without it: give gprobe CAP_SYS_ADMIN (the \
             Helm chart's agent.traceparentWrites: true)"
        );
    }
}
