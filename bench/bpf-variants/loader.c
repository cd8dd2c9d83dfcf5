// SPDX-License-Identifier: Apache-2.0
/* A minimal stand-in for gprobe's agent, for measuring variants of gprobe.bpf.c: loads a
 * BPF object built from (a patched copy of) agent-ebpf/src/gprobe.bpf.c with the load-time
 * settings the agent uses (events ring of 1 MiB, `wakeup_bytes` set in .rodata), writes one
 * probe configuration as agent/src/plan.rs (configs()) and agent/src/attach/mod.rs
 * (add_probe) build it (the first configuration id, 0, its own func_id; a CALL probe), and
 * attaches the uprobe as agent/src/attach/perf.rs does: a perf event of the uprobe PMU for
 * that one pid, with the program linked to it through a BPF link that carries the
 * configuration id as its cookie. It drains the events ring buffer until SIGINT/SIGTERM,
 * checks every record it reads, and prints the program's run_time_ns / run_cnt
 * (kernel.bpf_stats_enabled must be 1) and the probe's counters as one JSON line.
 *
 *   loader [-w WAKEUP_BYTES] [-r RATE_LIMIT] [-s MAX_STRING_BYTES] [-R RET_OFFSET]...
 *          OBJ BINARY OFFSET PID MODE
 *
 *   MODE: int (capture n: a word from RAX) | str64 (capture s: pointer RBX, length RCX) |
 *         lat (capture n, latency: true: an ENTRY configuration at OFFSET, id 0, and a
 *         RETURN one, id 1, at every -R offset, as add_probe makes them)
 *   -w   wakeup_bytes (default 262144, gprobe run's --wakeup-size default; 0 = every record)
 *   -r   limits.eventsPerSecond (default 0: unlimited, as the benchmarks' specs say)
 *   -s   limits.maxStringBytes of a string capture (default 64)
 *   -L   length of the target's string (its -str-len; default 64): str64 records are checked
 *   -R   file offset of a RET instruction (lat)
 *   -v   print the verifier's statistics (instructions processed) on stderr; -vv its log
 *
 * Prints "ready" on stdout once attached. Used by bench/lib/bench.py --only bpfvariants. */
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* gprobe.h declares the __u* types itself unless it is compiled as BPF; here linux/types.h
 * (through bpf.h) already has them. */
#define __BPF__ 1
#include "gprobe.h"
#undef __BPF__

static volatile sig_atomic_t stop;
static unsigned long long events, bad_events, event_bytes;
static unsigned int mode_cap_kind, mode_lat;
static __u32 want_len = 64, want_max = 64;
static __u64 last_entry; /* lat: the call_id of the last ENTRY, which the next RETURN pairs */

static void on_signal(int sig) { (void)sig; stop = 1; }

/* Every record must decode as the agent decodes it (agent/src/abi/mod.rs): a header,
 * then data_len bytes of values, within the record. */
static int on_event(void *ctx, void *data, size_t len)
{
	(void)ctx;
	const struct gp_event *e = data;
	events++;
	event_bytes += len;
	if (len < sizeof(*e) || sizeof(*e) + e->data_len > len ||
	    e->kind != (mode_lat ? GP_EV_ENTRY : GP_EV_CALL)) {
		/* One goroutine calling a function that calls nothing: each RETURN pairs the
		 * ENTRY just before it. */
		if (mode_lat && len >= sizeof(*e) && e->kind == GP_EV_RETURN && e->data_len == 0 &&
		    e->call_id && e->call_id == last_entry && e->probe_id == 1 &&
		    e->duration_ns < 1000000000ULL) {
			last_entry = 0;
			return 0;
		}
		bad_events++;
		return 0;
	}
	if (mode_lat)
		last_entry = e->call_id;
	const struct gp_value *v = (const void *)(e + 1);
	if (e->data_len < sizeof(*v) || v->cap != 0 ||
	    sizeof(*v) + v->len > e->data_len ||
	    (mode_cap_kind == GP_CAP_WORD && v->len != 8)) {
		bad_events++;
		return 0;
	}
	if (mode_cap_kind == GP_CAP_BYTES) {
		/* The loop program's string: want_len bytes of 'x', cut at maxStringBytes. */
		__u32 n = want_len < want_max ? want_len : want_max;
		const char *b = (const char *)(v + 1);
		int ok = v->len == n && v->full_len == want_len &&
			 v->flags == (want_len > n ? GP_VAL_TRUNCATED : 0) &&
			 e->data_len == sizeof(*v) + ((n + 7) & ~7U);
		for (__u32 i = 0; ok && i < n; i++)
			ok = b[i] == 'x';
		if (!ok)
			bad_events++;
	}
	return 0;
}

static int fail(const char *what)
{
	fprintf(stderr, "loader: %s: %s\n", what, strerror(errno));
	return 1;
}

/* Sets a `volatile const` global of the object's .rodata before load, as aya's
 * EbpfLoader::override_global does for the agent. */
static int set_rodata(struct bpf_object *obj, const char *name, const void *val, size_t size)
{
	struct btf *btf = bpf_object__btf(obj);
	struct bpf_map *m;
	bpf_object__for_each_map(m, obj) {
		if (!strstr(bpf_map__name(m), ".rodata"))
			continue;
		int sec = btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC);
		if (sec < 0)
			return -1;
		const struct btf_type *t = btf__type_by_id(btf, sec);
		const struct btf_var_secinfo *vs = btf_var_secinfos(t);
		for (int i = 0; i < btf_vlen(t); i++, vs++) {
			const struct btf_type *var = btf__type_by_id(btf, vs->type);
			if (strcmp(btf__name_by_offset(btf, var->name_off), name) || vs->size != size)
				continue;
			size_t len;
			const void *init = bpf_map__initial_value(m, &len);
			if (!init || vs->offset + size > len)
				return -1;
			char data[len];
			memcpy(data, init, len);
			memcpy(data + vs->offset, val, size);
			return bpf_map__set_initial_value(m, data, len);
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	__u64 wakeup = 262144;
	__u32 rate = 0, max_str = 64;
	int opt, verbose = 0, n_rets = 0;
	size_t rets[16];
	while ((opt = getopt(argc, argv, "w:r:s:L:R:v")) != -1) {
		switch (opt) {
		case 'w': wakeup = strtoull(optarg, NULL, 0); break;
		case 'r': rate = strtoul(optarg, NULL, 0); break;
		case 's': max_str = want_max = strtoul(optarg, NULL, 0); break;
		case 'L': want_len = strtoul(optarg, NULL, 0); break;
		case 'v': verbose++; break;
		case 'R':
			if (n_rets == 16)
				goto usage;
			rets[n_rets++] = strtoull(optarg, NULL, 0);
			break;
		default: goto usage;
		}
	}
	if (argc - optind != 5) {
usage:
		fprintf(stderr, "usage: loader [-w WAKEUP] [-r RATE] [-s MAXSTR] [-L STRLEN] [-R RETOFF]... [-v]"
				" OBJ BINARY OFFSET PID int|str64|lat\n");
		return 2;
	}
	argv += optind;
	const char *obj_path = argv[0], *binary = argv[1], *mode = argv[4];
	size_t offset = strtoull(argv[2], NULL, 0);
	int pid = (int)strtol(argv[3], NULL, 0);
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);

	struct bpf_object *obj = bpf_object__open_file(obj_path, NULL);
	if (!obj)
		return fail("open object");
	/* Only the uprobe program is under test. */
	struct bpf_program *p;
	bpf_object__for_each_program(p, obj)
		bpf_program__set_autoload(p, strcmp(bpf_program__name(p), "gprobe_uprobe") == 0);
	static char vlog[1 << 24];
	if (verbose) {
		struct bpf_program *up = bpf_object__find_program_by_name(obj, "gprobe_uprobe");
		if (up) {
			bpf_program__set_log_level(up, verbose > 1 ? 1 | 4 : 4);
			bpf_program__set_log_buf(up, vlog, sizeof(vlog));
		}
	}
	struct bpf_map *events_map = bpf_object__find_map_by_name(obj, "events");
	if (!events_map || bpf_map__set_max_entries(events_map, 1 << 20))
		return fail("events ring buffer size");
	if (set_rodata(obj, "wakeup_bytes", &wakeup, sizeof(wakeup))) {
		errno = ENOENT;
		return fail("set wakeup_bytes");
	}
	if (bpf_object__load(obj)) {
		int err = errno;
		if (verbose)
			fprintf(stderr, "%s", vlog);
		errno = err;
		return fail("load object");
	}
	if (verbose)
		fprintf(stderr, "%s", vlog);
	struct bpf_program *prog = bpf_object__find_program_by_name(obj, "gprobe_uprobe");
	int probes = bpf_object__find_map_fd_by_name(obj, "probes");
	int stats = bpf_object__find_map_fd_by_name(obj, "stats");
	int ring = bpf_map__fd(events_map);
	if (!prog || probes < 0 || stats < 0 || ring < 0)
		return fail("find program or maps");

	/* The configuration plan.rs builds for `signature: func(n int64, s string) int64`:
	 * n in RAX (Go register 0), s as pointer RBX (x86 3) and length RCX (x86 1). The
	 * agent gives the first configuration id 0 and makes it its own func_id. */
	__u32 id = 0;
	struct gp_probe_cfg cfg = { .func_id = id, .kind = GP_PROBE_CALL, .n_captures = 1,
				    .rate_limit = rate };
	if (strcmp(mode, "str64") == 0) {
		mode_cap_kind = GP_CAP_BYTES;
		cfg.flags = GP_CFG_ONE_BYTES; /* one capture, a string (plan.rs sets it so) */
		cfg.caps[0] = (struct gp_capture){ .kind = GP_CAP_BYTES, .max_len = max_str,
			.loc = { { .kind = GP_LOC_REG, .reg = 3 }, { .kind = GP_LOC_REG, .reg = 1 } } };
	} else if (strcmp(mode, "int") == 0 || strcmp(mode, "lat") == 0) {
		mode_cap_kind = GP_CAP_WORD;
		cfg.flags = GP_CFG_WORDS; /* every capture a word (plan.rs sets it so) */
		cfg.caps[0] = (struct gp_capture){ .kind = GP_CAP_WORD, .size = 8,
			.loc = { { .kind = GP_LOC_REG, .reg = 0 } } };
	} else {
		goto usage;
	}
	if (strcmp(mode, "lat") == 0) {
		if (!n_rets)
			goto usage;
		mode_lat = 1;
		cfg.kind = GP_PROBE_ENTRY;
	}
	if (bpf_map_update_elem(probes, &id, &cfg, BPF_ANY))
		return fail("write probe configuration");
	__u32 n_cfg = 1;
	if (mode_lat) {
		/* The return configuration: no result captured, no rate limit, paired to the
		 * entry by func_id (the entry's id). */
		struct gp_probe_cfg ret = { .func_id = id, .kind = GP_PROBE_RETURN,
					    .flags = GP_CFG_WORDS };
		__u32 rid = 1;
		if (bpf_map_update_elem(probes, &rid, &ret, BPF_ANY))
			return fail("write return configuration");
		n_cfg = 2;
	}

	/* As perf.rs: perf_event_open(uprobe PMU, pid, cpu -1), then BPF_LINK_CREATE with the
	 * cookie (libbpf does exactly these two calls for a pid and a cookie). */
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = id);
	struct bpf_link *link = bpf_program__attach_uprobe_opts(prog, pid, binary, offset, &uo);
	if (!link)
		return fail("attach uprobe");
	struct bpf_link *ret_links[16];
	for (int i = 0; mode_lat && i < n_rets; i++) {
		LIBBPF_OPTS(bpf_uprobe_opts, ro, .bpf_cookie = 1);
		ret_links[i] = bpf_program__attach_uprobe_opts(prog, pid, binary, rets[i], &ro);
		if (!ret_links[i])
			return fail("attach return uprobe");
	}
	struct ring_buffer *rb = ring_buffer__new(ring, on_event, NULL, NULL);
	if (!rb)
		return fail("ring buffer");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("ready\n");
	fflush(stdout);
	/* As the agent's reader: woken by the program's forced wake-ups, and draining at least
	 * every 25 ms (its --poll-interval) whether woken or not. */
	while (!stop) {
		ring_buffer__poll(rb, 25);
		ring_buffer__consume(rb);
	}
	bpf_link__destroy(link);
	for (int i = 0; mode_lat && i < n_rets; i++)
		bpf_link__destroy(ret_links[i]);
	ring_buffer__consume(rb);

	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
		return fail("program info");
	int ncpu = libbpf_num_possible_cpus();
	struct gp_stats per_cpu[ncpu > 0 ? ncpu : 1], sum = {};
	for (__u32 k = 0; k < n_cfg; k++) {
		if (ncpu <= 0 || bpf_map_lookup_elem(stats, &k, per_cpu))
			return fail("read counters");
		for (int c = 0; c < ncpu; c++) {
			sum.hits += per_cpu[c].hits;
			sum.emitted += per_cpu[c].emitted;
			sum.lost += per_cpu[c].lost;
			sum.throttled += per_cpu[c].throttled;
			sum.unpaired += per_cpu[c].unpaired;
			sum.too_deep += per_cpu[c].too_deep;
		}
	}
	printf("{\"run_time_ns\":%llu,\"run_cnt\":%llu,\"events\":%llu,\"bad_events\":%llu,"
	       "\"event_bytes\":%llu,\"hits\":%llu,\"emitted\":%llu,\"lost\":%llu,"
	       "\"throttled\":%llu,\"unpaired\":%llu,\"too_deep\":%llu}\n",
	       (unsigned long long)info.run_time_ns, (unsigned long long)info.run_cnt, events,
	       bad_events, event_bytes, (unsigned long long)sum.hits,
	       (unsigned long long)sum.emitted, (unsigned long long)sum.lost,
	       (unsigned long long)sum.throttled, (unsigned long long)sum.unpaired,
	       (unsigned long long)sum.too_deep);
	ring_buffer__free(rb);
	bpf_object__close(obj);
	return 0;
}
