/* The maps of process tracking and holds, shared by the uprobe object (gprobe.bpf.c, whose
 * dynamic loader hook holds processes) and the process hooks (procs.bpf.c: exec, fork,
 * exit). Both objects define them identically: the agent creates them with the first and
 * hands the same maps to the second. */
#ifndef GPROBE_PROCMAPS_H
#define GPROBE_PROCMAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"

#define GP_SIGCONT 18
#define GP_SIGSTOP 19

/* What the agent tells the hooks: its tgid and the lease of its holds. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gp_control);
} control SEC(".maps");

/* Processes stopped until the agent has attached to them, by pid: its queue of work. It
 * resumes each when it has attached (or at the hold deadline), reads the ones whose event
 * was lost from here, and pins this map so that a later agent finds what a dead one left.
 * The exit hook resumes them all when the agent dies. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct gp_hold);
} held SEC(".maps");

/* Exec candidates: processes whose executable has one of these inode numbers, or whose
 * name (comm, the executed path's last component) is one of these, are held at exec until
 * the agent has attached to them. The agent decides whether they are selected. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} watch_ino SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, char[GP_COMM_LEN]);
	__type(value, __u8);
} watch_comm SEC(".maps");

/* The processes the agent traces, by tgid: their forked children are held at fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} proc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gp_proc_exec);
} proc_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gp_proc_stats);
} proc_stats SEC(".maps");

static __always_inline struct gp_control *control_of(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&control, &zero);
}

static __always_inline struct gp_proc_stats *proc_stats_of(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&proc_stats, &zero);
}

/* Whether the agent renews its lease: a stopped, stuck or dying agent holds nothing. */
static __always_inline int lease_fresh(const struct gp_control *ctl, __u64 now)
{
	return ctl && ctl->agent && now < ctl->holds_until_ns;
}

/* Writes a process event of `size` bytes; one that finds the ring full is counted. */
static __always_inline void proc_output(const void *ev, __u32 size)
{
	if (bpf_ringbuf_output(&proc_events, (void *)ev, size, 0)) {
		struct gp_proc_stats *st = proc_stats_of();
		if (st)
			st->lost++;
	}
}

/* Stops the current process (SIGSTOP, taken before it returns to user space) and records
 * the hold first: a hold the agent does not know of is one it cannot undo. Returns the
 * hold's id (its time), or 0 when it is not held. */
static __always_inline __u64 hold_current(const struct gp_control *ctl, __u32 pid, __u32 kind,
					  __u64 now)
{
	struct gp_hold h = { .since_ns = now, .holder = ctl->agent, .kind = kind };
	if (bpf_map_update_elem(&held, &pid, &h, BPF_ANY))
		return 0;
	if (bpf_send_signal(GP_SIGSTOP) == 0)
		return now;
	bpf_map_delete_elem(&held, &pid);
	struct gp_proc_stats *st = proc_stats_of();
	if (st)
		st->hold_failed++;
	return 0;
}

#endif
