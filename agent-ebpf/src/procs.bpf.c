// SPDX-License-Identifier: GPL-2.0
/* gprobe's process hooks: BTF tracepoints on exec, fork and exit that report processes to
 * the agent and hold (stop) the ones it may trace until it has attached to them.
 *
 * A hold never outlives the agent that made it. Holds are made only while the agent lives
 * (its task, looked up by tgid, is not exiting) and renews its lease; when the agent dies
 * (kill -9, OOM kill, crash), the exit hook of its first exiting thread resumes every
 * process it held, before the kernel closes its files (and with them these hooks).
 *
 * Loaded by the agent's own loader (agent/src/attach/hooks.rs), not by aya: these programs
 * call kernel functions (kfuncs), which it links against the kernel's BTF.
 *
 * Built a second time with GP_NO_KFUNCS (procs_compat.bpf.o) for kernels without those
 * kfuncs (before 6.13): there the hooks hold only at exec (the current process stops
 * itself, bpf_send_signal), a forked child is reported but not held (signalling another
 * task needs bpf_send_signal_task), and what a dead agent held is resumed by its guardian
 * process (agent/src/attach/guardian.rs) instead of the exit hook. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "procmaps.h"

char LICENSE[] SEC("license") = "GPL";

#define GP_PIDTYPE_TGID 1
#define GP_PF_EXITING 0x4        /* task_struct.flags: the task is exiting */
#define GP_SIGNAL_GROUP_EXIT 0x4 /* signal_struct.flags: the whole thread group exits */
#define GP_EBUSY 16

/* The kernel structures these programs read, reduced to the fields they use; CO-RE
 * relocations (preserve_access_index) place them at this kernel's offsets. */
struct inode {
	unsigned long i_ino;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct linux_binprm {
	struct file *file;
	const char *filename;
} __attribute__((preserve_access_index));

struct signal_struct {
	unsigned int flags;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	void *mm;
	struct signal_struct *signal;
} __attribute__((preserve_access_index));

#ifndef GP_NO_KFUNCS
/* Kernel functions (kfuncs, Linux 6.13+ for the last); the loader links each call to the
 * kernel's function of that name. */
extern struct task_struct *bpf_task_from_pid(__s32 pid);
extern void bpf_task_release(struct task_struct *p);
extern int bpf_send_signal_task(struct task_struct *task, int sig, int type, __u64 value);
#endif

/* Whether the agent may hold a process now: it renews its lease and it is alive (not
 * exiting: after kill -9 its hooks stay loaded while the kernel tears it down). Without
 * kfuncs only the lease is known: the guardian ends it when the agent dies. */
static __always_inline int agent_alive(const struct gp_control *ctl, __u64 now)
{
	if (!lease_fresh(ctl, now))
		return 0;
#ifdef GP_NO_KFUNCS
	return 1;
#else
	struct task_struct *agent = bpf_task_from_pid(ctl->agent);
	if (!agent)
		return 0;
	int dying = (agent->flags & GP_PF_EXITING) || (agent->signal->flags & GP_SIGNAL_GROUP_EXIT);
	bpf_task_release(agent);
	return !dying;
#endif
}

#ifndef GP_NO_KFUNCS
/* Sends `sig` to the process of `task`. The kernel queues a signal sent from here on a
 * per-CPU work item (a tracepoint runs with preemption off) and refuses another while that
 * one is queued (EBUSY), which its interrupt clears within microseconds: retried. */
static __always_inline int signal_process(struct task_struct *task, int sig)
{
	int r = -GP_EBUSY;
	for (int i = 0; i < 64 && r == -GP_EBUSY; i++)
		r = bpf_send_signal_task(task, sig, GP_PIDTYPE_TGID, 0);
	return r;
}
#endif

/* Whether a process that just exec'd is one the agent may want: then it is stopped before
 * its first instruction, and the agent attaches before resuming it. */
static __always_inline int exec_candidate(__u64 ino, const char *comm)
{
	return bpf_map_lookup_elem(&watch_ino, &ino) || bpf_map_lookup_elem(&watch_comm, comm);
}

SEC("tp_btf/sched_process_exec")
int gprobe_exec(unsigned long long *ctx)
{
	struct linux_binprm *bprm = (struct linux_binprm *)ctx[2];
	__u32 zero = 0;
	struct gp_proc_exec *ex = bpf_map_lookup_elem(&proc_scratch, &zero);
	if (!ex)
		return 0;
	ex->ev.kind = GP_EV_EXEC;
	ex->ev.pid = bpf_get_current_pid_tgid() >> 32;
	ex->ev.ppid = 0;
	ex->ev._pad = 0;
	ex->ev.hold = 0;
	ex->ino = bprm->file->f_inode->i_ino;
	ex->filename[0] = 0;
	bpf_probe_read_kernel_str(ex->filename, sizeof(ex->filename), bprm->filename);
	char comm[GP_COMM_LEN] = {};
	bpf_get_current_comm(comm, sizeof(comm));
	if (exec_candidate(ex->ino, comm)) {
		__u64 now = bpf_ktime_get_ns();
		struct gp_control *ctl = control_of();
		if (ctl && agent_alive(ctl, now))
			ex->ev.hold = hold_current(ctl, ex->ev.pid, GP_HOLD_EXEC, now);
	}
	proc_output(ex, sizeof(*ex));
	return 0;
}

/* A process forked (not a thread): the agent attaches to the child of a traced process,
 * which runs the same program (postgres backends, nginx workers) and which the kernel's
 * per-process uprobes do not cover. Such a child is held: the stop signal is queued before
 * the kernel first wakes it, so it stops before its first instruction in user space. */
SEC("tp_btf/sched_process_fork")
int gprobe_fork(unsigned long long *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	if (child->pid != child->tgid)
		return 0; /* a thread */
	if (child->mm == parent->mm)
		return 0; /* vfork (posix_spawn, os/exec): it runs no code of its own until it execs */
	struct gp_proc_event ev = { .kind = GP_EV_FORK, .pid = child->tgid, .ppid = parent->tgid };
#ifndef GP_NO_KFUNCS
	if (bpf_map_lookup_elem(&traced, &ev.ppid)) {
		__u64 now = bpf_ktime_get_ns();
		struct gp_control *ctl = control_of();
		if (ctl && agent_alive(ctl, now)) {
			struct gp_hold h = {
				.since_ns = now,
				.holder = ctl->agent,
				.kind = GP_HOLD_FORK,
				.ppid = ev.ppid,
			};
			if (bpf_map_update_elem(&held, &ev.pid, &h, BPF_ANY) == 0) {
				if (signal_process(child, GP_SIGSTOP) == 0) {
					ev.hold = now;
				} else {
					bpf_map_delete_elem(&held, &ev.pid);
					struct gp_proc_stats *st = proc_stats_of();
					if (st)
						st->hold_failed++;
				}
			}
		}
	}
#endif
	proc_output(&ev, sizeof(ev));
	return 0;
}

#ifndef GP_NO_KFUNCS
/* Resumes one process the dying agent held (a bpf_for_each_map_elem callback). */
static long release_one(void *map, __u32 *pid, struct gp_hold *h, __u32 *agent)
{
	if (h->holder != *agent)
		return 0;
	struct task_struct *t = bpf_task_from_pid(*pid);
	if (t) {
		if (signal_process(t, GP_SIGCONT) == 0) {
			struct gp_proc_stats *st = proc_stats_of();
			if (st)
				st->released++;
		}
		bpf_task_release(t);
	}
	bpf_map_delete_elem(map, pid);
	return 0;
}
#endif

SEC("tp_btf/sched_process_exit")
int gprobe_exit(unsigned long long *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
#ifndef GP_NO_KFUNCS
	struct gp_control *ctl = control_of();
	if (ctl && ctl->agent && ctl->agent == tgid) {
		/* A thread of the agent: when the agent itself is going (its main thread exits,
		 * or the whole group: kill -9, OOM kill, a crash), it holds nothing more and what
		 * it held runs on. This tracepoint comes before the kernel closes the agent's
		 * files, that is while these programs are still attached. */
		struct task_struct *me = bpf_get_current_task_btf();
		if ((__u32)pid_tgid == tgid || (me->signal->flags & GP_SIGNAL_GROUP_EXIT)) {
			ctl->holds_until_ns = 0;
			__u32 agent = tgid;
			bpf_for_each_map_elem(&held, release_one, &agent, 0);
		}
	}
#endif
	if ((__u32)pid_tgid != tgid)
		return 0; /* a thread, not the process */
	/* Its pid may come back as another process: that one is neither traced nor held. */
	bpf_map_delete_elem(&traced, &tgid);
	bpf_map_delete_elem(&held, &tgid);
	struct gp_proc_event ev = { .kind = GP_EV_EXIT, .pid = tgid };
	proc_output(&ev, sizeof(ev));
	return 0;
}
