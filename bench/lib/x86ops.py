"""x86-64 instructions as bench/ret_sites.py classifies them (objdump's AT&T syntax):
conditional branches, traps, the registers that hold a Go function's results under
ABIInternal, and which instructions write them or read memory that may fault."""

import re

JCC = {
    "jo", "jno", "jb", "jae", "je", "jne", "jbe", "ja", "js", "jns", "jp", "jnp",
    "jl", "jge", "jle", "jg", "jc", "jnc", "jz", "jnz", "jnae", "jnb", "jna", "jnbe",
    "jpe", "jpo", "jnge", "jnl", "jng", "jnle",
}
# Conditional branches the kernel does not emulate (single-stepped): they end regions too.
OTHER_COND = {"jrcxz", "jecxz", "loop", "loope", "loopne", "xbegin"}
TRAPS = {"int3", "ud2", "hlt", "int", "(bad)"}

RESULT_GPR = set()
for r in ("ax", "bx", "cx", "di", "si"):
    RESULT_GPR |= {"r" + r, "e" + r, r}
RESULT_GPR |= {"al", "ah", "bl", "bh", "cl", "ch", "dil", "sil"}
for n in range(8, 12):
    RESULT_GPR |= {f"r{n}", f"r{n}d", f"r{n}w", f"r{n}b", f"r{n}l"}
RESULT_VEC = {f"{p}mm{n}" for p in ("x", "y", "z") for n in range(15)}
RESULT_REGS = RESULT_GPR | RESULT_VEC

# Instructions that write registers other than (or besides) their last operand.
IMPLICIT_WRITERS = re.compile(
    r"^(rep|repz|repnz|repe|repne|movs|stos|lods|scas|cmps|cpuid|rdtsc|rdtscp|syscall|"
    r"mul|imul|div|idiv|cqo|cqto|cltq|cltd|cwtl|cdq|cdqe|cwd|xchg|xadd|cmpxchg|lock|"
    r"xgetbv|rdrand|rdseed|popf|vzeroupper|vzeroall)"
)
# Instructions that read their operands only (write flags or nothing).
NO_WRITE = re.compile(
    r"^(cmp|test|bt|ucomis|comis|vucomis|vcomis|ptest|vptest|prefetch|nop|xchg +%ax,%ax|"
    r"push|lfence|mfence|sfence|pause|endbr64)"
)

DIRECT = re.compile(r"^(?:0x)?([0-9a-f]+)(?:\s|$)")


def base_mnem(m):
    return m[:-1] if m in ("retq", "jmpq", "callq", "pushq", "popq") else m


def dest_operand(ops):
    """The last operand of an AT&T operand list (the destination)."""
    depth, start = 0, 0
    last = ops
    for i, c in enumerate(ops):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            start = i + 1
    last = ops[start:]
    return last.strip()


def writes_result(mnem, ops):
    """Whether the instruction may write a result register (conservative)."""
    if NO_WRITE.match(mnem + " " + ops) or NO_WRITE.match(mnem):
        return False
    if IMPLICIT_WRITERS.match(mnem):
        return True
    if mnem in ("leave", "pushf", "enter"):
        return False  # RSP/RBP (and memory) only
    d = dest_operand(ops)
    if d.startswith("%"):
        return d[1:] in RESULT_REGS
    return False


def risky_memory(mnem, ops):
    """A memory operand not based on RSP, RBP or RIP (a load or store there can fault)."""
    if mnem.startswith("lea") or mnem.startswith("nop") or mnem.startswith("prefetch"):
        return False
    for m in re.finditer(r"(?:^|[,\s])(-?0x[0-9a-f]+|-?\d+)?\(([^)]*)\)", ops):
        inner = m.group(2)
        base = inner.split(",")[0].strip()
        if base not in ("%rsp", "%rbp", "%rip"):
            return True
    return False
