// burst calls tick as fast as it can, -n times, then prints how many calls it made: the
// exact number a tracer must account for (delivered + lost + throttled).
package main

import (
	"flag"
	"fmt"
	"time"
)

var sink int64

//go:noinline
func tick(i int64) int64 {
	return i * 2
}

func main() {
	n := flag.Int64("n", 100000, "calls")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	for i := int64(0); i < *n; i++ {
		sink += tick(i)
	}
	fmt.Printf("calls=%d\n", *n)
}
