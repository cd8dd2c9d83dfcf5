/* The C target of bench/sites.py: a tight loop calling one noinline function, `target`,
 * which calls another (so that a frame-pointer build gives it a frame: GCC 12 gives none
 * to a leaf, whatever -mno-omit-leaf-frame-pointer says). Built three ways, its first
 * instructions are:
 *
 *   -fno-omit-frame-pointer -fcf-protection=none   push %rbp; mov %rsp,%rbp; call step
 *   -fno-omit-frame-pointer -fcf-protection=full   endbr64; push %rbp; ...
 *   -fomit-frame-pointer -fcf-protection=none      sub $0x8,%rsp; call step
 *
 * At exit it prints one JSON line: the calls made and the process's own CPU time per call
 * (getrusage: a uprobe's trap and BPF program run in the calling thread).
 *
 *   cc -O2 [flags above] -o sites sites.c
 *   ./sites N                N calls (default 200000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

__attribute__((noipa)) long step(long n)
{
	return n * 3 + 1;
}

__attribute__((noipa)) long target(long n)
{
	return step(n) + 1;
}

static long long ns(struct timeval tv)
{
	return tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 200000;
	long sum = 0;
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	for (long i = 0; i < calls; i++)
		sum += target(i);
	getrusage(RUSAGE_SELF, &r1);
	long long cpu = ns(r1.ru_utime) + ns(r1.ru_stime) - ns(r0.ru_utime) - ns(r0.ru_stime);
	printf("{\"calls\":%ld,\"sum\":%ld,\"cpu_ns_per_call\":%.1f}\n", calls, sum,
	       (double)cpu / calls);
	return 0;
}
