// burst calls tick as fast as it can, -n times in all (from -goroutines goroutines, each
// with its own range of arguments), then prints how many calls it made: the exact number
// a tracer must account for (delivered + lost + throttled).
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"
)

var sink [64]int64

//go:noinline
func tick(i int64) int64 {
	return i * 2
}

func main() {
	n := flag.Int64("n", 100000, "calls in all")
	goroutines := flag.Int64("goroutines", 1, "goroutines calling tick at once")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first call")
	flag.Parse()
	if *goroutines < 1 || *goroutines > int64(len(sink)) || *n%*goroutines != 0 {
		panic("-goroutines must be 1..64 and divide -n")
	}
	time.Sleep(*delay)
	per := *n / *goroutines
	var wg sync.WaitGroup
	for g := int64(0); g < *goroutines; g++ {
		wg.Add(1)
		go func(g int64) {
			defer wg.Done()
			for i := g * per; i < (g+1)*per; i++ {
				sink[g] += tick(i)
			}
		}(g)
	}
	wg.Wait()
	fmt.Printf("calls=%d\n", *n)
}
