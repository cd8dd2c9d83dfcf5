// http-server serves orders on loopback and, to have something to serve, sends itself
// requests: GETs and POSTs of a few paths, to a few host names. gprobe traces the handler
// and captures fields of its *http.Request (see probespec.yaml).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// handleOrder is the probed handler. Without go:noinline it may still be a function of
// its own (it is called through a func value), but the directive keeps the example stable.
//
//go:noinline
func handleOrder(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s for %s: %d bytes\n", r.Method, r.URL.Path, r.Host, len(body))
}

func main() {
	n := flag.Int("n", 10, "number of requests (0 = forever)")
	interval := flag.Duration("interval", 200*time.Millisecond, "pause between requests")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", handleOrder)
	go http.Serve(ln, mux)

	base := "http://" + ln.Addr().String()
	hosts := []string{"shop.example", "api.example"}
	for i := 0; *n == 0 || i < *n; i++ {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/orders/%d", base, i), nil)
		if i%3 == 2 {
			req, _ = http.NewRequest("POST", base+"/orders", strings.NewReader(`{"item":"tea"}`))
		}
		req.Host = hosts[i%len(hosts)]
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "request:", err)
			os.Exit(1)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(string(out))
		time.Sleep(*interval)
	}
}
