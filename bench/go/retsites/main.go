// retsites calls one noinline function in a tight loop: the Go target of the return-site
// measurement in BENCHMARKS.md ("Return sites: is there an emulated one?"). bpftrace's probe
// sits on the function's RET, or on the `jmp` that enters the RET's straight-line region
// (the instructions that lead to the RET without a branch or a call).
//
//   - join: both arms of an if/else call step; the compiler ends the first arm with a
//     `jmp` over the second into the code that computes the result and returns. Even
//     arguments take that jmp.
//
// At exit it prints one JSON line: the calls made and its own CPU time per call (getrusage:
// a uprobe's trap and BPF program run in the calling thread).
//
//	retsites join N
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
	if len(os.Args) != 3 || os.Args[1] != "join" {
		fmt.Fprintln(os.Stderr, "usage: retsites join N")
		os.Exit(2)
	}
	calls, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil || calls <= 0 {
		fmt.Fprintln(os.Stderr, "usage: retsites join N")
		os.Exit(2)
	}
	var sum int64
	cpu0 := cpuNs()
	for i := int64(0); i < calls; i++ {
		// even arguments only: every call takes the jmp into the return region
		sum += join(i * 2)
	}
	cpu := cpuNs() - cpu0
	fmt.Printf("{\"fn\":%q,\"calls\":%d,\"ns_per_call\":%.1f,\"sum\":%d}\n",
		os.Args[1], calls, float64(cpu)/float64(calls), sum)
}
