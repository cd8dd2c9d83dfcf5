// lifecycle is the target of the engine's end-to-end tests: short-lived processes, calls
// still in flight when the process is killed, recursion deeper than gprobe pairs, and a
// tight loop whose call rate shows what a probe costs. Every mode prints what it did, so a
// test compares gprobe's records with the program's own account.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// work is the probed function of the short-lived and loop modes.
//
//go:noinline
func work(i int64) int64 { return i*2 + 1 }

// block returns after i hours: a call in flight when the process is killed.
//
//go:noinline
func block(i int64) int64 {
	fmt.Printf("blocking=%d\n", i)
	os.Stdout.Sync()
	for n := int64(0); n < i; n++ {
		time.Sleep(time.Hour)
	}
	return i
}

// visit is handed URLs that carry credentials and tokens (it does not fetch them).
//
//go:noinline
func visit(url string) int { return len(url) }

// rec recurses to depth d; every call returns d.
//
//go:noinline
func rec(d int64) int64 {
	if d <= 1 {
		return 1
	}
	return rec(d-1) + 1
}

func main() {
	mode := flag.String("mode", "short", "short | block | recurse | loop | secrets (visits its arguments)")
	calls := flag.Int64("calls", 10, "short: calls of work; recurse: how many recursions")
	sleep := flag.Duration("sleep", 0, "short: pause between calls")
	depth := flag.Int64("depth", 20, "recurse: depth of each recursion")
	duration := flag.Duration("duration", time.Second, "loop: how long to call work")
	flag.Parse()
	switch *mode {
	case "short":
		var s int64
		for i := int64(0); i < *calls; i++ {
			s += work(i)
			if *sleep > 0 {
				time.Sleep(*sleep)
			}
		}
		fmt.Printf("calls=%d sum=%d\n", *calls, s)
	case "secrets":
		for _, u := range flag.Args() {
			visit(u)
			fmt.Printf("visited %s\n", u)
		}
	case "block":
		block(42)
	case "recurse":
		var s int64
		for i := int64(0); i < *calls; i++ {
			s += rec(*depth)
		}
		fmt.Printf("recursions=%d depth=%d calls=%d sum=%d\n", *calls, *depth, *calls**depth, s)
	case "loop":
		// Calls in batches, checking the clock every 1024 calls.
		start := time.Now()
		var n, s int64
		for time.Since(start) < *duration {
			for j := 0; j < 1024; j++ {
				s += work(n)
				n++
			}
		}
		el := time.Since(start)
		fmt.Printf("calls=%d ns_per_call=%.1f sum=%d\n", n, float64(el.Nanoseconds())/float64(n), s)
	default:
		fmt.Fprintf(os.Stderr, "unknown -mode %q\n", *mode)
		os.Exit(2)
	}
}
