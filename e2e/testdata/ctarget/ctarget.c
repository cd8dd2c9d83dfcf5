/* The C target of the end-to-end tests: plain C functions (like libbpf's uprobe example),
 * a NUL-terminated string argument, bytes with a length, recursion, calls from several
 * threads at once, and a semaphore-guarded USDT probe. It prints every call it makes, with
 * its arguments and result, so a test compares gprobe's records with the program's own.
 *
 *   ctarget [-n N] [-threads T] [-delay-ms D]
 */
#define _SDT_HAS_SEMAPHORES 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

unsigned short ctarget_order_semaphore __attribute__((section(".probes")));

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) int add(int a, int b) { return a + b; }

__attribute__((noinline)) int sub(int a, int b) { return a - b; }

__attribute__((noinline)) size_t greet(const char *name, const char *buf, size_t len)
{
	return strlen(name) + len + (buf ? (unsigned char)buf[0] : 0);
}

__attribute__((noinline)) long fact(long n) { return n <= 1 ? 1 : n * fact(n - 1); }

__attribute__((noinline)) void order(const char *item, int qty)
{
	if (ctarget_order_semaphore)
		STAP_PROBE2(ctarget, order, item, qty);
}

struct job {
	int id, n;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	for (int i = 0; i < j->n; i++) {
		int a = j->id * 1000 + i, b = i * 7;
		int r = add(a, b);
		usleep(100); /* let threads interleave */
		pthread_mutex_lock(&out_mu);
		printf("add a=%d b=%d r=%d\n", a, b, r);
		pthread_mutex_unlock(&out_mu);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = 5, threads = 2, delay = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-n"))
			n = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-threads"))
			threads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-delay-ms"))
			delay = atoi(argv[i + 1]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (delay)
		usleep(delay * 1000);
	static const char *names[] = {"ada", "grace", "linus", "a_name_longer_than_sixteen_bytes"};
	for (int i = 0; i < n; i++) {
		int r = sub(100, i);
		printf("sub a=100 b=%d r=%d\n", i, r);
		const char *name = names[i % 4];
		char buf[8] = {'x', 'y', 'z', (char)('0' + i % 10), 0};
		size_t g = greet(name, buf, 4);
		printf("greet name=%s buf=%.4s len=4 r=%zu\n", name, buf, g);
		long f = fact(i + 3);
		printf("fact n=%d r=%ld\n", i + 3, f);
		order(name, i + 1);
		printf("order item=%s qty=%d\n", name, i + 1);
	}
	pthread_t t[16];
	struct job jobs[16];
	if (threads > 16)
		threads = 16;
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){.id = i + 1, .n = n};
		pthread_create(&t[i], NULL, worker, &jobs[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
