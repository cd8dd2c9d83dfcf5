// churn is the target of the churn tests and of bench/soak.sh: five functions called in
// turn, -rate rounds a second, -calls rounds in all (0: until SIGINT/SIGTERM), then it
// waits -hold and exits. Round k passes -base+k to each function. At exit it prints, for
// each function, how many calls it made and the sum of their arguments, and when its
// first and last calls were made, so a test compares gprobe's records with the program's
// own account. Each function's result is a fixed function of its argument (a record whose
// r0 does not match it is a wrong value).
//
// With -start-signal, it prints "base=N ready" once it can take SIGUSR1 and waits for it before
// its first round: a test starts the calls once gprobe has attached, so that each is traced.
//
// With -spawn-every, it makes no calls itself: it starts a copy of itself that often
// (-child-calls rounds at -child-rate each, -base numbering them apart), for process churn.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

//go:noinline
func add(i int64) int64 { return i + 7 }

//go:noinline
func double(i int64) int64 { return i * 2 }

//go:noinline
func square(i int64) int64 { return i * i }

//go:noinline
func negate(i int64) int64 { return -i }

//go:noinline
func mix(i int64) int64 { return i*31 + 3 }

var funcs = []struct {
	name string
	f    func(int64) int64
}{
	{"main.add", add},
	{"main.double", double},
	{"main.square", square},
	{"main.negate", negate},
	{"main.mix", mix},
}

func main() {
	calls := flag.Int64("calls", 100, "rounds (one call of each function); 0: until SIGINT/SIGTERM")
	rate := flag.Float64("rate", 50, "rounds per second")
	base := flag.Int64("base", 0, "the argument of the first round")
	hold := flag.Duration("hold", 0, "wait this long after the last round before exiting")
	delay := flag.Duration("delay", 0, "wait this long before the first round")
	startSignal := flag.Bool("start-signal", false, "print \"ready\", then wait for SIGUSR1 before the first round")
	spawnEvery := flag.Duration("spawn-every", 0, "start a copy of this program this often, instead of calling")
	childCalls := flag.Int64("child-calls", 100, "-spawn-every: each copy's -calls")
	childRate := flag.Float64("child-rate", 50, "-spawn-every: each copy's -rate")
	flag.Parse()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	if *spawnEvery > 0 {
		spawn(*spawnEvery, *base, *childCalls, *childRate, stop)
		return
	}
	counts := make([]int64, len(funcs))
	sums := make([]int64, len(funcs))
	var sink int64
	var first, last time.Time
	report := func() {
		for k, fn := range funcs {
			fmt.Printf("base=%d %s calls=%d argsum=%d\n", *base, fn.name, counts[k], sums[k])
		}
		fmt.Printf("base=%d done first=%d last=%d sink=%d\n", *base, unixNano(first), unixNano(last), sink)
		os.Stdout.Sync()
	}
	select {
	case <-time.After(*delay):
	case <-stop:
		report()
		return
	}
	if *startSignal {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		fmt.Printf("base=%d ready\n", *base)
		select {
		case <-usr1:
		case <-stop:
			report()
			return
		}
	}
	every := time.Duration(float64(time.Second) / *rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for k := int64(0); *calls == 0 || k < *calls; k++ {
		if first.IsZero() {
			first = time.Now()
		}
		i := *base + k
		for n, fn := range funcs {
			sink += fn.f(i)
			counts[n]++
			sums[n] += i
		}
		last = time.Now()
		select {
		case <-tick.C:
		case <-stop:
			report()
			return
		}
	}
	select {
	case <-time.After(*hold):
	case <-stop:
	}
	report()
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// spawn starts a copy of this program every `every` until stopped, then waits for them.
// Copy n calls with -base base+n*1e6; their reports go to this program's stdout.
func spawn(every time.Duration, base, calls int64, rate float64, stop chan os.Signal) {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := int64(0); ; n++ {
		cmd := exec.Command(self,
			"-calls", strconv.FormatInt(calls, 10),
			"-rate", strconv.FormatFloat(rate, 'f', -1, 64),
			"-base", strconv.FormatInt(base+n*1_000_000, 10))
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "spawn: %v\n", err)
		} else {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// One write per report: lines of copies never interleave.
				buf := make([]byte, 0, 1024)
				chunk := make([]byte, 1024)
				for {
					m, rerr := out.Read(chunk)
					buf = append(buf, chunk[:m]...)
					if rerr != nil {
						break
					}
				}
				_ = cmd.Wait()
				mu.Lock()
				os.Stdout.Write(buf)
				mu.Unlock()
			}()
		}
		select {
		case <-tick.C:
		case <-stop:
			wg.Wait()
			return
		}
	}
}
