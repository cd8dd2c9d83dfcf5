// hot calls work(i) -rate times a second, in batches every millisecond (or one call each
// 1/rate s when the rate is under 1,000), until killed, and prints every 250 ms how long a
// call took in that time (the median of its batches' wall time per call), so a test can
// see what a probe costs it and that the cost goes when the probe does.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"time"
)

var sink int64

// work does about 100 ns of arithmetic: a probe's trap shows against it.
//
//go:noinline
func work(i int64) int64 {
	var a [16]int64
	for k := range a {
		a[k] = i*int64(k) + sink
	}
	s := int64(0)
	for r := 0; r < 4; r++ {
		for k := range a {
			s += a[k] ^ int64(r)
		}
	}
	return s
}

func main() {
	rate := flag.Int("rate", 200000, "calls a second")
	flag.Parse()
	batch := *rate / 1000
	every := time.Millisecond
	if batch < 1 {
		batch = 1
		every = time.Second / time.Duration(*rate)
	}
	var i int64
	var perCall []float64
	report := time.Now().Add(250 * time.Millisecond)
	next := time.Now()
	for {
		t := time.Now()
		for b := 0; b < batch; b++ {
			sink += work(i)
			i++
		}
		perCall = append(perCall, float64(time.Since(t).Nanoseconds())/float64(batch))
		if time.Now().After(report) {
			sort.Float64s(perCall)
			fmt.Printf("tick pid=%d calls=%d ns_per_call=%.0f\n", os.Getpid(), i, perCall[len(perCall)/2])
			perCall = perCall[:0]
			report = report.Add(250 * time.Millisecond)
		}
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
}
