// loop calls a noinline function as fast as it can (or at a set interval): the target of
// gprobe's benchmarks. At exit it prints one JSON line with the exact number of calls it
// made, so "produced" is known exactly, and its own start time (package init, before
// main) for the attach-latency measurement.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Set during package initialisation, before main runs: the closest a Go program gets
// to its own exec time without reading /proc.
var startUnixNano = time.Now().UnixNano()

// The probed function: Go's register ABI passes n in RAX and s in RBX (ptr) / RCX (len).
//
//go:noinline
func target(n int64, s string) int64 {
	return n + int64(len(s))
}

var sink int64

type result struct {
	Pid           int     `json:"pid"`
	Calls         int64   `json:"calls"`
	LoopNs        int64   `json:"loop_ns"`
	NsPerCall     float64 `json:"ns_per_call"`
	CPUNs         int64   `json:"cpu_ns"`
	CPUNsPerCall  float64 `json:"cpu_ns_per_call"`
	StartUnixNano int64   `json:"start_unix_nano"`
	LoopUnixNano  int64   `json:"loop_unix_nano"`
	Goroutines    int     `json:"goroutines"`
}

// cpuNs is the process's user + system CPU time: unlike wall time, it does not grow
// while the loop waits for a CPU that other work holds. A uprobe's trap and BPF program
// run in the calling thread, so they are counted here.
func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	n := flag.Int64("n", 1000000, "calls per goroutine (0: until -duration elapses)")
	duration := flag.Duration("duration", 0, "stop after this long (checked every 1024 calls)")
	strLen := flag.Int("str-len", 64, "length of the string argument")
	wait := flag.Bool("wait", false, "print \"ready\" and wait for SIGUSR1 before the loop (lets a tracer attach first)")
	interval := flag.Duration("interval", 0, "busy-wait this long between calls (0: back to back)")
	pause := flag.Duration("sleep", 0, "sleep this long between calls (0: back to back)")
	goroutines := flag.Int("goroutines", 1, "goroutines calling target concurrently")
	flag.Parse()

	s := strings.Repeat("x", *strLen)
	if *wait {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		fmt.Println("ready")
		<-ch
		signal.Stop(ch)
	}

	cpu0 := cpuNs()
	loopStart := time.Now()
	var deadline time.Time
	if *duration > 0 {
		deadline = loopStart.Add(*duration)
	}
	counts := make([]int64, *goroutines)
	var wg sync.WaitGroup
	for g := 0; g < *goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var acc, i int64
			for ; *n == 0 || i < *n; i++ {
				acc += target(i, s)
				paced := *interval > 0 || *pause > 0
				if *interval > 0 {
					for t := time.Now(); time.Since(t) < *interval; {
					}
				}
				if *pause > 0 {
					time.Sleep(*pause)
				}
				if (paced || i&1023 == 1023) && *duration > 0 && time.Now().After(deadline) {
					i++
					break
				}
			}
			counts[g] = i
			sink += acc
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(loopStart)
	cpu := cpuNs() - cpu0

	var total int64
	for _, c := range counts {
		total += c
	}
	perCall, cpuPerCall := 0.0, 0.0
	if total > 0 {
		perCall = float64(elapsed.Nanoseconds()) / float64(total) * float64(*goroutines)
		cpuPerCall = float64(cpu) / float64(total)
	}
	out, _ := json.Marshal(result{
		Pid:           os.Getpid(),
		Calls:         total,
		LoopNs:        elapsed.Nanoseconds(),
		NsPerCall:     perCall,
		CPUNs:         cpu,
		CPUNsPerCall:  cpuPerCall,
		StartUnixNano: startUnixNano,
		LoopUnixNano:  loopStart.UnixNano(),
		Goroutines:    *goroutines,
	})
	fmt.Println(string(out))
}
