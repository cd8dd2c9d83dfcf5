// stackgrow calls grow, a function with a 2 KiB frame, recursively from new goroutines,
// deep enough that each goroutine's stack grows (runtime.morestack) several times: the
// function restarts after every growth, and a probe at its entry must still see each call
// exactly once. It prints how many calls it made.
package main

import (
	"flag"
	"fmt"
)

//go:noinline
func grow(n int64) int64 {
	var pad [256]int64
	pad[n%256] = n
	if n == 0 {
		return pad[0]
	}
	return grow(n-1) + pad[n%256] - n + 1
}

func main() {
	goroutines := flag.Int("goroutines", 50, "goroutines, one after another")
	depth := flag.Int64("depth", 40, "grow's depth in each (calls: depth+1)")
	flag.Parse()
	var calls, sum int64
	for g := 0; g < *goroutines; g++ {
		done := make(chan int64)
		go func() { done <- grow(*depth) }()
		sum += <-done
		calls += *depth + 1
	}
	fmt.Printf("calls=%d sum=%d\n", calls, sum)
}
