// cet: C functions built with -fcf-protection=full, so each starts with endbr64 (a single-
// stepped instruction under a uprobe). framed() keeps a frame pointer (push %rbp follows the
// endbr64: gprobe's probe goes there when the kernel emulates push); square() is a leaf
// whose second instruction is single-stepped anyway (the probe stays on the first byte).
// It prints one line per call, so a test can hold each record to the call it describes.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline, optimize("no-omit-frame-pointer"))) long framed(long x)
{
	volatile long y = x * 3;
	return y + 1;
}

__attribute__((noinline)) long square(long x)
{
	return x * x;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 100;
	for (long i = 0; i < calls; i++) {
		long f = framed(i), s = square(i);
		printf("call i=%ld framed=%ld square=%ld\n", i, f, s);
	}
	return 0;
}
