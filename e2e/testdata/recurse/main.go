// recurse calls depth(-depth) -rounds times, one call after the other on one goroutine;
// depth(n) calls depth(n-1) down to depth(0), so a latency probe on it sees calls nested
// -depth+1 deep. It prints how many calls of depth it made.
package main

import (
	"flag"
	"fmt"
	"time"
)

var sink int64

//go:noinline
func depth(n int64) int64 {
	if n == 0 {
		return 0
	}
	return depth(n-1) + 1
}

func main() {
	d := flag.Int64("depth", 20, "deepest argument: each round makes depth+1 nested calls")
	rounds := flag.Int64("rounds", 50, "rounds")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	for r := int64(0); r < *rounds; r++ {
		sink += depth(*d)
	}
	fmt.Printf("calls=%d\n", *rounds*(*d+1))
}
