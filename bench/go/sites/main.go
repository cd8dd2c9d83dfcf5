// sites calls one of two noinline functions in a tight loop: the Go target of
// bench/sites.py, which measures what a uprobe costs by the instruction it sits on.
//
//   - framed has a stack frame, so the compiler opens it with Go's stack check
//     (`cmp 0x10(%r14),%rsp; jbe` to morestack): bpftrace's probe on the first byte sits on
//     the `cmp`, gprobe's on the `jbe`.
//   - leaf has no frame and no stack check: every tool's probe sits on its first
//     instruction (`lea`, single-stepped).
//
// At exit it prints one JSON line: the calls made and its own CPU time per call (getrusage:
// a uprobe's trap and BPF program run in the calling thread).
//
//	sites framed|leaf N
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

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: sites framed|leaf N")
		os.Exit(2)
	}
	calls, err := strconv.ParseInt(os.Args[2], 10, 64)
	if (os.Args[1] != "framed" && os.Args[1] != "leaf") || err != nil {
		fmt.Fprintln(os.Stderr, "usage: sites framed|leaf N")
		os.Exit(2)
	}
	var sum int64
	cpu0 := cpuNs()
	if os.Args[1] == "framed" {
		for i := int64(0); i < calls; i++ {
			sum += framed(i)
		}
	} else {
		for i := int64(0); i < calls; i++ {
			sum += leaf(i)
		}
	}
	cpu := cpuNs() - cpu0
	fmt.Printf("{\"calls\":%d,\"sum\":%d,\"cpu_ns_per_call\":%.1f}\n", calls, sum,
		float64(cpu)/float64(calls))
}
