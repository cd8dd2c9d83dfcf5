// sites calls one of three noinline functions in a tight loop: the Go target of
// bench/sites.py, which measures what a uprobe costs by the instruction it sits on, and of
// bench/ret_sites_cost.py (a probe on a RET against one on the jmp into its return code).
//
//   - framed has a stack frame, so the compiler opens it with Go's stack check
//     (`cmp 0x10(%r14),%rsp; jbe` to morestack): bpftrace's probe on the first byte sits on
//     the `cmp`, gprobe's on the `jbe`.
//
//   - leaf has no frame and no stack check: every tool's probe sits on its first
//     instruction (`lea`, single-stepped).
//
//   - join (bench/ret_sites_cost.py): both arms of an if/else call step; the compiler ends
//     the first arm with a `jmp` over the second into the code that computes the result
//     and returns. The loop passes even arguments, so every call takes that jmp.
//
// At exit it prints one JSON line: the calls made and its own CPU time per call (getrusage:
// a uprobe's trap and BPF program run in the calling thread).
//
//	sites framed|leaf|join N
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

//go:noinline
func step(n int64) int64 {
	return n*3 + 1
}

// framed calls step: a function that calls another is given a frame and a stack check.
//
//go:noinline
func framed(n int64) int64 {
	return step(n) ^ n
}

//go:noinline
func leaf(n int64) int64 {
	return n*3 + 1
}

//go:noinline
func join(n int64) int64 {
	var r int64
	if n&1 == 0 {
		r = step(n) + 5
	} else {
		r = step(n+1) * 7
	}
	return r ^ n
}

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	usage := func() {
		fmt.Fprintln(os.Stderr, "usage: sites framed|leaf|join N")
		os.Exit(2)
	}
	if len(os.Args) != 3 {
		usage()
	}
	calls, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil {
		usage()
	}
	var sum int64
	cpu0 := cpuNs()
	switch os.Args[1] {
	case "framed":
		for i := int64(0); i < calls; i++ {
			sum += framed(i)
		}
	case "leaf":
		for i := int64(0); i < calls; i++ {
			sum += leaf(i)
		}
	case "join":
		for i := int64(0); i < calls; i++ {
			// even arguments only: every call takes the jmp into the return code
			sum += join(i * 2)
		}
	default:
		usage()
	}
	cpu := cpuNs() - cpu0
	fmt.Printf("{\"calls\":%d,\"sum\":%d,\"cpu_ns_per_call\":%.1f}\n", calls, sum,
		float64(cpu)/float64(calls))
}
