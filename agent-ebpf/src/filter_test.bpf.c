// SPDX-License-Identifier: GPL-2.0
/* Runs filter.h's evaluator on a predicate and values the agent's test put in maps, so the
 * kernel's evaluation is checked against the Rust reference on the same inputs
 * (agent/src/attach/filter_run.rs, through BPF_PROG_TEST_RUN). Not loaded by the agent.
 * filter_bench is the same as an XDP program, which BPF_PROG_TEST_RUN can repeat and time
 * (it ignores the packet). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"
#include "filter.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gp_filter);
} test_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gp_fvals);
} test_values SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} test_result SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gp_filter_state);
} test_state SEC(".maps");

static __always_inline void run_filter(void)
{
	__u32 zero = 0;
	const struct gp_filter *f = bpf_map_lookup_elem(&test_filter, &zero);
	const struct gp_fvals *v = bpf_map_lookup_elem(&test_values, &zero);
	struct gp_filter_state *fs = bpf_map_lookup_elem(&test_state, &zero);
	__u32 *out = bpf_map_lookup_elem(&test_result, &zero);
	if (!f || !v || !fs || !out)
		return;
	*out = filter_eval(f, v, fs, 0);
}

SEC("raw_tp")
int filter_test(void *ctx)
{
	run_filter();
	return 0;
}

SEC("xdp")
int filter_bench(struct xdp_md *ctx)
{
	run_filter();
	return XDP_PASS;
}
