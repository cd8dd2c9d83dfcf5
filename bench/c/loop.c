/* The C target of bench/c/cost.py: a tight loop that calls a noinline function and passes
 * a USDT probe site (cbench:tick, no semaphore) on every iteration. Untraced, the probe site
 * is one NOP. At exit it prints one JSON line: the calls made and the process's own CPU
 * time per call (getrusage: a uprobe's trap and BPF program run in the calling thread).
 *
 *   cc -O2 -o loop loop.c    (sys/sdt.h: Debian's systemtap-sdt-dev)
 *   ./loop N                 N calls (default 200000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/sdt.h>
#include <time.h>

__attribute__((noinline)) long target(long n, const char *s)
{
	/* Keeps the call: the compiler may not assume anything about the result. */
	__asm__ volatile("" : "+r"(n) : "r"(s) : "memory");
	return n + 1;
}

static long long ns(struct timeval tv)
{
	return tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 200000;
	const char *s = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	long sum = 0;
	struct timespec t0, t1;
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < calls; i++) {
		DTRACE_PROBE2(cbench, tick, i, s);
		sum += target(i, s);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &r1);
	long long cpu = ns(r1.ru_utime) + ns(r1.ru_stime) - ns(r0.ru_utime) - ns(r0.ru_stime);
	long long wall = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
	printf("{\"calls\":%ld,\"sum\":%ld,\"cpu_ns_per_call\":%.1f,\"wall_ns_per_call\":%.1f}\n",
	       calls, sum, (double)cpu / calls, (double)wall / calls);
	return 0;
}
