// Test program for captured Go values in real runs: field paths through pointers (a nil one
// in some calls), slices, a map's length, errors (errors.New, fmt.Errorf with %w, a type of
// its own, nil), interfaces, []any, a generic function and a net/http handler.
//
// Every call prints one line "REC <json>": the function and each value a probe captures,
// keyed by the capture as written and spelled as gprobe's JSONL record should hold it
// (nil as null, an error as its message or else its %T, an interface as its %T).
//
//	values [-rounds N]   calls each function N times (default 4)
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

type Base struct {
	ID int64
}

type Address struct {
	City string
}

type Customer struct {
	Name string
	Addr *Address
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
	Note     *note
	Small    int8
	Err      error
	Any      interface{}
}

type codeError struct{ Code int }

func (e *codeError) Error() string { return fmt.Sprintf("code %d", e.Code) }

var errNotFound = errors.New("not found")

func rec(fn string, v map[string]interface{}) {
	v["func"] = fn
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println("REC " + string(b))
}

// errValue is an error as gprobe shows it: null, the message of the standard library's
// message-holding errors, or the dynamic type's name.
func errValue(err error) interface{} {
	if err == nil {
		return nil
	}
	switch err.(type) {
	case *codeError:
		return fmt.Sprintf("%T", err)
	}
	return err.Error()
}

func typeName(v interface{}) interface{} {
	if v == nil {
		return nil
	}
	return fmt.Sprintf("%T", v)
}

//go:noinline
func process(o *order) int {
	return len(o.Tags) + len(o.Qtys) + int(o.ID)
}

//go:noinline
func lookup(id int) error {
	switch id % 4 {
	case 0:
		return nil
	case 1:
		return errNotFound
	case 2:
		return fmt.Errorf("lookup %d: %w", id, errNotFound)
	}
	return &codeError{Code: id}
}

//go:noinline
func report(vals []interface{}, errs []error) int {
	return len(vals) + len(errs)
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
func handleOrder(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec("main.handleOrder", map[string]interface{}{
		"r.Method": r.Method, "r.URL.Path": r.URL.Path, "r.Host": r.Host,
		"r.ContentLength": r.ContentLength,
	})
	fmt.Fprintf(w, "%d\n", len(body))
}

func newOrder(i int) *order {
	o := &order{
		Base:  Base{ID: int64(1000 + i)},
		Qtys:  []int64{1, -2, int64(i)},
		Tags:  []string{"red", strings.Repeat("b", i)},
		Flags: []bool{true, i%2 == 0},
		Small: int8(-i),
		Any:   "boxed",
	}
	// Every other call has no customer, note or map: the paths through them are null,
	// the map's length 0.
	if i%2 == 1 {
		o.Customer = &Customer{Name: fmt.Sprint("Ada", i), Addr: &Address{City: "Paris"}}
		o.Note = &note{Text: "fragile", Next: &note{Text: fmt.Sprint("second", i)}}
		o.Meta = map[string]int{"a": 1, "b": i}
		o.Err = fmt.Errorf("order %d: %w", i, errNotFound)
		o.Any = i
	}
	return o
}

func processRecord(o *order) map[string]interface{} {
	v := map[string]interface{}{
		"o.ID": o.ID, "o.Qtys": o.Qtys, "o.Tags": o.Tags, "o.Flags": o.Flags,
		"len(o.Meta)": len(o.Meta), "o.Small": o.Small, "o.Err": errValue(o.Err),
		"o.Any": typeName(o.Any), "len(o.Tags)": len(o.Tags),
		"o.Customer.Name": nil, "o.Customer.Addr.City": nil, "o.Note.Next.Text": nil,
	}
	if o.Customer != nil {
		v["o.Customer.Name"] = o.Customer.Name
		v["o.Customer.Addr.City"] = o.Customer.Addr.City
	}
	if o.Note != nil {
		v["o.Note.Next.Text"] = o.Note.Next.Text
	}
	return v
}

func serveAndCall(rounds int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", handleOrder)
	go http.Serve(ln, mux)
	base := "http://" + ln.Addr().String()
	for i := 0; i < rounds; i++ {
		var resp *http.Response
		if i%2 == 0 {
			resp, err = http.Get(fmt.Sprintf("%s/orders/%d?x=1", base, i))
		} else {
			body := strings.Repeat("x", 10*i)
			req, _ := http.NewRequest("POST", base+"/orders", strings.NewReader(body))
			req.Host = fmt.Sprintf("shop%d.example", i)
			resp, err = http.DefaultClient.Do(req)
		}
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func main() {
	rounds := flag.Int("rounds", 4, "calls of each function")
	flag.Parse()
	for i := 0; i < *rounds; i++ {
		o := newOrder(i)
		process(o)
		rec("main.process", processRecord(o))

		err := lookup(i)
		rec("main.lookup", map[string]interface{}{"id": i, "r0": errValue(err)})

		vals := []interface{}{"s", i, true, nil, &codeError{}}
		errs := []error{nil, errNotFound, fmt.Errorf("wrapped %d: %w", i, errNotFound), &codeError{Code: i}}
		report(vals, errs)
		errShown := make([]interface{}, len(errs))
		for j, e := range errs {
			errShown[j] = errValue(e)
		}
		rec("main.report", map[string]interface{}{
			"vals": []interface{}{"s", i, true, nil, "*main.codeError"}, "errs": errShown,
			"len(vals)": len(vals),
		})

		xs := []int64{1, 2, int64(i)}
		r := Sum(xs)
		rec("main.Sum", map[string]interface{}{"xs": xs, "r0": r})
	}
	serveAndCall(*rounds)
	// Keep the probed types' descriptors in stripped builds.
	fmt.Println(&order{}, &Customer{}, &Address{}, &note{}, Base{})
}
