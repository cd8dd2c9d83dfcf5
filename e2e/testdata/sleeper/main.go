// sleeper calls sleepFor from many goroutines at once; the goroutines park in time.Sleep
// and often resume on another thread. For every call it prints the requested duration and
// its own measurement of the call and the thread ids at entry and at return, so a test can check measured latencies against
// calls that migrated.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
)

var mu sync.Mutex

type callInfo struct {
	elapsed              time.Duration
	tidEntry, tidReturn int
}

// sleepFor measures itself as the last thing before returning, so that its own clock and
// gprobe's entry-to-RET measurement cover the same work.
//
//go:noinline
func sleepFor(ms int64, info *callInfo) int64 {
	start := time.Now()
	info.tidEntry = syscall.Gettid()
	time.Sleep(time.Duration(ms) * time.Millisecond)
	info.tidReturn = syscall.Gettid()
	info.elapsed = time.Since(start)
	return ms
}

func main() {
	workers := flag.Int("workers", 8, "concurrent goroutines")
	calls := flag.Int("calls", 5, "calls per goroutine")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first call")
	flag.Parse()
	// More Ps than cores and busy goroutines locked to their threads: a goroutine that
	// wakes from its sleep is rarely picked up by the thread it slept on.
	runtime.GOMAXPROCS(4)
	time.Sleep(*delay)
	// Busy goroutines keep the Ps occupied so sleepers resume on other threads.
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		go func() {
			runtime.LockOSThread()
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
					x++
					runtime.Gosched()
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for c := 0; c < *calls; c++ {
				var info callInfo
				ms := sleepFor(int64(20+10*((w+c)%4)), &info)
				mu.Lock()
				fmt.Printf("call ms=%d elapsed_ns=%d tid_entry=%d tid_return=%d\n", ms, info.elapsed.Nanoseconds(), info.tidEntry, info.tidReturn)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(stop)
}
