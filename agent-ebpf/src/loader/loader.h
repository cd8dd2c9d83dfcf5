/* The dynamic loader hook (GP_PROBE_LOADER): gprobe's own uprobe on the loader's
 * `_dl_debug_state`, placed in processes with a probe on a library. Its agent side is
 * agent/src/engine/loader.rs (agent/src/auxiliary/loader/ says where each part lives). */
#ifndef GPROBE_LOADER_H
#define GPROBE_LOADER_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "procmaps.h"

/* The dynamic loader is about to change, or has changed, the process's list of objects
 * (dlopen, dlclose, and the libraries of its start): stop the process until the agent has
 * attached the probes of any library that came, so their first calls are seen. A process
 * whose event is lost is found in the `held` map by the agent. */
static __always_inline int loader_hit(void)
{
	struct gp_proc_event ev = {
		.kind = GP_EV_LOADER,
		.pid = bpf_get_current_pid_tgid() >> 32,
	};
	__u64 now = bpf_ktime_get_ns();
	struct gp_control *ctl = control_of();
	if (ctl && lease_fresh(ctl, now))
		ev.hold = hold_current(ctl, ev.pid, GP_HOLD_LOADER, now);
	proc_output(&ev, sizeof(ev));
	return 0;
}

#endif
