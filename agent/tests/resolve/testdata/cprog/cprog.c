/* A C program for the resolver's tests: functions of every argument kind (like libbpf's
 * uprobe example: add/sub), seven and more arguments (some on the stack), structs and
 * floats by value, a static function, and USDT probes: one inlined at two sites, one with
 * a constant argument, one whose note has a scaled-index operand (written by hand), and a
 * semaphore-guarded one (cprog_sema.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

typedef struct pair {
	int a, b;
} pair;

struct big {
	long x[4];
};

void cprog_request(const char *path, int status);

__attribute__((noinline)) int add(int a, int b) { return a + b; }

__attribute__((noinline)) int sub(int a, int b) { return a - b; }

__attribute__((noinline)) size_t greet(const char *name, char *out, size_t cap)
{
	return (size_t)snprintf(out, cap, "hello %s", name);
}

__attribute__((noinline)) long many(int a1, long a2, short a3, unsigned char a4, uint64_t a5,
				    int64_t a6, int a7, const char *a8)
{
	return a1 + a2 + a3 + a4 + (long)a5 + a6 + a7 + (a8 ? a8[0] : 0);
}

__attribute__((noinline)) double scale(double x, int k) { return x * k; }

__attribute__((noinline)) int sum_pair(pair p, int c) { return p.a + p.b + c; }

__attribute__((noinline)) long sum_big(struct big b, int c) { return b.x[0] + c; }

__attribute__((noinline)) bool is_even(unsigned int n) { return n % 2 == 0; }

static __attribute__((noinline)) int hidden_helper(int x) { return x * 3; }

static inline __attribute__((always_inline)) void twice(int x, long y)
{
	STAP_PROBE2(cprog, twice, x, y);
}

__attribute__((noinline)) int first_caller(int v)
{
	twice(v, 7);
	return v + 1;
}

__attribute__((noinline)) long second_caller(long w, int z)
{
	twice(z * 3, w);
	return w - z;
}

__attribute__((noinline)) void sib_site(void)
{
	__asm__ __volatile__(".globl cprog_sib_pc\ncprog_sib_pc: nop");
}

/* The note of cprog:sib, by hand: sys/sdt.h cannot write a scaled-index operand. */
__asm__(".pushsection .note.stapsdt,\"?\",\"note\"\n"
	".balign 4\n"
	".4byte 992f-991f, 994f-993f, 3\n"
	"991: .asciz \"stapsdt\"\n"
	"992: .balign 4\n"
	"993: .8byte cprog_sib_pc\n"
	".8byte _.stapsdt.base\n"
	".8byte 0\n"
	".asciz \"cprog\"\n"
	".asciz \"sib\"\n"
	".asciz \"-4@-8(%rsp,%rax,8) 8@%rdi 2@$-5\"\n"
	"994: .balign 4\n"
	".popsection\n");

volatile long sink;

int main(int argc, char **argv)
{
	char buf[64];
	pair p = {1, 2};
	struct big b = {{1, 2, 3, 4}};
	sink = add(argc, 2) + sub(argc, 1) + (long)greet(argv[0], buf, sizeof buf);
	sink += many(1, 2, 3, 4, 5, 6, 7, "x") + (long)scale(1.5, argc) + sum_pair(p, argc);
	sink += sum_big(b, argc) + is_even((unsigned)argc) + hidden_helper(argc);
	sink += first_caller(argc) + second_caller(argc * 5L, argc);
	STAP_PROBE1(cprog, constant, 42);
	sib_site();
	cprog_request(argv[0], argc);
	return 0;
}
