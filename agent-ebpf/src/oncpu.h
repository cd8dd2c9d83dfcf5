/* One run of gprobe's uprobe programs at a time on each CPU.
 *
 * gprobe's program keeps its state in a per-CPU scratch map (its frames then add up to
 * less than the 512 bytes every kernel gives a chain: scripts/bpf_stack.py checks it), and
 * since Linux 6.13 the JIT gives programs of the kprobe type (uprobes included) whose
 * frames take 64 bytes or more a private stack, one per CPU too (kernel/bpf/verifier.c,
 * bpf_enable_priv_stack: PRIV_STACK_ADAPTIVE). Both are safe only while nothing else runs
 * the program on that CPU before it ends, and programs of uprobe_multi links run with migration off but preemption on
 * (kernel/trace/bpf_trace.c, uprobe_prog_run): on a preemptible kernel (Debian's 7.x:
 * "full (lazy)") a thread preempted inside the program and another thread hitting a probe
 * on that CPU overwrote each other's locals (records with the other hit's thread, kind or
 * values, a call id twice, entries never written).
 *
 * So the program attached is a main function that takes no stack at all (nothing it
 * writes can land on the stack of a run it interrupted; llvm-objdump shows no r10 in
 * gprobe_uprobe and gprobe_propagate*: the registers and pointers it needs are read once
 * into the global below, not kept across calls): it counts the runs on its CPU
 * in a global, runs the hit only when none is under way there, and otherwise counts the
 * hit as lost in its probe's stats and keeps the in-flight stack of its goroutine or
 * thread right (an entry holds its place, a return takes its entry's), so that the calls
 * around it still pair with their own returns. The keys of its map lookups are in the
 * global too, one set per nesting level. */
#ifndef GPROBE_ONCPU_H
#define GPROBE_ONCPU_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"
#include "jcc.h"
#include "cookie.h"

#define GP_ONCPU_CPUS 1024 /* CPUs beyond share slots: a hit then counted lost, never wrong */
#define GP_ONCPU_LEVELS 4

struct gp_oncpu_level {
	__u32 id;   /* the hit's configuration: the key of probes and stats */
	__u32 slot; /* its process and spec: the key of returns_off */
	struct gp_inflight_key ik;
	struct gp_site_key site; /* where a kernel without cookies finds the probe (cookie.h) */
	__u64 flags, r14; /* the registers it needs, read at once: the context is then dead */
};

struct gp_oncpu {
	__u32 busy; /* runs of the program under way on this CPU */
	__u32 _pad;
	struct gp_oncpu_level lv[GP_ONCPU_LEVELS];
};

struct gp_oncpu oncpu[GP_ONCPU_CPUS] SEC(".bss");

/* Counts a hit lost (or, a return whose entry was not recorded, unpaired) in its probe's
 * stats, looked up again each time: a pointer kept across the rest would take a stack slot
 * that nested lost hits share. */
static __always_inline void oncpu_count(struct gp_oncpu_level *l, int unpaired)
{
	struct gp_stats *st = bpf_map_lookup_elem(&stats, &l->id);
	if (st)
		__sync_fetch_and_add(unpaired ? &st->unpaired : &st->lost, 1);
}

/* A hit that came while another run was under way on its CPU: counted lost, and its place
 * on the in-flight stack kept as gprobe_hit would. */
static __always_inline void oncpu_lost(struct x86_regs *r, struct gp_oncpu_level *l)
{
	__u64 cookie = gp_cookie(r, &l->site);
	l->id = GP_CFG_SLOT((__u32)cookie);
	l->slot = cookie >> 32;
	l->flags = r->flags;
	l->r14 = r->r14;
	struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &l->id);
	/* A return is lost only if its entry was recorded (below): else it is unpaired, as in
	 * gprobe_hit, and the summary does not count its call's return lost. */
	if (!cfg || cfg->kind != GP_PROBE_RETURN)
		oncpu_count(l, 0);
	if (!cfg || (cfg->kind != GP_PROBE_ENTRY && cfg->kind != GP_PROBE_RETURN))
		return;
	if (cfg->jcc && jcc_taken(cfg->jcc - 1, l->flags))
		return; /* not a call: Go's stack-check jump, taken */
	if (l->slot) {
		__u32 *off = bpf_map_lookup_elem(&returns_off, &l->slot);
		if (off && *off)
			return; /* returns taken off: entries hold no place */
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	l->ik.goroutine = (cfg->flags & GP_CFG_PAIR_BY_THREAD) ? (__u32)pid_tgid : l->r14;
	l->ik.tgid = pid_tgid >> 32;
	l->ik.func_id = cfg->func_id;
	struct gp_inflight *in = bpf_map_lookup_elem(&inflight, &l->ik);
	if (!in) {
		/* An entry: its return finds none (unpaired). A return: its entry was not
		 * recorded. */
		if (cfg->kind == GP_PROBE_RETURN)
			oncpu_count(l, 1);
		return;
	}
	if (cfg->kind == GP_PROBE_ENTRY) {
		inflight_hold_place(in);
		return;
	}
	/* A return: its entry's place is taken (a recorded entry is then delivered unfinished,
	 * its return counted lost). */
	if (in->overflow > 0) {
		in->overflow--;
		return;
	}
	if (in->depth == 0 || in->depth > GP_MAX_DEPTH) {
		oncpu_count(l, 1);
		return;
	}
	__u32 top = (in->depth - 1) & (GP_MAX_DEPTH - 1);
	oncpu_count(l, (in->call_id[top] & GP_CALL_UNRECORDED) != 0); /* unpaired: counted at its entry */
	in->depth--;
	if (in->depth == 0)
		bpf_map_delete_elem(&inflight, &l->ik);
}

/* Whether a hit is of one of gprobe's own probes of net/http's client (gprobe_http), read
 * with its key in the global, as the program takes no stack. */
static __always_inline int oncpu_is_http(struct x86_regs *r, struct gp_oncpu_level *l)
{
	l->id = GP_CFG_SLOT((__u32)gp_cookie(r, &l->site));
	struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &l->id);
	return cfg && (cfg->kind == GP_PROBE_HTTP_OUT || cfg->kind == GP_PROBE_HTTP_CONN ||
		       cfg->kind == GP_PROBE_HTTP_DONE);
}

#ifdef GP_NO_COOKIE
/* The object for kernels without BPF cookies (before 5.15) has no atomic fetch either
 * (5.12). None is needed there: those kernels run a uprobe's programs with preemption off
 * and never two on one CPU (kernel/trace/bpf_trace.c, trace_call_bpf: bpf_prog_active), so
 * nothing runs between this read and write on the CPU. */
#define GP_BUSY_ENTER(c) ({ __u32 lv_ = (c)->busy; (c)->busy = lv_ + 1; lv_; })
#else
#define GP_BUSY_ENTER(c) __sync_fetch_and_add(&(c)->busy, 1)
#endif

/* The body of an uprobe program: runs HIT (a call of a __noinline function taking the
 * context) when no other run is under way on this CPU, else counts the hit lost. */
#define GP_ONE_PER_CPU(ctx, HIT)                                                                   \
	do {                                                                                       \
		struct gp_oncpu *c = &oncpu[bpf_get_smp_processor_id() & (GP_ONCPU_CPUS - 1)];     \
		__u32 level = GP_BUSY_ENTER(c);                                                    \
		if (level == 0)                                                                    \
			HIT;                                                                       \
		else                                                                               \
			oncpu_lost(ctx, &c->lv[level & (GP_ONCPU_LEVELS - 1)]);                    \
		/* c again (the same CPU: migration is off), one register less to keep */          \
		c = &oncpu[bpf_get_smp_processor_id() & (GP_ONCPU_CPUS - 1)];                      \
		__sync_fetch_and_sub(&c->busy, 1);                                                 \
		return 0;                                                                          \
	} while (0)

#endif
