/* Go's stack-check jump, decided on a hit's EFLAGS (gprobe.bpf.c, oncpu.h). */
#ifndef GPROBE_JCC_H
#define GPROBE_JCC_H

#include <linux/bpf.h>

/* Whether a Jcc of condition `cc` (the opcode's low nibble) jumps with these EFLAGS: the
 * even conditions as listed, the odd ones their negation. resolve/sites.rs decides the same
 * (`jcc_taken`, tested on every flag combination). */
static __always_inline int jcc_taken(__u8 cc, __u64 flags)
{
	int cf = !!(flags & (1 << 0)), pf = !!(flags & (1 << 2)), zf = !!(flags & (1 << 6));
	int sf = !!(flags & (1 << 7)), of = !!(flags & (1 << 11));
	int taken;
	switch (cc >> 1) {
	case 0: taken = of; break;
	case 1: taken = cf; break;
	case 2: taken = zf; break;
	case 3: taken = cf | zf; break;
	case 4: taken = sf; break;
	case 5: taken = pf; break;
	case 6: taken = sf != of; break;
	default: taken = zf | (sf != of); break;
	}
	return taken != (cc & 1);
}

#endif
