// handler calls a noinline net/http-style handler in a loop with one request, the target
// of bench/traceparent.sh: gprobe reads the request's traceparent header at every call of
// a probed function with a *http.Request parameter. -headers sets how many headers the
// request has (the map gprobe searches), -traceparent whether one of them is a
// traceparent. At exit it prints one JSON line with the number of calls it made.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
)

//go:noinline
func handle(w http.ResponseWriter, r *http.Request) int {
	return len(r.Method)
}

var sink int

func main() {
	calls := flag.Int("n", 200000, "calls")
	headers := flag.Int("headers", 3, "request headers")
	tp := flag.Bool("traceparent", false, "one of them is a traceparent (the last one set)")
	flag.Parse()
	r, err := http.NewRequest("GET", "http://example.com/x", nil)
	if err != nil {
		panic(err)
	}
	for i := 0; i < *headers; i++ {
		r.Header.Set(fmt.Sprintf("X-H%d", i), "v")
	}
	if *tp {
		r.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	}
	for i := 0; i < *calls; i++ {
		sink += handle(nil, r)
	}
	b, _ := json.Marshal(map[string]int{"pid": os.Getpid(), "calls": *calls})
	fmt.Println(string(b))
}
