/* The C target of the filter tests: handle(n, s) called -n times with deterministic, varied
 * arguments (negative n, a NULL s, strings of 64 bytes and longer). It prints every call,
 *
 *   call id=3 n=-2 s=/api/x3 null=false r0=3
 *
 * (s= empty and null=true for a NULL s), and its calls of greet (the first len bytes of
 * buf) and of the recursive fact (the outer call: fact(n) makes n calls in all),
 *
 *   greet id=3 buf=xyzzy-hello len=11 r0=131
 *   fact n=4 r0=24
 *
 * then "calls=N", so a test knows which calls a predicate holds for.
 *
 *   cfilter [-n N] [-delay-ms D]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) int handle(int n, const char *s)
{
	return n * 2 + (s ? (int)strlen(s) : 0);
}

/* Bytes with a length: buf[:len]. */
__attribute__((noinline)) size_t greet(const char *buf, size_t len) { return len + (unsigned char)buf[0]; }

/* Recursive: fact(n) calls fact(n - 1) down to fact(1). */
__attribute__((noinline)) long fact(long n) { return n <= 1 ? 1 : n * fact(n - 1); }

int main(int argc, char **argv)
{
	int calls = 40, delay = 500;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-n"))
			calls = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-delay-ms"))
			delay = atoi(argv[i + 1]);
	}
	char long_path[100];
	memset(long_path, 'v', sizeof(long_path) - 1);
	memcpy(long_path, "/api/", 5);
	long_path[sizeof(long_path) - 1] = 0;
	/* Exactly 64 bytes. */
	char exact[65];
	memset(exact, 'x', 64);
	memcpy(exact, "/exact/", 7);
	exact[64] = 0;
	usleep(delay * 1000);
	for (int i = 0; i < calls; i++) {
		char buf[32];
		const char *s;
		switch (i % 7) {
		case 0:
			s = "/healthz";
			break;
		case 1:
			snprintf(buf, sizeof(buf), "/api/x%d", i);
			s = buf;
			break;
		case 2:
			s = NULL;
			break;
		case 3:
			s = long_path;
			break;
		case 4:
			s = "/healthz/live";
			break;
		case 5:
			s = exact;
			break;
		default:
			s = "/ap";
		}
		int n = (i * 7) % 11 - 3;
		int r = handle(n, s);
		printf("call id=%d n=%d s=%s null=%s r0=%d\n", i, n, s ? s : "", s ? "false" : "true", r);
		static const size_t lens[] = {0, 3, 5, 11};
		size_t len = lens[i % 4];
		size_t g = greet("xyzzy-hello", len);
		printf("greet id=%d buf=%.*s len=%zu r0=%zu\n", i, (int)len, "xyzzy-hello", len, g);
		long f = fact(i % 9 + 1);
		printf("fact n=%d r0=%ld\n", i % 9 + 1, f);
	}
	printf("calls=%d\n", calls);
	return 0;
}
