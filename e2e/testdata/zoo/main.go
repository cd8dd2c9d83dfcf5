// zoo calls functions whose parameters cover the types and ABI cases gprobe decodes
// (register and stack arguments, multi-word values, results), printing what it passed so
// a test can compare it with what gprobe captured.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"
)

type point struct {
	x, y int
}

// Nine integer registers: a..h take RAX..R10, s needs two and only R11 is left, so s goes
// to the stack; i still gets R11; j and k go to the stack.
//
//go:noinline
func manyArgs(a, b, c, d, e, f, g, h int, s string, i int, j int8, k int64) int {
	return a + b + c + d + e + f + g + h + len(s) + i + int(j) + int(k)
}

//go:noinline
func kinds(b bool, i8 int8, u16 uint16, i32 int32, u64 uint64, p *int, bs []byte, e error) (ok bool, n int) {
	if e != nil {
		return false, -int(i32)
	}
	return b, len(bs) + int(i8) + int(u16)
}

//go:noinline
func scale(x float64, n int) float64 {
	return x * float64(n)
}

//go:noinline
func area(p point) int {
	return p.x * p.y
}

//go:noinline
func fail(n int) error {
	if n%2 == 1 {
		return errors.New("odd")
	}
	return nil
}

func main() {
	rounds := flag.Int("rounds", 3, "calls of each function")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	v := 7
	for r := 0; r < *rounds; r++ {
		s := fmt.Sprintf("stack-string-%d", r)
		fmt.Printf("manyArgs a=%d s=%s i=%d j=%d k=%d -> %d\n", r, s, 100+r, -r-1, int64(1)<<40+int64(r),
			manyArgs(r, 1, 2, 3, 4, 5, 6, 7, s, 100+r, int8(-r-1), int64(1)<<40+int64(r)))
		var err error
		if r%2 == 1 {
			err = os.ErrNotExist
		}
		bs := []byte(fmt.Sprintf("bytes-%d", r))
		ok, n := kinds(r%2 == 0, int8(-100+r), uint16(60000+r), int32(-2000000+r), uint64(1)<<63+uint64(r), &v, bs, err)
		fmt.Printf("kinds b=%t i8=%d u16=%d i32=%d u64=%d bs=%s e=%v -> ok=%t n=%d\n", r%2 == 0, -100+r, 60000+r,
			-2000000+r, uint64(1)<<63+uint64(r), bs, err != nil, ok, n)
		fmt.Printf("scale -> %g\n", scale(1.5, r))
		fmt.Printf("area -> %d\n", area(point{r, r + 1}))
		fmt.Printf("fail n=%d -> %v\n", r, fail(r))
		time.Sleep(50 * time.Millisecond)
	}
	// Keep net/http linked: its Get is inlined into this call site.
	if *rounds < 0 {
		http.Get("http://127.0.0.1:1/")
	}
}
