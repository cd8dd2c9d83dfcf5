// Test program for gprobe's Go values: field paths through pointers and struct fields
// (embedded ones too), slices of integers and strings, a map, a nil pointer on the way,
// errors from errors.New and fmt.Errorf("%w"), generic functions, and an HTTP handler.
//
//	values offsets   prints, for every path the tests plan, the offsets Go itself uses
//	                 (unsafe.Offsetof): "PATH <capture> <hop offsets> <final offset>";
//	                 the type words of boxed values: "TYPE <%T> <address>" (an itab's
//	                 address for an error); and where the executable is mapped: "MAP
//	                 <start> <file offset>" (first line of /proc/self/maps naming it)
//	values run [N]   calls each probed function N times (default 3) and prints what it
//	                 passed or returned as one JSON object per call, for exact comparison
//	values serve     serves handleOrder on 127.0.0.1:PORT (PORT from $PORT, default 0)
//
// Every probed type is also passed to fmt.Println or boxed in an interface, so that a
// build stripped of DWARF (-ldflags=-s -w) still holds its runtime type descriptor.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// Base is embedded in order: its fields are promoted (o.ID) and it is a field itself
// (o.Base.ID).
type Base struct {
	ID      int64
	Created uint32
}

type Address struct {
	City string
	Zip  int32
}

type Customer struct {
	Name  string
	Email string
	Addr  *Address
	VIP   bool
}

type note struct {
	Text string
	Next *note
}

type order struct {
	Base
	Customer *Customer
	Qtys     []int64
	Tags     []string
	Flags    []bool
	Meta     map[string]int
	Note     *note // nil in some calls: paths through it are null
	Total    float64
	Small    int8
	Err      error
	Any      interface{}
}

// secret is never boxed in an interface: a stripped build has no descriptor for it, and
// probes that need its layout must say so.
type secret struct {
	Level int
	Owner *Customer
}

// tracked embeds a pointer: its promoted fields (t.ID) are one dereference away.
type tracked struct {
	Label string
	*Base
}

// Money is a named integer type: a by-value parameter of this type is an int64.
type Money int64

// pair is passed by value: its fields are register-assigned.
type pair struct {
	Key   string
	Count int
	Cust  *Customer
}

var errNotFound = errors.New("not found")

//go:noinline
func track(t *tracked) int64 {
	return t.ID
}

//go:noinline
func audit(s *secret) int {
	return s.Level
}

//go:noinline
func process(o *order) int {
	return len(o.Tags) + len(o.Qtys) + int(o.ID)
}

//go:noinline
func processPair(p pair, m Money) int {
	return len(p.Key) + p.Count + int(m)
}

//go:noinline
func lookup(id int) error {
	switch id % 3 {
	case 0:
		return nil
	case 1:
		return errNotFound
	}
	return fmt.Errorf("lookup %d: %w", id, errNotFound)
}

type Number interface {
	~int64 | ~float64
}

//go:noinline
func Sum[T Number](xs []T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}

//go:noinline
func Add[T any](a, b T) T {
	return b
}

//go:noinline
func handleOrder(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "%s %s %s %d\n", r.Method, r.URL.Path, r.Host, r.ContentLength)
}

func newOrder(i int) *order {
	o := &order{
		Base:     Base{ID: int64(1000 + i), Created: 7},
		Customer: &Customer{Name: "Ada", Email: "ada@example.com", Addr: &Address{City: "Paris", Zip: 75001}, VIP: i%2 == 0},
		Qtys:     []int64{1, 2, int64(i)},
		Tags:     []string{"red", "blue"},
		Flags:    []bool{true, false},
		Meta:     map[string]int{"a": 1, "b": i},
		Total:    12.5,
		Small:    -3,
		Any:      "boxed",
	}
	if i%2 == 1 {
		o.Note = &note{Text: "fragile", Next: &note{Text: "second"}}
		o.Err = fmt.Errorf("order %d: %w", i, errNotFound)
	}
	return o
}

func offsets() {
	var o order
	var c Customer
	var a Address
	var n note
	var r http.Request
	var u url.URL
	p := func(capture string, hops []uintptr, off uintptr) {
		fmt.Printf("PATH %s", capture)
		for i, h := range hops {
			if i == 0 {
				fmt.Print(" ")
			} else {
				fmt.Print(",")
			}
			fmt.Print(h)
		}
		if len(hops) == 0 {
			fmt.Print(" -")
		}
		fmt.Printf(" %d\n", off)
	}
	// o is a pointer: the base is its register; each '->' below is one hop.
	p("o.ID", nil, unsafe.Offsetof(o.Base)+unsafe.Offsetof(o.Base.ID))
	p("o.Base.Created", nil, unsafe.Offsetof(o.Base)+unsafe.Offsetof(o.Base.Created))
	p("o.Customer.Name", []uintptr{unsafe.Offsetof(o.Customer)}, unsafe.Offsetof(c.Name))
	p("o.Customer.Addr.City", []uintptr{unsafe.Offsetof(o.Customer), unsafe.Offsetof(c.Addr)}, unsafe.Offsetof(a.City))
	p("o.Customer.Addr.Zip", []uintptr{unsafe.Offsetof(o.Customer), unsafe.Offsetof(c.Addr)}, unsafe.Offsetof(a.Zip))
	p("o.Note.Next.Text", []uintptr{unsafe.Offsetof(o.Note), unsafe.Offsetof(n.Next)}, unsafe.Offsetof(n.Text))
	p("o.Qtys", nil, unsafe.Offsetof(o.Qtys))
	p("o.Tags", nil, unsafe.Offsetof(o.Tags))
	p("o.Flags", nil, unsafe.Offsetof(o.Flags))
	p("o.Total", nil, unsafe.Offsetof(o.Total))
	p("o.Small", nil, unsafe.Offsetof(o.Small))
	p("o.Err", nil, unsafe.Offsetof(o.Err))
	p("o.Any", nil, unsafe.Offsetof(o.Any))
	p("len(o.Tags)", nil, unsafe.Offsetof(o.Tags)+8)
	// The map header pointer is one more hop; its count is at offset 0.
	p("len(o.Meta)", []uintptr{unsafe.Offsetof(o.Meta)}, 0)
	var t tracked
	var b Base
	p("t.ID", []uintptr{unsafe.Offsetof(t.Base)}, unsafe.Offsetof(b.ID))
	p("t.Created", []uintptr{unsafe.Offsetof(t.Base)}, unsafe.Offsetof(b.Created))
	p("t.Label", nil, unsafe.Offsetof(t.Label))
	p("r.Method", nil, unsafe.Offsetof(r.Method))
	p("r.URL.Path", []uintptr{unsafe.Offsetof(r.URL)}, unsafe.Offsetof(u.Path))
	p("r.Host", nil, unsafe.Offsetof(r.Host))
	p("r.ContentLength", nil, unsafe.Offsetof(r.ContentLength))
	fmt.Printf("SIZE main.order %d\nSIZE main.Customer %d\nSIZE net/http.Request %d\n",
		unsafe.Sizeof(o), unsafe.Sizeof(c), unsafe.Sizeof(r))
	// The first word of an interface: a type for `any`, an itab for `error`.
	word := func(p unsafe.Pointer) uintptr { return *(*uintptr)(p) }
	for _, v := range []interface{}{&o, o, &c, Money(1), "s"} {
		fmt.Printf("TYPE %T %#x\n", v, word(unsafe.Pointer(&v)))
	}
	for _, e := range []error{errNotFound, fmt.Errorf("x: %w", errNotFound), &os.PathError{}} {
		fmt.Printf("TYPE %T %#x\n", e, word(unsafe.Pointer(&e)))
	}
	exe, _ := os.Executable()
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[5] == exe {
			start := strings.Split(f[0], "-")[0]
			fmt.Printf("MAP 0x%s 0x%s\n", start, f[2])
			break
		}
	}
}

// record prints one call as JSON: the values a probe would capture, as gprobe should
// print them.
func record(fn string, v map[string]interface{}) {
	v["func"] = fn
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func run(n int) {
	for i := 0; i < n; i++ {
		o := newOrder(i)
		process(o)
		rec := map[string]interface{}{
			"o.ID": o.ID, "o.Customer.Name": o.Customer.Name,
			"o.Customer.Addr.City": o.Customer.Addr.City, "o.Qtys": o.Qtys,
			"o.Tags": o.Tags, "len(o.Meta)": len(o.Meta), "o.Total": o.Total,
		}
		if o.Note != nil {
			rec["o.Note.Next.Text"] = o.Note.Next.Text
			rec["o.Err"] = o.Err.Error()
		} else {
			rec["o.Note.Next.Text"] = nil
			rec["o.Err"] = nil
		}
		record("main.process", rec)
		processPair(pair{Key: "k" + strconv.Itoa(i), Count: i, Cust: o.Customer}, Money(100*i))
		audit(&secret{Level: i})
		tr := &tracked{Label: "t", Base: &o.Base}
		track(tr)
		err := lookup(i)
		var msg interface{}
		if err != nil {
			msg = err.Error()
		}
		record("main.lookup", map[string]interface{}{"id": i, "r0": msg})
		record("main.Sum[go.shape.int64]", map[string]interface{}{"xs": []int64{1, 2, int64(i)}, "r0": Sum([]int64{1, 2, int64(i)})})
		Sum([]float64{0.5, float64(i)})
		record("main.Add[go.shape.int64]", map[string]interface{}{"a": int64(i), "b": int64(2 * i), "r0": Add(int64(i), int64(2*i))})
		Add("x", "y")
		// Keep the descriptors of the probed types in stripped builds.
		fmt.Println(o, o.Customer, o.Customer.Addr, o.Note, pair{}, Money(0), tr)
	}
}

func serve() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("LISTENING", ln.Addr().String())
	http.HandleFunc("/", handleOrder)
	_ = http.Serve(ln, nil)
}

func main() {
	mode := "run"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "offsets":
		offsets()
	case "serve":
		serve()
	default:
		n := 3
		if len(os.Args) > 2 {
			n, _ = strconv.Atoi(os.Args[2])
		}
		run(n)
	}
}
