/* A C program with USDT notes that sys/sdt.h did not write: `forged:inside` points one
 * byte into a 10-byte `movabs` (a breakpoint there would replace a byte of its immediate,
 * and every result would be wrong), `forged:notnop` points at the start of an `add` (an
 * instruction boundary, but not the `nop` sys/sdt.h puts at a probe). `forged:good` is a
 * real STAP_PROBE1. The program checks every result itself and prints how many were wrong.
 *
 *   forged [-n N] [-delay-ms D]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

/* A stapsdt note for `provider:name` (no arguments) whose pc is the expression `pc`, laid
 * out as sys/sdt.h lays its notes (three addresses, then three NUL-terminated strings). */
#define FORGED_NOTE(provider, name, pc)                                                    \
	".pushsection .note.stapsdt,\"?\",\"note\"\n\t"                                    \
	".balign 4\n\t"                                                                    \
	".4byte 2f-1f, 4f-3f, 3\n"                                                         \
	"1: .asciz \"stapsdt\"\n"                                                          \
	"2: .balign 4\n"                                                                   \
	"3: .8byte " pc "\n\t"                                                             \
	".8byte _.stapsdt.base\n\t"                                                        \
	".8byte 0\n\t"                                                                     \
	".asciz \"" provider "\"\n\t"                                                      \
	".asciz \"" name "\"\n\t"                                                          \
	".asciz \"\"\n"                                                                    \
	"4: .balign 4\n\t"                                                                 \
	".popsection\n\t"

/* x * 3 + 0x1122334455667788, in instructions whose places the forged notes name. */
__attribute__((noinline)) long compute(long x)
{
	long r;
	__asm__ volatile("lea (%1,%1,2), %0\n"
			 "990: movabsq $0x1122334455667788, %%rax\n"
			 "991: addq %%rax, %0\n\t" FORGED_NOTE("forged", "inside", "990b+1")
				 FORGED_NOTE("forged", "notnop", "991b")
			 : "=&r"(r)
			 : "r"(x)
			 : "rax");
	return r;
}

__attribute__((noinline)) void report(long i, long r) { STAP_PROBE2(forged, good, i, r); }

int main(int argc, char **argv)
{
	int n = 200, delay = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-n"))
			n = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-delay-ms"))
			delay = atoi(argv[i + 1]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (delay)
		usleep(delay * 1000);
	int wrong = 0;
	for (long i = 0; i < n; i++) {
		long r = compute(i);
		if (r != i * 3 + 0x1122334455667788L)
			wrong++;
		report(i, r);
	}
	printf("calls=%d wrong=%d\n", n, wrong);
	return wrong != 0;
}
