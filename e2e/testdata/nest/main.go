// nest runs -requests "requests" on -workers goroutines at once. handle(id) starts a
// goroutine running bg(id), which calls leaf(id*10+9), and calls step(id, 1) and
// step(id, 2), each of which calls leaf(id*10+k); fact(n) recurses down to fact(1). It prints one line per handle call and per outer fact call, so a test can
// rebuild the call trees the spans must form.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"time"
)

var mu sync.Mutex

//go:noinline
func leaf(x int) int {
	runtime.Gosched() // let goroutines interleave on the threads
	return x * 2
}

//go:noinline
func step(id, k int) int {
	return leaf(id*10 + k)
}

//go:noinline
func bg(id int) int {
	return leaf(id*10 + 9)
}

//go:noinline
func handle(id int) int {
	var wg sync.WaitGroup
	var b int
	wg.Add(1)
	go func() {
		defer wg.Done()
		b = bg(id)
	}()
	r := step(id, 1) + step(id, 2)
	wg.Wait()
	return r + b
}

//go:noinline
func fact(n int) int {
	if n <= 1 {
		return 1
	}
	return n * fact(n-1)
}

func main() {
	requests := flag.Int("requests", 40, "handle calls")
	workers := flag.Int("workers", 4, "goroutines calling handle at once")
	delay := flag.Duration("delay", 0, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	ids := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				r := handle(id)
				mu.Lock()
				fmt.Printf("handle id=%d r=%d\n", id, r)
				mu.Unlock()
			}
		}()
	}
	for id := 1; id <= *requests; id++ {
		ids <- id
	}
	close(ids)
	wg.Wait()
	for n := 3; n <= 6; n++ {
		fmt.Printf("fact n=%d r=%d\n", n, fact(n))
	}
}
