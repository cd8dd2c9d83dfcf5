// filterload calls a noinline function at a steady rate (default 100,000 calls a second)
// for a set time, with an argument that cycles 0, 1, ..., mod-1: a probe with
// `when: "i < 1"` keeps 1 call in mod. The load of bench/filter.py. Pacing: every
// millisecond (or whenever the sleep returns) it makes the calls that are due since the
// start, in one batch, so the rate over the run is exact even though a sleep is coarse.
// At exit it prints one JSON line with the calls it made, its loop time and its own CPU
// time.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

//go:noinline
func step(i int64) int64 {
	return i*3 + 1
}

// The probed function: Go's register ABI passes i in RAX. It calls step, so the compiler
// gives it a frame and opens it with the stack check (`cmp 0x10(%r14),%rsp; jbe`): gprobe's
// entry probe sits on the `jbe`, which the kernel emulates (a leaf function's first
// instruction would be single-stepped, several microseconds a call on this VM, and the
// target could not keep 100,000 calls a second under the probe).
//
//go:noinline
func tick(i int64) int64 {
	return step(i) ^ i
}

var sink int64

type result struct {
	Pid    int     `json:"pid"`
	Calls  int64   `json:"calls"`
	LoopNs int64   `json:"loop_ns"`
	Rate   float64 `json:"calls_per_s"`
	CPUNs  int64   `json:"cpu_ns"`
	Behind int64   `json:"max_behind"` // the most calls that were due at once (a batch)
}

// cpuNs is the process's user + system CPU time (the uprobes' traps and BPF programs run
// in the calling thread, so they are in it).
func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	rate := flag.Float64("rate", 100000, "calls per second (0: as fast as it can)")
	duration := flag.Duration("duration", 10*time.Second, "how long to call (0: until -n calls)")
	n := flag.Int64("n", 0, "stop after this many calls (0: no limit)")
	mod := flag.Int64("mod", 100, "the argument cycles 0..mod-1")
	wait := flag.Bool("wait", false, "print \"ready\" and wait for SIGUSR1 before calling (lets a tracer attach first)")
	flag.Parse()
	if *mod < 1 || (*duration <= 0 && *n <= 0) {
		fmt.Fprintln(os.Stderr, "filterload: -mod must be >= 1, and -duration or -n set")
		os.Exit(2)
	}
	if *wait {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		fmt.Println("ready")
		<-ch
		signal.Stop(ch)
	}

	cpu0 := cpuNs()
	start := time.Now()
	var calls, arg, acc, behind int64
	call := func(k int64) {
		for j := int64(0); j < k; j++ {
			acc += tick(arg)
			arg++
			if arg == *mod {
				arg = 0
			}
		}
		calls += k
	}
	for {
		elapsed := time.Since(start)
		if *duration > 0 && elapsed >= *duration {
			break
		}
		if *n > 0 && calls >= *n {
			break
		}
		if *rate <= 0 {
			k := int64(1024)
			if *n > 0 && *n-calls < k {
				k = *n - calls
			}
			call(k)
			continue
		}
		due := int64(*rate*elapsed.Seconds()) - calls
		if *n > 0 && calls+due > *n {
			due = *n - calls
		}
		if due > behind {
			behind = due
		}
		if due > 0 {
			call(due)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := cpuNs() - cpu0
	sink += acc
	out, _ := json.Marshal(result{
		Pid:    os.Getpid(),
		Calls:  calls,
		LoopNs: elapsed.Nanoseconds(),
		Rate:   float64(calls) / elapsed.Seconds(),
		CPUNs:  cpu,
		Behind: behind,
	})
	fmt.Println(string(out))
}
