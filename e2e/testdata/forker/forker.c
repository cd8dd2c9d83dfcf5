/* The fork target of the end-to-end tests: a parent that forks -n children (processes
 * running the same program, like postgres backends or nginx workers). Each child prints
 * "forked pid=P", waits for one byte on stdin (the test's go-ahead, once gprobe has
 * attached to it), then calls work() five times and prints each call and result.
 * With -quick, each child calls work() once as the first thing it does, prints that call
 * and exits, and the parent prints "children=N" once every child has exited.
 *
 *   forker [-n N] [-quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int work(int x) { return x * 2; }

int main(int argc, char **argv)
{
	int n = 3, quick = 0;
	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "-n") && a + 1 < argc)
			n = atoi(argv[++a]);
		else if (!strcmp(argv[a], "-quick"))
			quick = 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int c = 0; c < n; c++) {
		pid_t p = fork();
		if (p < 0)
			return 1;
		if (p == 0 && quick) {
			int r = work(c);
			printf("work pid=%d x=%d r=%d\n", getpid(), c, r);
			_exit(0);
		}
		if (p == 0) {
			printf("forked pid=%d\n", getpid());
			char go;
			if (read(0, &go, 1) != 1)
				_exit(1);
			for (int i = 0; i < 5; i++) {
				int x = c * 100 + i;
				printf("work pid=%d x=%d r=%d\n", getpid(), x, work(x));
			}
			_exit(0);
		}
	}
	int status, failed = 0;
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	if (quick)
		printf("children=%d\n", n);
	return failed;
}
