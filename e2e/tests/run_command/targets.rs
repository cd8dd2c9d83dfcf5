//! The C programs the `gprobe run -- CMD` tests run under gprobe, each built into the test's
//! folder, and the spec that selects ctarget there without naming it.

use gprobe_e2e::cc;
use gprobe_e2e::go::repo_root;
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::path::{Path, PathBuf};

pub fn ctarget(dir: &Path) -> PathBuf {
    let src = repo_root().join("e2e/testdata/ctarget/ctarget.c");
    cc::build(&src, &dir.join("ctarget"), &["-g"], None)
}

/// `add` (latency, with its result) and `sub` (entry only) of ctarget, selected by a glob
/// whose last component is not literal: no exec hold knows the program's name or file.
pub fn ctarget_spec(dir: &Path) -> String {
    SpecBuilder::new("cmd")
        .executable(dir.join("c?arget"))
        .probe(ProbeBuilder::new("add").capture(["a", "b", "r0"]).latency())
        .probe(ProbeBuilder::new("sub").capture(["a", "b"]))
        .yaml()
}

/// A program that counts the SIGINTs and SIGTERMs it receives, then calls `finish(n)` (the
/// probed function) and exits with that count: a signal delivered twice shows.
const COUNTER: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static volatile sig_atomic_t n;
static void on_signal(int s) { (void)s; n++; }
__attribute__((noinline)) int finish(int k) { return k; }
int main(void) {
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("counter-ready\n");
	fflush(stdout);
	while (!n)
		pause();
	usleep(300000); /* a second delivery would land here */
	return finish(n);
}
"#;

pub fn counter(dir: &Path) -> PathBuf {
    let src = dir.join("counter.c");
    std::fs::write(&src, COUNTER).unwrap();
    cc::build(&src, &dir.join("counter"), &["-g"], None)
}

/// Four threads each call a function whose name is longer than the table's column 200
/// times, passing bytes that are not UTF-8 text.
const BYTES: &str = r#"
#include <pthread.h>
#include <stddef.h>
/* noipa: a call the compiler cannot see through is made every time, not once. */
__attribute__((noipa)) size_t a_function_whose_name_is_longer_than_the_column(const char *p, size_t n)
{
	return n + (p[0] & 1);
}
static const char bytes[] = "caf\xe9 \xff!";
static void *work(void *arg) {
	size_t s = 0;
	for (int i = 0; i < 200; i++)
		s += a_function_whose_name_is_longer_than_the_column(bytes, 7);
	return (void *)s;
}
int main(void) {
	/* Its page is in memory before the first call reads it: read through a volatile
	 * pointer (a constant's element would be folded, and its page left untouched). */
	(void)*(const volatile char *)bytes;
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	return 0;
}
"#;

pub fn bytes(dir: &Path) -> PathBuf {
    let src = dir.join("bytes.c");
    std::fs::write(&src, BYTES).unwrap();
    cc::build(&src, &dir.join("bytes"), &["-g"], None)
}
