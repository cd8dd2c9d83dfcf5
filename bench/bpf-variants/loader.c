// SPDX-License-Identifier: Apache-2.0
/* A minimal stand-in for gprobe's agent, for measuring variants of gprobe.bpf.c: loads a
 * BPF object built from (a patched copy of) agent-ebpf/src/gprobe.bpf.c, writes one probe
 * configuration and the pid filter entry as the agent would, attaches the uprobe at a file
 * offset with cookie 1, drains the events ring buffer until SIGINT/SIGTERM, and prints the
 * program's run_time_ns / run_cnt (kernel.bpf_stats_enabled must be 1) as one JSON line.
 *
 *   loader OBJ BINARY OFFSET PID MODE     MODE: int (capture n) | str64 (capture s)
 *
 * Prints "ready" on stdout once attached. Used by bench/lib/bench.py --only bpfvariants. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* gprobe.h declares the __u* types itself unless it is compiled as BPF; here linux/types.h
 * (through bpf.h) already has them. */
#define __BPF__ 1
#include "gprobe.h"
#undef __BPF__

static volatile sig_atomic_t stop;
static unsigned long long events;

static void on_signal(int sig) { (void)sig; stop = 1; }

static int on_event(void *ctx, void *data, size_t len)
{
	(void)ctx; (void)data; (void)len;
	events++;
	return 0;
}

static int fail(const char *what)
{
	fprintf(stderr, "loader: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: loader OBJ BINARY OFFSET PID int|str64\n");
		return 2;
	}
	const char *obj_path = argv[1], *binary = argv[2], *mode = argv[5];
	size_t offset = strtoull(argv[3], NULL, 0);
	__u32 pid = strtoul(argv[4], NULL, 0);
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);

	struct bpf_object *obj = bpf_object__open_file(obj_path, NULL);
	if (!obj)
		return fail("open object");
	/* Only the uprobe program is under test. */
	struct bpf_program *p;
	bpf_object__for_each_program(p, obj)
		bpf_program__set_autoload(p, strcmp(bpf_program__name(p), "gprobe_uprobe") == 0);
	if (bpf_object__load(obj))
		return fail("load object");
	struct bpf_program *prog = bpf_object__find_program_by_name(obj, "gprobe_uprobe");
	int probes = bpf_object__find_map_fd_by_name(obj, "probes");
	int pids = bpf_object__find_map_fd_by_name(obj, "pids");
	int ring = bpf_object__find_map_fd_by_name(obj, "events");
	if (!prog || probes < 0 || pids < 0 || ring < 0)
		return fail("find program or maps");

	/* The configuration the agent writes for `signature: func(n int64, s string) int64`:
	 * n in RAX (Go register 0), s as pointer RBX (1) and length RCX (2). */
	struct gp_probe_cfg cfg = { .spec_id = 1, .func_id = 1, .bin_id = 1, .kind = GP_PROBE_CALL,
				    .n_captures = 1 };
	if (strcmp(mode, "str64") == 0) {
		cfg.caps[0] = (struct gp_capture){ .kind = GP_CAP_BYTES, .max_len = 64,
			.loc = { { .kind = GP_LOC_REG, .reg = 1 }, { .kind = GP_LOC_REG, .reg = 2 } } };
	} else {
		cfg.caps[0] = (struct gp_capture){ .kind = GP_CAP_WORD, .size = 8,
			.loc = { { .kind = GP_LOC_REG, .reg = 0 } } };
	}
	__u32 id = 1;
	if (bpf_map_update_elem(probes, &id, &cfg, BPF_ANY))
		return fail("write probe configuration");
	struct gp_pid_key pk = { .tgid = pid, .spec_id = 1 };
	__u32 bin_id = 1;
	if (bpf_map_update_elem(pids, &pk, &bin_id, BPF_ANY))
		return fail("write pid filter");

	LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = 1);
	struct bpf_link *link = bpf_program__attach_uprobe_opts(prog, -1, binary, offset, &uo);
	if (!link)
		return fail("attach uprobe");
	struct ring_buffer *rb = ring_buffer__new(ring, on_event, NULL, NULL);
	if (!rb)
		return fail("ring buffer");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("ready\n");
	fflush(stdout);
	while (!stop)
		ring_buffer__poll(rb, 25);
	bpf_link__destroy(link);
	ring_buffer__consume(rb);

	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
		return fail("program info");
	printf("{\"run_time_ns\":%llu,\"run_cnt\":%llu,\"events\":%llu}\n",
	       (unsigned long long)info.run_time_ns, (unsigned long long)info.run_cnt, events);
	ring_buffer__free(rb);
	bpf_object__close(obj);
	return 0;
}
