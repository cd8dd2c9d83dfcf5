/* Which probe fired: the attach cookie (Linux 5.15), or, built with GP_NO_COOKIE for the
 * kernels before it, the process and the address hit.
 *
 * A cookie holds the probe's configuration and budget slot (attach/mod.rs, cookie()).
 * Without cookies the agent writes the same value into `sites` for every address its
 * uprobe has in the process (attach/sites.rs, from /proc/PID/maps at attach), and the
 * program looks it up. A uprobe's handlers run with the instruction pointer set back to
 * the breakpoint's address (kernel/events/uprobes.c, handle_swbp: "change it in advance
 * for ->handler() and restart"; bpftrace's reg("ip") shows the symbol's address). A uretprobe's
 * handlers run with the instruction pointer at the caller's return address, which names
 * no probe: the agent attaches no return probe there (C results and latency), and a hit
 * found in no entry of `sites` has no configuration, as a freed one. */
#ifndef GPROBE_COOKIE_H
#define GPROBE_COOKIE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "regs.h"

#ifdef GP_NO_COOKIE

/* A value whose configuration slot no probe has (GP_CFG_SLOT is past GP_MAX_PROBES). */
#define GP_NO_SITE 0xffffffffULL

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct gp_site_key);
	__type(value, __u64);
} sites SEC(".maps");

/* Where a hit's key is made, one per CPU: a hit runs alone on its CPU (oncpu.h), and the
 * 512 bytes of stack its frames share have no room left for it. */
#define GP_SITE_CPUS 1024
struct gp_site_key gp_hit_site[GP_SITE_CPUS] SEC(".bss");
#define GP_HIT_SITE() (&gp_hit_site[bpf_get_smp_processor_id() & (GP_SITE_CPUS - 1)])

/* The probe's cookie; `k` is where the key is made (the main program takes no stack). */
static __always_inline __u64 gp_cookie(struct x86_regs *r, struct gp_site_key *k)
{
	k->tgid = bpf_get_current_pid_tgid() >> 32;
	k->_pad = 0;
	k->addr = r->ip;
	__u64 *c = bpf_map_lookup_elem(&sites, k);
	return c ? *c : GP_NO_SITE;
}

#else

#define GP_HIT_SITE() ((struct gp_site_key *)0)
#define gp_cookie(r, k) ((void)(k), bpf_get_attach_cookie(r))

#endif

#endif
