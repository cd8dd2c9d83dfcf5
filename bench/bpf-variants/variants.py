"""Variants of agent-ebpf/src/gprobe.bpf.c, each with one part of the uprobe program removed
or changed, to see what a hit costs and where (bench/lib/bench.py --only bpfvariants).

Each variant is the shipped source with text patches applied, loaded by loader.c with its
options (the agent's settings unless a variant says otherwise); a patch that no longer
applies is an error (the program changed: update the patch), never silently skipped.
The variants whose names start with "only-" run one piece at the top of the program and
return: what that piece costs alone on this machine.
"""

import os
import re
import subprocess

ENTRY = 'SEC("uprobe")\nint gprobe_uprobe(struct x86_regs *r)\n{\n'


def at_entry(code, decl=""):
    """Patches that run `code` first in the uprobe program (declarations before it)."""
    return [(ENTRY, decl + ENTRY + code + "\n")]


def only(code):
    """`code` alone, its result kept alive, then return."""
    return at_entry("\t{\n" + code + "\n\t\treturn 0;\n\t}")


# A budget slot (1) in every hit, as the agent's cookie carries one, with a cost to add.
BUDGET = [("\t__u32 slot = cookie >> 32;\n", "\t__u32 slot = 1;\n"),
          ("\t\tif (cfg->cost_ns) {\n", "\t\tif (1) {\n")]


# What any program recording a CALL with one register must do on this kernel: which probe
# (attach cookie), its configuration and counters, pid/tid, the time, and a 64-byte record
# (header + one word) reserved, filled and submitted.
MINIMAL = r"""	{
		__u32 id = (__u32)bpf_get_attach_cookie(r);
		struct gp_probe_cfg *cfg = bpf_map_lookup_elem(&probes, &id);
		if (!cfg)
			return 0;
		struct gp_stats *st = bpf_map_lookup_elem(&stats, &id);
		if (!st)
			return 0;
		st->hits++;
		__u64 pid_tgid = bpf_get_current_pid_tgid();
		__u64 now = bpf_ktime_get_ns();
		struct gp_event *e = bpf_ringbuf_reserve(&events, 64, 0);
		if (!e) {
			st->lost++;
			return 0;
		}
		e->ts_ns = now;
		e->call_id = 0;
		e->goroutine = r->r14;
		e->duration_ns = 0;
		e->pid = pid_tgid >> 32;
		e->tid = (__u32)pid_tgid;
		e->probe_id = id;
		e->kind = GP_EV_CALL;
		e->data_len = 16;
		struct gp_value *v = (struct gp_value *)(e + 1);
		v->cap = 0;
		v->flags = 0;
		v->len = 8;
		v->full_len = 0;
		*(__u64 *)(v + 1) = r->ax;
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
		st->emitted++;
		return 0;
	}"""

# Records written into the per-CPU scratch buffer instead of the ring buffer.
SCRATCH_RECORD = ("__u32 gp_z = 0;\n\tstruct scratch *gp_s = bpf_map_lookup_elem(&scratch, &gp_z);\n"
                  "\tstruct gp_event *e = gp_s ? (struct gp_event *)gp_s->buf : NULL;")

# The program before the fast-path work (GP_CFG_* flags, in-place records), as committed.
PREVIOUS = "d734edb"

# (name, what it shows, [(old, new), ...], [loader options])
VARIANTS = [
    ("shipped", "gprobe.bpf.c as the agent loads it (wakeup 256 KiB)", [], []),
    ("previous", f"the program of commit {PREVIOUS} (before the fast path), same loader",
     [(None, f"git:{PREVIOUS}")], []),
    ("empty", "returns at once: program dispatch and bpf_stats' own clock reads",
     at_entry("\treturn 0;"), []),
    ("minimal", "only what any program must do per CALL record: cookie, configuration, "
     "counters, pid/tid, clock, 64-byte record reserved + submitted (int capture; the same "
     "program in every column)", at_entry(MINIMAL), []),
    ("budget", "with an overhead budget (limits.maxOverheadPercent, on by default in the "
     "agent; the loader gives no budget slot): the hit's cost added to its slot's counter",
     BUDGET, []),
    ("budget-7517da7", "as budget, the program before the returns switch was read by latency "
     "probes only (7517da7)", [(None, "git:7517da7")] + BUDGET, []),
    ("no-ktime", "bpf_ktime_get_ns() replaced by 0",
     [("\t\t.now = bpf_ktime_get_ns(),\n", "\t\t.now = 0,\n")], []),
    ("no-output", "records built (in the scratch buffer) but not handed to the ring buffer "
     "(counted as lost instead)",
     [("struct gp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e) + n * 16, 0);",
       SCRATCH_RECORD),
      ("struct gp_event *e = bpf_ringbuf_reserve(&events, size, 0);", SCRATCH_RECORD),
      ("\t}\n\tbpf_ringbuf_submit(e, wake);\n\treturn 0;\n}",
       "\t}\n\treturn wake == 12345 ? 0 : -1;\n}"),
      ("\tfill_header(e, h, r, sizeof(*v) + ((n + 7) & ~7U));\n\tbpf_ringbuf_submit(e, wake);\n"
       "\treturn 0;",
       "\tfill_header(e, h, r, sizeof(*v) + ((n + 7) & ~7U));\n\treturn wake == 12345 ? 0 : -1;"),
      ("return bpf_ringbuf_output(&events, s->buf, off, wake_flag(s, off)) ? -1 : 0;",
       "return wake_flag(s, off) == 12345 ? 0 : -1;")], []),
    ("scratch-copy", "every record assembled in the per-CPU scratch buffer and copied with "
     "bpf_ringbuf_output (GP_CFG_* ignored: the previous program's way)",
     [(ENTRY, "volatile const __u8 gp_variant_flags = 0;\n\n" + ENTRY),
      ("if (cfg->flags & GP_CFG_WORDS)", "if (cfg->flags & gp_variant_flags & GP_CFG_WORDS)"),
      ("else if (cfg->flags & GP_CFG_ONE_BYTES)",
       "else if (cfg->flags & gp_variant_flags & GP_CFG_ONE_BYTES)")], []),
    ("inflight-kept", "latency: a goroutine's in-flight entry is kept at depth 0 (no delete "
     "at the return, no insert at the next entry; not shipped: see BENCHMARKS.md)",
     [("\t\tin->depth--;\n\t\tif (in->depth == 0)\n\t\t\tbpf_map_delete_elem(&inflight, &ik);\n",
       "\t\tin->depth--;\n")], []),
    ("rate-limited", "with a rate limit (limits.eventsPerSecond 10,000,000: checked on every "
     "call, none over it)", [], ["-r", "10000000"]),
    ("wakeup-0", "wakeup_bytes 0 (--wakeup-size 0): the kernel's per-record wake-ups", [],
     ["-w", "0"]),
    ("only-ktime", "bpf_ktime_get_ns() alone",
     only('\t\t__u64 t = bpf_ktime_get_ns();\n\t\tasm volatile("" :: "r"(t));'), []),
    ("only-pid-tgid", "bpf_get_current_pid_tgid() alone",
     only('\t\t__u64 t = bpf_get_current_pid_tgid();\n\t\tasm volatile("" :: "r"(t));'), []),
    ("only-cookie", "bpf_get_attach_cookie() alone",
     only('\t\t__u64 t = bpf_get_attach_cookie(r);\n\t\tasm volatile("" :: "r"(t));'), []),
    ("only-ringbuf", "bpf_ringbuf_reserve() + submit of 64 bytes alone",
     only("\t\t__u64 *p = bpf_ringbuf_reserve(&events, 64, 0);\n"
          "\t\tif (p) {\n\t\t\tp[0] = 0;\n\t\t\tbpf_ringbuf_submit(p, BPF_RB_NO_WAKEUP);\n\t\t}"),
     []),
    ("only-read-user", "bpf_probe_read_user() of 64 bytes (the string) into the BPF stack "
     "alone",
     only('\t\t__u64 b[8] = {};\n\t\tlong err = bpf_probe_read_user(b, sizeof(b), (void *)r->bx);\n'
          '\t\tasm volatile("" :: "r"(b[0]), "r"(err));'), []),
]

# Variants whose records, or absence of records, do not follow the shipped program's
# counters: only their run count is checked.
UNCHECKED = ["minimal"] + [v[0] for v in VARIANTS if v[0].startswith("only-")]


def expand_includes(text):
    """`text` with the program's own headers (#include "x.h" of agent-ebpf/src) pasted in:
    patches may touch them, and the variant is compiled from another folder."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "agent-ebpf", "src")

    def paste(m):
        path = os.path.join(src, m.group(1))
        if not os.path.exists(path):
            return m.group(0)  # gprobe.h: from the include folder
        with open(path) as f:
            return f.read()
    return re.sub(r'^#include "([a-z_]+\.h)"$', paste, text, flags=re.M)


def source(original, patches):
    """The variant's source: `original` with each (old, new) text replaced exactly once; a
    (None, PATH) entry first replaces the whole source by the file at PATH (a candidate
    program, measured against the shipped one), (None, "git:REV") by the program as commit
    REV had it."""
    out = expand_includes(original)
    for old, new in patches:
        if old is None:
            if new.startswith("git:"):
                repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                out = subprocess.run(["git", "-C", repo, "show",
                                      f"{new[4:]}:agent-ebpf/src/gprobe.bpf.c"],
                                     capture_output=True, text=True, check=True).stdout
            else:
                with open(new) as f:
                    out = f.read()
            continue
        if out.count(old) != 1:
            raise RuntimeError(f"variant patch does not apply (found {out.count(old)}x): {old!r}")
        out = out.replace(old, new)
    return out
