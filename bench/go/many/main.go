// many has ten noinline functions f0..f9 and then idles until SIGTERM/SIGINT: the target
// of the idle-RSS benchmark (10 copies of this binary x 10 probes = 100 probes).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

//go:noinline
func f0(n int64) int64 { return n + 0 }

//go:noinline
func f1(n int64) int64 { return n + 1 }

//go:noinline
func f2(n int64) int64 { return n + 2 }

//go:noinline
func f3(n int64) int64 { return n + 3 }

//go:noinline
func f4(n int64) int64 { return n + 4 }

//go:noinline
func f5(n int64) int64 { return n + 5 }

//go:noinline
func f6(n int64) int64 { return n + 6 }

//go:noinline
func f7(n int64) int64 { return n + 7 }

//go:noinline
func f8(n int64) int64 { return n + 8 }

//go:noinline
func f9(n int64) int64 { return n + 9 }

func main() {
	// Each function is called once so the linker keeps it.
	var acc int64
	for i, f := range []func(int64) int64{f0, f1, f2, f3, f4, f5, f6, f7, f8, f9} {
		acc += f(int64(i))
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("ready", acc)
	<-ch
}
