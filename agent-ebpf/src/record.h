/* The header of a hit's records, and when writing one wakes the reader: shared by the
 * record writers of gprobe.bpf.c and inplace.h. */
#ifndef GPROBE_RECORD_H
#define GPROBE_RECORD_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "maps.h"
#include "regs.h"

static __always_inline void fill_header(struct gp_event *e, const struct hit *h,
					const struct x86_regs *r, __u16 data_len)
{
	e->ts_ns = h->now;
	e->call_id = h->call_id;
	e->goroutine = h->goroutine;
	e->duration_ns = h->duration;
	e->pid = h->pid_tgid >> 32;
	e->tid = (__u32)h->pid_tgid;
	e->probe_id = h->id;
	e->kind = h->kind;
	e->data_len = data_len;
}

/* The ring buffer's wake-up flag for a record of `size` bytes: batched wake-ups without
 * asking the ring how full it is, from a per-CPU count of the bytes written since this CPU
 * last woke the reader. */
static __always_inline __u64 wake_flag(struct scratch *s, __u32 size)
{
	if (!wakeup_bytes)
		return 0;
	s->unwoken += size;
	if (s->unwoken >= wakeup_bytes) {
		s->unwoken = 0;
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

#endif
