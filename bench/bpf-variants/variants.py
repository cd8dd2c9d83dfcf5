"""Variants of agent-ebpf/src/gprobe.bpf.c, each with one part of the uprobe program removed
or changed, to see what a hit costs and where (bench/lib/bench.py --only bpfvariants).

Each variant is the shipped source with text patches applied; a patch that no longer
applies is an error (the program changed: update the patch), never silently skipped.
"""

WAKEUP = ("volatile const __u64 wakeup_bytes = 0;",
          # gprobe run's default --wakeup-size (256KiB), set by the agent at load time
          "volatile const __u64 wakeup_bytes = 262144;")

ENTRY = 'SEC("uprobe")\nint gprobe_uprobe(struct x86_regs *r)\n{\n'

STACK_READ_HELPER = """
/* Variant: strings up to 64 bytes are read into the BPF stack first, then copied: the
 * kernel's hardened-usercopy check (check_object_size) accepts a stack destination at
 * once, where a per-CPU map value (vmalloc'd memory) costs a find_vmap_area() lookup. */
static __always_inline long gp_read_str(void *dst, __u32 n, const void *src)
{
	if (n <= 64) {
		__u8 tmp[64] = {};
		long err = bpf_probe_read_user(tmp, n & 63 ? n & 63 : 64, src);
		__builtin_memcpy(dst, tmp, 64);
		return err;
	}
	return bpf_probe_read_user(dst, n, src);
}

SEC("uprobe")
"""

VARIANTS = [
    # (name, what it shows, [(old, new), ...])
    ("shipped", "gprobe.bpf.c as the agent loads it (wakeup 256 KiB)", [WAKEUP]),
    ("empty", "returns at once: program call and bpf_stats overhead only",
     [WAKEUP, (ENTRY, "volatile const __u32 gp_variant_empty = 1;\n\n" + ENTRY +
               "\tif (gp_variant_empty)\n\t\treturn 0;\n")]),
    ("no-pid-filter", "without the pids hash lookup",
     [WAKEUP, ("\t__u32 *bin = bpf_map_lookup_elem(&pids, &pk);\n\tif (!bin || *bin != cfg->bin_id)\n"
               "\t\treturn 0;\n", "")]),
    ("no-ktime", "bpf_ktime_get_ns() replaced by 0",
     [WAKEUP, ("__u64 now = bpf_ktime_get_ns();", "__u64 now = 0;")]),
    ("no-output", "everything but bpf_ringbuf_output (and its query)",
     [("if (bpf_ringbuf_output(&events, s->buf, off, wake)) {", "if (!wake && !off) {")]),
    ("wakeup-0", "wakeup_bytes 0: no bpf_ringbuf_query, the kernel's adaptive wake-ups", []),
    ("stack-read", "strings <= 64 bytes read into the BPF stack, then copied",
     [WAKEUP, (ENTRY, STACK_READ_HELPER + ENTRY),
      ("bpf_probe_read_user(s->buf + off + sizeof(*v), n, (void *)ptr)",
       "gp_read_str(s->buf + off + sizeof(*v), n, (void *)ptr)")]),
]


def source(original, patches):
    out = original
    for old, new in patches:
        if out.count(old) != 1:
            raise RuntimeError(f"variant patch does not apply (found {out.count(old)}x): {old!r}")
        out = out.replace(old, new)
    return out
