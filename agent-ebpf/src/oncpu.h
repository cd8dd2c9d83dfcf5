/* One run of gprobe's uprobe programs at a time on each CPU.
 *
 * Since Linux 6.13 the JIT gives programs of the kprobe type (uprobes included) whose
 * frames take 64 bytes or more a private stack, one per CPU (kernel/bpf/verifier.c,
 * bpf_enable_priv_stack: PRIV_STACK_ADAPTIVE); gprobe's program needs it (its frames add
 * up to more than the 512 bytes of a task's BPF stack). Its per-CPU scratch map is shared
 * the same way. Both are safe only while nothing else runs the program on that CPU before
 * it ends, and programs of uprobe_multi links run with migration off but preemption on
 * (kernel/trace/bpf_trace.c, uprobe_prog_run): on a preemptible kernel (Debian's 7.x:
 * "full (lazy)") a thread preempted inside the program and another thread hitting a probe
 * on that CPU overwrote each other's locals (records with the other hit's thread, kind or
 * values, a call id twice, entries never written).
 *
 * So the program attached is a main function that takes no stack at all (nothing it
 * writes can land on the stack of the run it interrupted): it counts the runs on its CPU
 * in a global, runs the hit only when none is under way there, and otherwise counts the
 * hit as lost in its probe's stats (the key of that lookup is in the global too, one slot
 * per nesting level). */
#ifndef GPROBE_ONCPU_H
#define GPROBE_ONCPU_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"

#define GP_ONCPU_CPUS 4096 /* CPUs beyond share slots: a hit then counted lost, never wrong */
#define GP_ONCPU_LEVELS 4

struct gp_oncpu {
	__u32 busy;                   /* runs of the program under way on this CPU */
	__u32 key[GP_ONCPU_LEVELS];   /* the stats key of a hit counted lost, by nesting level */
	__u32 _pad[3];
};

struct gp_oncpu oncpu[GP_ONCPU_CPUS] SEC(".bss");

/* The body of an uprobe program: runs HIT (a call of a __noinline function taking the
 * context) when no other run is under way on this CPU, else counts the hit lost. */
#define GP_ONE_PER_CPU(ctx, HIT)                                                                   \
	do {                                                                                       \
		struct gp_oncpu *c = &oncpu[bpf_get_smp_processor_id() & (GP_ONCPU_CPUS - 1)];     \
		__u32 level = __sync_fetch_and_add(&c->busy, 1);                                   \
		if (level == 0) {                                                                  \
			HIT;                                                                       \
		} else {                                                                           \
			__u32 *k = &c->key[level & (GP_ONCPU_LEVELS - 1)];                         \
			*k = GP_CFG_SLOT((__u32)bpf_get_attach_cookie(ctx));                       \
			struct gp_stats *st = bpf_map_lookup_elem(&stats, k);                      \
			if (st)                                                                    \
				__sync_fetch_and_add(&st->lost, 1);                                \
		}                                                                                  \
		__sync_fetch_and_sub(&c->busy, 1);                                                 \
		return 0;                                                                          \
	} while (0)

#endif
