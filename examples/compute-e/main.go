// compute-e serves GET /e?iters=N, computing Euler's number with N terms: the program of
// the classic "tracing Go functions with uprobes" tutorial. gprobe traces main.computeE.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
)

//go:noinline
func computeE(iterations int64) float64 {
	res := 2.0
	fact := 1.0
	for i := int64(2); i < iterations; i++ {
		fact *= float64(i)
		res += 1 / fact
	}
	return res
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()
	http.HandleFunc("/e", func(w http.ResponseWriter, r *http.Request) {
		iters := int64(100)
		if v := r.URL.Query().Get("iters"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				http.Error(w, "iters must be a positive integer", http.StatusBadRequest)
				return
			}
			iters = n
		}
		fmt.Fprintf(w, "e = %0.4f\n", computeE(iters))
	})
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
