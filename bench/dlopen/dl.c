/* A program that dlopens and dlcloses a library in a loop and prints the time per pair:
 * what the dynamic loader hook of gprobe (a stop at each _dl_debug_state) costs a process
 * with a probe on a library. See bench/dlopen/run.sh. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 200;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++) {
		void *h = dlopen("libcrypt.so.1", RTLD_NOW);
		if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
		dlclose(h);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f us per dlopen+dlclose\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n);
	return 0;
}
