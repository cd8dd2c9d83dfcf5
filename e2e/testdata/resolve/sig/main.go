// Test program for gprobe's resolve module: functions with known signatures and
// prologues, built with Go 1.19 to 1.27, linked internally, externally and as PIE,
// stripped and not.
package main

import (
	"errors"
	"fmt"
	"os"
)

type pair struct {
	x int32
	y bool
}

type Counter struct{ n int }

//go:noinline
func mix(a int64, b string, c []byte, d error, e *int, f float64, g struct {
	x int32
	y bool
}) (n int, err error) {
	if d != nil {
		return 0, d
	}
	n = int(a) + len(b) + len(c) + *e + int(f) + int(g.x)
	if g.y {
		n++
	}
	return n, nil
}

//go:noinline
func unnamed(int, string) (int, error) {
	return 1, nil
}

//go:noinline
func kinds(m map[string]int, ch chan int, fn func() int, arr [3]uint16, p pair, u uintptr, c complex128, f32 float32, b bool, i8 int8, u32 uint32, any interface{}, names []string) bool {
	return m != nil && ch != nil && fn != nil && arr[0] == 1 && p.y && u != 0 && real(c) > 0 && f32 > 0 && b && i8 > 0 && u32 > 0 && any != nil && len(names) > 0
}

//go:noinline
func (c *Counter) Add(delta int) int {
	c.n += delta
	return c.n
}

// bigFrame has a stack frame and calls out, so it starts with a stack-growth check.
//
//go:noinline
func bigFrame(n int) string {
	var buf [64]byte
	for i := range buf {
		buf[i] = byte(n + i)
	}
	return fmt.Sprintf("%x", buf[:n%64])
}

// leaf has no frame and no stack check.
//
//go:noinline
//go:nosplit
func leaf(a, b int) int {
	return a*b + 1
}

// twice is small enough to be inlined: main's two direct calls are, and the function
// value twiceFn keeps an out-of-line copy that a probe can attach to.
func twice(x int) int {
	return 2*x + 1
}

var twiceFn = twice

func main() {
	x := 3
	n, err := mix(1, "two", []byte("three"), nil, &x, 4.5, struct {
		x int32
		y bool
	}{6, true})
	if err != nil {
		os.Exit(1)
	}
	m, _ := unnamed(1, "a")
	c := &Counter{}
	c.Add(m)
	ok := kinds(map[string]int{}, make(chan int), func() int { return 1 }, [3]uint16{1, 2, 3}, pair{1, true}, 1, 1i+1, 1, true, 1, 1, errors.New("e"), []string{"a"})
	// Two inlined calls whose results are used apart, so that both keep code.
	fmt.Println(twice(n))
	fmt.Println(twice(m))
	n += twiceFn(x)
	fmt.Println(n, leaf(n, m), bigFrame(n), ok, c.n)
}
