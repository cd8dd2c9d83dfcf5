// crowd is the target of the tests that start many processes at once (or kill gprobe
// while they start): it calls each of five functions -calls times, -rate rounds a second,
// and prints how many calls of each it made, so a test can check that every call was
// delivered or counted. With -calls 0 it calls them until it is killed, printing nothing.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

//go:noinline
func f1(i int64) int64 { return i + 1 }

//go:noinline
func f2(i int64) int64 { return i + 2 }

//go:noinline
func f3(i int64) int64 { return i + 3 }

//go:noinline
func f4(i int64) int64 { return i + 4 }

//go:noinline
func f5(i int64) int64 { return i + 5 }

func main() {
	calls := flag.Int64("calls", 100, "rounds of calls (one call of each function a round); 0: until killed")
	rate := flag.Float64("rate", 50, "rounds a second")
	delay := flag.Duration("delay", 0, "pause before the first round")
	flag.Parse()
	time.Sleep(*delay)
	var made [5]int64
	every := time.Duration(float64(time.Second) / *rate)
	// Without -delay the first round comes at once: the process's first instructions
	// call the probes.
	for i := int64(0); *calls == 0 || i < *calls; i++ {
		made[0] += f1(i) - i
		made[1] += (f2(i) - i) / 2
		made[2] += (f3(i) - i) / 3
		made[3] += (f4(i) - i) / 4
		made[4] += (f5(i) - i) / 5
		time.Sleep(every)
	}
	fmt.Printf("calls pid=%d f1=%d f2=%d f3=%d f4=%d f5=%d\n", os.Getpid(),
		made[0], made[1], made[2], made[3], made[4])
}
