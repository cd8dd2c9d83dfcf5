/* Registers and locations of gprobe.bpf.c: a register by its x86 encoding, the registers
 * copied once per hit, and a capture location's word (gp_loc). Included by gprobe.bpf.c
 * after struct x86_regs. */

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
static __always_inline __u32 mem_size(__u8 size)
{
	return (size == 0 || size > 8) ? 8 : size;
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
		__u32 n = mem_size(size);
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
