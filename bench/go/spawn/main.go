// spawn starts -n goroutines one after the other (each waited for) inside calls of
// handle, and prints the time per goroutine: what gprobe's runtime.newproc1 probe and the
// nesting of spans cost a program that starts goroutines.
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"
)

var sink int64

//go:noinline
func work(i int64) int64 { return i * 2 }

//go:noinline
func handle(i int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sink += work(i)
	}()
	wg.Wait()
}

func main() {
	n := flag.Int64("n", 200000, "goroutines")
	delay := flag.Duration("delay", 0, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	t0 := time.Now()
	for i := int64(0); i < *n; i++ {
		handle(i)
	}
	fmt.Printf("%.0f ns per goroutine\n", float64(time.Since(t0).Nanoseconds())/float64(*n))
}
