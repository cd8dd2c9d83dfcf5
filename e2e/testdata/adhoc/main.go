// adhoc calls work(id, name) -n times, one call after another; every -slow-every'th call
// (id divisible by it) sleeps 2 ms, the others return at once. work returns the name's
// length plus id, and an error for odd ids. It prints its own view of every call, then
// the count:
//
//	work id=3 name=item-3 r0=9 err=odd slow=false
//	calls=N
//
// With -wait it first prints "ready pid=PID" and waits for a line on stdin, so that a
// tracer can attach to it by pid before its first call.
//
//	adhoc [-n N] [-slow-every K] [-wait]
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

var errOdd = errors.New("odd")

//go:noinline
func work(id int64, name string) (int64, error) {
	if slowEvery > 0 && id%slowEvery == 0 {
		time.Sleep(2 * time.Millisecond)
	}
	if id%2 == 1 {
		return int64(len(name)) + id, errOdd
	}
	return int64(len(name)) + id, nil
}

var slowEvery int64

func main() {
	n := flag.Int64("n", 10, "calls")
	flag.Int64Var(&slowEvery, "slow-every", 4, "every Kth call sleeps 2 ms (0: none)")
	wait := flag.Bool("wait", false, "wait for a line on stdin before the first call")
	flag.Parse()
	if *wait {
		fmt.Printf("ready pid=%d\n", os.Getpid())
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	for id := int64(0); id < *n; id++ {
		name := fmt.Sprintf("item-%d", id)
		r, err := work(id, name)
		e := "nil"
		if err != nil {
			e = err.Error()
		}
		fmt.Printf("work id=%d name=%s r0=%d err=%s slow=%t\n", id, name, r, e,
			slowEvery > 0 && id%slowEvery == 0)
	}
	fmt.Printf("calls=%d\n", *n)
}
