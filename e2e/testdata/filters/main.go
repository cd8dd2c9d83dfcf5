// filters calls handle -n times with deterministic, varied arguments (long paths, a nil
// customer, an error on some calls, a sleep on some when -sleep is given) and prints its
// own view of every call, one line each:
//
//	call id=7 n=5 path=/api/orders/7 ok=false customer=yes name=acorn items=1 price=10.5 total=11 err=odd dur_ns=1234
//
// (customer=nil and an empty name= when the order has no customer; err=nil without an
// error, err=code for a nil *codeErr, which is a non-nil error), and one line of its call of kinds
//
//	kinds id=7 x=0 y=21 small=-63 u16=14000 big=9223372036854775815 b=3 body=POST:/y map=true len=3 flag=false
//
// then "calls=N". A tracer's filter on handle keeps exactly the calls its predicate
// holds for; the test computes which from these lines.
//
//	filters [-n N] [-goroutines G] [-sleep] [-delay D]
package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"
)

type Customer struct {
	Name string
	Tier int64
}

type Item struct {
	SKU string
	Qty int64
}

type Order struct {
	ID       int64
	Customer *Customer
	Items    []Item
	Price    float64
	// Slept in handle: the call's own duration.
	Delay time.Duration
}

var errOdd = errors.New("odd")

// codeErr's nil pointer is an error all the same: a non-nil interface.
type codeErr struct{ code int }

func (e *codeErr) Error() string { return "code" }

// sink keeps *Order's runtime type descriptor (and those of the types it holds) in the
// binary: a stripped build describes its types only through them.
var (
	sink   interface{}
	sinkMu sync.Mutex
)

//go:noinline
func handle(o *Order, path string, n int64, ok bool) (total int64, err error) {
	if o.Delay > 0 {
		time.Sleep(o.Delay)
	}
	total = n*2 + int64(len(o.Items))
	if !ok {
		total++
	}
	if o.ID%4 == 3 {
		err = errOdd
	} else if o.ID%9 == 5 {
		var typedNil *codeErr
		err = typedNil
	}
	return total, err
}

// Point is passed by value: its fields in registers.
type Point struct {
	X, Y int32
}

// kinds takes integers of every size and sign, a struct by value, and a []byte, a map and
// a bool that fall to the stack (the registers run out).
//
//go:noinline
func kinds(id int64, p Point, small int8, u16 uint16, big uint64, b byte, body []byte, m map[string]int, flag bool) int {
	r := int(id) + int(p.X) + int(small) + int(u16) + int(big%7) + int(b) + len(body) + len(m)
	if flag {
		r++
	}
	return r
}

var bodies = [][]byte{nil, []byte("GET:/x"), []byte("POST:/y"), {}, []byte("GET")}

// callKinds calls kinds with arguments made from i and returns its line.
func callKinds(i int64) string {
	p := Point{X: int32(i%5 - 2), Y: int32(i * 3)}
	small := int8(-i * 9)
	u16 := uint16(i * 2000)
	big := uint64(i)
	if i%2 == 1 {
		big += 1 << 63
	}
	b := byte(i * 37)
	body := bodies[i%int64(len(bodies))]
	var m map[string]int
	if i%3 != 0 {
		m = map[string]int{}
		for k := int64(0); k < i%4; k++ {
			m[fmt.Sprint(k)] = int(k)
		}
	}
	flag := i%7 < 3
	sinkMu.Lock()
	sink = p
	sinkMu.Unlock()
	kinds(i, p, small, u16, big, b, body, m, flag)
	return fmt.Sprintf("kinds id=%d x=%d y=%d small=%d u16=%d big=%d b=%d body=%s map=%t len=%d flag=%t\n",
		i, p.X, p.Y, small, u16, big, b, body, m != nil, len(m), flag)
}

var paths = []string{
	"/healthz",
	"/api/orders/",
	"/static/app.js",
	// Longer than 64 bytes.
	"/api/" + strings.Repeat("v", 80) + "/",
	"/ap",
	"/healthz/live",
	"",
	// Exactly 64 bytes.
	"/exact/" + strings.Repeat("x", 57),
}

var names = []string{
	"acme",
	"acorn",
	"bob",
	// Starts with "acme", longer than 64 bytes: equal to no short literal.
	"acme" + strings.Repeat("e", 70),
	"",
	"Acme",
}

// Sleeps of the -sleep calls: well below and above 5 ms (and none).
var delays = []time.Duration{0, 2 * time.Millisecond, 9 * time.Millisecond, 3 * time.Millisecond, 12 * time.Millisecond}

func order(i int64, sleep bool) (*Order, string, int64, bool) {
	o := &Order{ID: i, Price: float64(i) * 1.5}
	if i%4 != 0 {
		o.Customer = &Customer{Name: names[(i/4+i)%int64(len(names))], Tier: i % 3}
	}
	for k := int64(0); k < (i*3)%5; k++ {
		o.Items = append(o.Items, Item{SKU: fmt.Sprint("sku", k), Qty: k + 1})
	}
	if sleep {
		o.Delay = delays[(i/2)%int64(len(delays))]
	}
	path := paths[i%int64(len(paths))]
	if strings.HasSuffix(path, "/") && path != "/" {
		path += fmt.Sprint(i)
	}
	return o, path, (i*7)%11 - 2, i%3 != 1
}

func main() {
	n := flag.Int64("n", 60, "calls of handle")
	goroutines := flag.Int64("goroutines", 1, "goroutines calling handle at once (call i on goroutine i % G)")
	sleep := flag.Bool("sleep", false, "let some calls sleep (2, 3, 9 or 12 ms)")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first call")
	flag.Parse()
	time.Sleep(*delay)
	lines := make([]string, *n)
	var wg sync.WaitGroup
	for g := int64(0); g < *goroutines; g++ {
		wg.Add(1)
		go func(g int64) {
			defer wg.Done()
			for i := g; i < *n; i += *goroutines {
				lines[i] = call(i, *sleep) + callKinds(i)
			}
		}(g)
	}
	wg.Wait()
	fmt.Print(strings.Join(lines, ""))
	fmt.Printf("calls=%d\n", *n)
}

// call makes call i and returns its line.
func call(i int64, sleep bool) string {
	o, path, num, ok := order(i, sleep)
	sinkMu.Lock()
	sink = o
	sinkMu.Unlock()
	t0 := time.Now()
	r, err := handle(o, path, num, ok)
	dur := time.Since(t0)
	customer, name := "nil", ""
	if o.Customer != nil {
		customer, name = "yes", o.Customer.Name
	}
	e := "nil"
	if err != nil {
		e = err.Error()
	}
	return fmt.Sprintf("call id=%d n=%d path=%s ok=%t customer=%s name=%s items=%d price=%g total=%d err=%s dur_ns=%d\n",
		o.ID, num, path, ok, customer, name, len(o.Items), o.Price, r, e, dur.Nanoseconds())
}
