// SPDX-License-Identifier: GPL-2.0
/* gprobe's BPF programs: one generic uprobe program for every probe (configured through
 * the `probes` map, selected by the attach cookie) and two BTF tracepoints that report
 * exec and exit so the agent can attach to new processes and forget old ones. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"

char LICENSE[] SEC("license") = "GPL";

/* struct pt_regs on x86_64, as the kernel passes it to uprobe programs. */
struct x86_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* the agent sets it before load (--ring-buffer-size) */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} proc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct gp_probe_cfg);
} probes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct gp_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GP_MAX_PROBES);
	__type(key, __u32);
	__type(value, struct gp_rate);
} rates SEC(".maps");

/* Selected processes: only their hits are reported, although a uprobe fires for every
 * process that runs the probed file. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct gp_pid_key);
	__type(value, __u32);
} pids SEC(".maps");

/* Calls in flight, by goroutine: LRU so abandoned entries (panics) cannot grow it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct gp_inflight_key);
	__type(value, struct gp_inflight);
} inflight SEC(".maps");

struct scratch {
	__u64 seq;
	__u64 regs[16];
	__u8 buf[GP_SCRATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* Wake the reader only once this much data waits; it also polls on a short timer, so
 * quiet periods still flush. 0 = let the kernel decide for every record. */
volatile const __u64 wakeup_bytes = 0;

/* Go's integer argument registers, in ABI order, copied out of pt_regs once per hit:
 * the verifier rejects pt_regs loads at computed offsets, so captures index this copy. */
static __always_inline void save_go_regs(__u64 *regs, const struct x86_regs *r)
{
	regs[0] = r->ax;
	regs[1] = r->bx;
	regs[2] = r->cx;
	regs[3] = r->di;
	regs[4] = r->si;
	regs[5] = r->r8;
	regs[6] = r->r9;
	regs[7] = r->r10;
	regs[8] = r->r11;
}

static __always_inline int read_word(const __u64 *regs, __u64 sp, const struct gp_loc *l, __u64 *out)
{
	*out = 0;
	if (l->kind == GP_LOC_REG) {
		*out = regs[l->reg & 15];
		return 0;
	}
	if (l->kind == GP_LOC_STACK)
		return bpf_probe_read_user(out, sizeof(*out), (void *)(sp + (long)l->off));
	return -1;
}

static __always_inline int over_rate(__u32 id, __u32 limit, __u64 now)
{
	struct gp_rate *rt = bpf_map_lookup_elem(&rates, &id);
	if (!rt)
		return 0;
	/* A fixed one-second window; a racing reset may admit a few extra calls. */
	if (now - rt->window_start >= 1000000000ULL) {
		rt->window_start = now;
		rt->count = 0;
	}
	return __sync_fetch_and_add(&rt->count, 1) >= limit;
}

SEC("uprobe")
int gprobe_uprobe(struct x86_regs *r)
{
	__u32 id = (__u32)bpf_get_attach_cookie(r);
	struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &id);
	if (!cfg)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct gp_pid_key pk = { .tgid = pid_tgid >> 32, .spec_id = cfg->spec_id };
	__u32 *bin = bpf_map_lookup_elem(&pids, &pk);
	if (!bin || *bin != cfg->bin_id)
		return 0;
	struct gp_stats *st = bpf_map_lookup_elem(&stats, &id);
	if (!st)
		return 0;
	st->hits++;

	__u64 now = bpf_ktime_get_ns();
	struct gp_inflight_key ik = { .goroutine = r->r14, .tgid = pk.tgid, .func_id = cfg->func_id };
	__u64 call_id = 0, duration = 0;
	__u16 kind = GP_EV_CALL;

	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;

	if (cfg->kind == GP_PROBE_RETURN) {
		struct gp_inflight *in = bpf_map_lookup_elem(&inflight, &ik);
		if (!in || in->depth == 0 || in->depth > GP_MAX_DEPTH) {
			/* Its entry was throttled, dropped, or came before we attached. */
			st->unpaired++;
			return 0;
		}
		__u32 d = (in->depth - 1) & (GP_MAX_DEPTH - 1);
		call_id = in->call_id[d];
		duration = now - in->ts[d];
		in->depth--;
		if (in->depth == 0)
			bpf_map_delete_elem(&inflight, &ik);
		kind = GP_EV_RETURN;
	} else {
		if (cfg->rate_limit && over_rate(id, cfg->rate_limit, now)) {
			st->throttled++;
			return 0;
		}
		if (cfg->kind == GP_PROBE_ENTRY) {
			s->seq++;
			call_id = (s->seq << 10) | (bpf_get_smp_processor_id() & 0x3ff);
			kind = GP_EV_ENTRY;
		}
	}

	save_go_regs(s->regs, r);
	__u64 sp = r->sp;
	struct gp_event *e = (struct gp_event *)s->buf;
	e->ts_ns = now;
	e->call_id = call_id;
	e->goroutine = r->r14;
	e->duration_ns = duration;
	e->pid = pk.tgid;
	e->tid = (__u32)pid_tgid;
	e->probe_id = id;
	e->kind = kind;

	__u32 off = sizeof(struct gp_event);
#pragma clang loop unroll(full)
	for (int i = 0; i < GP_MAX_CAPTURES; i++) {
		if (i >= cfg->n_captures)
			break;
		const struct gp_capture *c = &cfg->caps[i];
		off &= GP_DATA_MASK;
		struct gp_value *v = (struct gp_value *)(s->buf + off);
		__u8 flags = 0;
		v->cap = i;
		v->full_len = 0;
		if (c->kind == GP_CAP_WORD) {
			__u64 w;
			if (read_word(s->regs, sp, &c->loc[0], &w))
				flags |= GP_VAL_FAULT;
			*(__u64 *)(s->buf + off + sizeof(*v)) = w;
			v->len = 8;
			off += sizeof(*v) + 8;
		} else {
			__u64 ptr = 0, len = 0;
			if (read_word(s->regs, sp, &c->loc[0], &ptr) | read_word(s->regs, sp, &c->loc[1], &len))
				flags |= GP_VAL_FAULT;
			__u32 n = len > c->max_len ? c->max_len : (__u32)len;
			if (n > GP_MAX_STR)
				n = GP_MAX_STR;
			if (len > n)
				flags |= GP_VAL_TRUNCATED;
			v->full_len = len > 0xffffffffULL ? 0xffffffffU : (__u32)len;
			if (n && bpf_probe_read_user(s->buf + off + sizeof(*v), n, (void *)ptr)) {
				flags |= GP_VAL_FAULT;
				n = 0;
			}
			v->len = n;
			off += sizeof(*v) + ((n + 7) & ~7U);
		}
		v->flags = flags;
	}
	off &= (GP_SCRATCH - 1);
	e->data_len = off - sizeof(struct gp_event);

	__u64 wake = 0;
	if (wakeup_bytes)
		wake = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
										     : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, s->buf, off, wake)) {
		st->lost++;
		return 0;
	}
	st->emitted++;

	if (kind == GP_EV_ENTRY) {
		struct gp_inflight *in = bpf_map_lookup_elem(&inflight, &ik);
		if (!in) {
			struct gp_inflight fresh = {};
			bpf_map_update_elem(&inflight, &ik, &fresh, BPF_NOEXIST);
			in = bpf_map_lookup_elem(&inflight, &ik);
			if (!in)
				return 0;
		}
		if (in->depth >= GP_MAX_DEPTH) {
			/* Entries left by calls that never returned (a panic unwound them): start over. */
			in->depth = 0;
		}
		__u32 d = in->depth & (GP_MAX_DEPTH - 1);
		in->ts[d] = now;
		in->call_id[d] = call_id;
		in->depth = d + 1;
	}
	return 0;
}

static __always_inline void proc_event(__u32 kind)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (kind == GP_EV_EXIT && (__u32)pid_tgid != (__u32)(pid_tgid >> 32))
		return; /* a thread, not the process */
	struct gp_proc_event ev = { .kind = kind, .pid = pid_tgid >> 32 };
	bpf_ringbuf_output(&proc_events, &ev, sizeof(ev), 0);
}

SEC("tp_btf/sched_process_exec")
int gprobe_exec(void *ctx)
{
	proc_event(GP_EV_EXEC);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int gprobe_exit(void *ctx)
{
	proc_event(GP_EV_EXIT);
	return 0;
}
