"""Variants of agent-ebpf/src/gprobe.bpf.c, each with one part of the uprobe program removed
or changed, to see what a hit costs and where (bench/lib/bench.py --only bpfvariants).

Each variant is the shipped source with text patches applied, loaded by loader.c with its
options (the agent's settings unless a variant says otherwise); a patch that no longer
applies is an error (the program changed: update the patch), never silently skipped.
"""

ENTRY = 'SEC("uprobe")\nint gprobe_uprobe(struct x86_regs *r)\n{\n'


def early_return(marker):
    """Patches that make the program return right after `marker` (the first line of it)."""
    return [(ENTRY, "volatile const __u32 gp_variant_stop = 1;\n\n" + ENTRY),
            (marker, marker + "\n\tif (gp_variant_stop)\n\t\treturn 0;")]


# (name, what it shows, [(old, new), ...], [loader options])
VARIANTS = [
    ("shipped", "gprobe.bpf.c as the agent loads it (wakeup 256 KiB)", [], []),
    ("empty", "returns at once: program call and bpf_stats overhead only",
     [(ENTRY, "volatile const __u32 gp_variant_empty = 1;\n\n" + ENTRY +
       "\tif (gp_variant_empty)\n\t\treturn 0;\n")], []),
    ("no-ktime", "bpf_ktime_get_ns() replaced by 0",
     [("__u64 now = bpf_ktime_get_ns();\n\tstruct gp_inflight_key",
       "__u64 now = 0;\n\tstruct gp_inflight_key")], []),
    ("no-output", "everything but the ring buffer output (counted as lost instead)",
     [("if (bpf_ringbuf_output(&events, s->buf, off, wake)) {",
       "if ((wake | off) != 1) {")], []),
    ("rate-limited", "with a rate limit (limits.eventsPerSecond 10,000,000: checked on every "
     "call, none over it)", [], ["-r", "10000000"]),
    ("wakeup-0", "wakeup_bytes 0 (--wakeup-size 0): the kernel's per-record wake-ups", [],
     ["-w", "0"]),
]


def source(original, patches):
    """The variant's source: `original` with each (old, new) text replaced exactly once; a
    (None, PATH) entry first replaces the whole source by the file at PATH (a candidate
    program, measured against the shipped one)."""
    out = original
    for old, new in patches:
        if old is None:
            with open(new) as f:
                out = f.read()
            continue
        if out.count(old) != 1:
            raise RuntimeError(f"variant patch does not apply (found {out.count(old)}x): {old!r}")
        out = out.replace(old, new)
    return out
