/* Lengths of every signedness and width on e2e/testdata/clen: buffers captured as
 * `buf[:len]` with a negative length must read nothing (the value is marked invalid),
 * with a length above maxStringBytes are cut, and never show the bytes that follow the
 * buffer in memory: each buffer here is followed by a canary string that no record may
 * hold. Every call is printed, with its arguments, so the test compares gprobe's records.
 *
 *   clen
 */
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

#define CANARY "CANARY-0123456789-must-never-be-read-0123456789-CANARY"

/* The buffer and, right after it in memory, the canary. */
static struct {
	char buf[8];
	char canary[64];
} mem = {"visible", CANARY};

static char longbuf[200];

/* Each call stores here: a call whose result is unused is not optimized away. */
volatile long sink;

__attribute__((noinline)) int put_int(const char *buf, int len)
{
	STAP_PROBE2(clen, put, buf, len);
	sink = len > 0 ? buf[0] : 0;
	return sink;
}

__attribute__((noinline)) long put_long(const char *buf, long len)
{
	sink = len > 0 ? buf[0] : 0;
	return sink;
}

__attribute__((noinline)) int put_short(const char *buf, short len)
{
	sink = len > 0 ? buf[0] : 0;
	return sink;
}

__attribute__((noinline)) unsigned put_uint(const char *buf, unsigned len)
{
	sink = len ? buf[0] : 0;
	return sink;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(longbuf, 'x', sizeof(longbuf));
	/* volatile: the compiler passes each length as the program computed it. */
	volatile int lens[] = {7, -1, 0, -2147483647 - 1};
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		put_int(mem.buf, lens[i]);
		printf("put_int len=%d\n", lens[i]);
	}
	volatile long llen = -5;
	put_long(mem.buf, llen);
	printf("put_long len=%ld\n", llen);
	llen = 7;
	put_long(mem.buf, llen);
	printf("put_long len=%ld\n", llen);
	volatile short slen = -1;
	put_short(mem.buf, slen);
	printf("put_short len=%d\n", slen);
	/* Longer than maxStringBytes: cut and marked, from a buffer that long. */
	volatile int big = 150;
	put_int(longbuf, big);
	printf("put_int len=%d\n", big);
	volatile unsigned ulen = 150;
	put_uint(longbuf, ulen);
	printf("put_uint len=%u\n", ulen);
	return 0;
}
