// pieext is built with cgo as a position-independent executable linked by the external
// linker (-buildmode=pie -ldflags=-linkmode=external, as Debian builds its Go packages).
// Each round runs grow on a new goroutine, whose small first stack must grow (and move)
// several times under grow's deep recursion: a return probe that rewrote return addresses
// on the stack (a uretprobe) would kill it with "unexpected return pc". It also calls a C
// function through cgo, where a uretprobe is right.
//
// It prints every outer call of grow and every call of cadd with its arguments and result.
//
//	pieext [-rounds N] [-depth D]
package main

/*
__attribute__((noinline)) int cadd(int a, int b) { return a + b; }
*/
import "C"

import (
	"flag"
	"fmt"
	"time"
)

// grow recurses n deep with a 1 KiB frame and returns n plus the bytes of tag.
//
//go:noinline
func grow(n int64, tag string) int64 {
	var frame [1024]byte
	frame[n%1024] = byte(n)
	if n == 0 {
		return int64(len(tag)) + int64(frame[0])
	}
	return grow(n-1, tag) + 1 + int64(frame[n%1024]) - int64(byte(n))
}

func main() {
	rounds := flag.Int("rounds", 20, "rounds")
	depth := flag.Int64("depth", 40, "recursion depth of each round")
	delay := flag.Duration("delay", 0, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	for r := 0; r < *rounds; r++ {
		tag := fmt.Sprintf("round-%d", r)
		done := make(chan int64)
		go func() { done <- grow(*depth, tag) }()
		fmt.Printf("grow n=%d tag=%s r=%d\n", *depth, tag, <-done)
		a, b := C.int(r), C.int(7*r)
		fmt.Printf("cadd a=%d b=%d r=%d\n", a, b, C.cadd(a, b))
	}
}
