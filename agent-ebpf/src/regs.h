/* Registers and locations of gprobe.bpf.c: the registers a uprobe program is given, a
 * register by its x86 encoding, the registers copied once per hit, a capture location's
 * word (gp_loc), and a length word cut to its size. */
#ifndef GPROBE_REGS_H
#define GPROBE_REGS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "gprobe.h"

/* struct pt_regs on x86_64, as the kernel passes it to uprobe programs. */
struct x86_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

/* n = min(n, max) (n a __u64; max a constant, or a value the verifier knows), bounded on
 * the very register used next: a C comparison may be made on a copy of n, whose bound the
 * verifiers before 6.8 do not carry over to the register later passed as a size (6.1: "R2
 * unbounded memory access", "invalid indirect access to stack ... size=255"). */
#define GP_AT_MOST(n, max)                                                                         \
	asm volatile("if %0 <= %1 goto +1; %0 = %1" : "+r"(n) : "ri"((__u64)(max)))

/* A general-purpose register by x86 encoding, read straight from pt_regs: one constant-
 * offset load per case. The verifier rejects pt_regs loads at computed offsets, and clang
 * would merge the cases into one such load: the empty asm keeps each load in its case. */
#define GP_REG_CASE(n, field)                                                                      \
	case n: {                                                                                  \
		__u64 v = r->field;                                                                \
		asm volatile("" : "+r"(v));                                                        \
		return v;                                                                          \
	}

static __always_inline __u64 reg_of(const struct x86_regs *r, __u8 reg)
{
	switch (reg & 15) {
	GP_REG_CASE(0, ax)
	GP_REG_CASE(1, cx)
	GP_REG_CASE(2, dx)
	GP_REG_CASE(3, bx)
	GP_REG_CASE(4, sp)
	GP_REG_CASE(5, bp)
	GP_REG_CASE(6, si)
	GP_REG_CASE(7, di)
	GP_REG_CASE(8, r8)
	GP_REG_CASE(9, r9)
	GP_REG_CASE(10, r10)
	GP_REG_CASE(11, r11)
	GP_REG_CASE(12, r12)
	GP_REG_CASE(13, r13)
	GP_REG_CASE(14, r14)
	GP_REG_CASE(15, r15)
	}
	return 0;
}

/* The general-purpose registers by x86 encoding, copied out of pt_regs once per hit, for
 * configurations with string/bytes captures, whose capture loop indexes this copy. */
static __always_inline void save_regs(__u64 *regs, const struct x86_regs *r)
{
	regs[0] = r->ax;
	regs[1] = r->cx;
	regs[2] = r->dx;
	regs[3] = r->bx;
	regs[4] = r->sp;
	regs[5] = r->bp;
	regs[6] = r->si;
	regs[7] = r->di;
	regs[8] = r->r8;
	regs[9] = r->r9;
	regs[10] = r->r10;
	regs[11] = r->r11;
	regs[12] = r->r12;
	regs[13] = r->r13;
	regs[14] = r->r14;
	regs[15] = r->r15;
}

/* The bytes a memory location's read takes: `size` (1..8; 0 = 8). Exactly that many, so a
 * one-byte USDT operand at the end of a mapping still reads; the decoder masks the rest. */
static __always_inline __u64 mem_size(__u8 size)
{
	__u64 n = size ? size : 8;
	GP_AT_MOST(n, 8);
	return n;
}
static __always_inline int read_word(const __u64 *regs, const struct gp_loc *l, __u8 size,
				     __u64 *out)
{
	*out = 0;
	switch (l->kind) {
	case GP_LOC_REG:
		*out = regs[l->reg & 15];
		return 0;
	case GP_LOC_MEM:
		return bpf_probe_read_user(out, mem_size(size), (void *)(regs[l->reg & 15] + (long)l->off));
	case GP_LOC_CONST:
		*out = (__u64)(long)l->off;
		return 0;
	}
	return -1;
}

/* read_word for the word-only path: registers from pt_regs, memory straight into `out` (a
 * ring buffer reservation); bpf_probe_read_user zeroes `out` when it fails. */
static __always_inline int read_word_direct(const struct x86_regs *r, const struct gp_loc *l,
					    __u8 size, __u64 *out)
{
	switch (l->kind) {
	case GP_LOC_REG:
		*out = reg_of(r, l->reg);
		return 0;
	case GP_LOC_MEM: {
		__u64 n = mem_size(size);
		if (n == 8)
			return bpf_probe_read_user(out, 8, (void *)(reg_of(r, l->reg) + (long)l->off));
		*out = 0;
		return bpf_probe_read_user(out, n, (void *)(reg_of(r, l->reg) + (long)l->off));
	}
	case GP_LOC_CONST:
		*out = (__u64)(long)l->off;
		return 0;
	}
	*out = 0;
	return -1;
}

/* A length of `size` bytes (1..7; 0 or 8 = the whole word): a C `int` leaves the upper
 * half of its register undefined, so the length is cut to its size, and sign-extended
 * from it when the capture says the length is signed (GP_CAPF_LEN_SIGNED). A negative
 * signed length (a C `int len` of -1, taken as unsigned, would read max_len bytes past the
 * buffer) sets INVALID and is 0: nothing is read. */
static __always_inline __u64 len_of(__u64 len, __u8 size, __u8 cflags, __u8 *flags)
{
	__u8 is_signed = cflags & GP_CAPF_LEN_SIGNED;
	if (size > 0 && size < 8) {
		__u32 shift = 64 - (__u32)size * 8;
		len <<= shift;
		len = is_signed ? (__u64)((__s64)len >> shift) : len >> shift;
	}
	if (is_signed && (__s64)len < 0) {
		*flags |= GP_VAL_INVALID;
		return 0;
	}
	return len;
}

#endif
