/* A string on a page the process has not touched yet: `text`, in the middle of a 1 MiB
 * read-only array, so that no fault on a page near it (the kernel maps up to 64 KiB around
 * one) has mapped its page before the first call. handle(1, text) is called first, with
 * the page not in the process's page tables (a uprobe cannot fault it in); handle reads
 * the string, so handle(2, text) finds it mapped. It prints
 *
 *   call n=1 s=abcdefgh r0=9
 *   call n=2 s=abcdefgh r0=10
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define AT (512 * 1024)

__attribute__((aligned(4096))) const char pages[1 << 20] = {
	[AT] = 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 0,
};

__attribute__((noinline)) int handle(int n, const char *s)
{
	return n + (int)strlen(s);
}

int main(void)
{
	const char *text = &pages[AT];
	/* As e2e/testdata/cfilter: time for gprobe to attach to a process it did not hold. */
	usleep(500 * 1000);
	for (int n = 1; n <= 2; n++) {
		int r = handle(n, text);
		printf("call n=%d s=%s r0=%d\n", n, text, r);
	}
	return 0;
}
