// http-client starts an HTTP server on loopback and fetches URLs from it with http.Get,
// writing every URL it fetched to -urls-out. gprobe traces net/http.(*Client).Get. With
// -errors-every N, every Nth GET goes to a port where nothing listens instead, and fails
// (the call's err is then non-nil): it prints the error and goes on.
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

func main() {
	n := flag.Int("n", 10, "number of GETs (0 = forever)")
	interval := flag.Duration("interval", 200*time.Millisecond, "pause between GETs")
	delay := flag.Duration("delay", 500*time.Millisecond, "pause before the first GET")
	urlsOut := flag.String("urls-out", "", "write the fetched URLs here, one per line")
	errorsEvery := flag.Int("errors-every", 0, "make every Nth GET fail (0 = none)")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "you asked for %s\n", r.URL.Path)
	})
	go http.Serve(ln, mux)

	time.Sleep(*delay)
	var fetched []string
	for i := 0; *n == 0 || i < *n; i++ {
		url := fmt.Sprintf("http://%s/item/%d?q=%d", ln.Addr(), i, i*i)
		if *errorsEvery > 0 && i%*errorsEvery == *errorsEvery-1 {
			// Port 1 on loopback: nothing listens there, the connection is refused.
			url = fmt.Sprintf("http://127.0.0.1:1/item/%d?q=%d", i, i*i)
			if _, err := http.Get(url); err != nil {
				fmt.Printf("GET %s -> error %v\n", url, err)
				fetched = append(fetched, url)
				time.Sleep(*interval)
				continue
			}
		}
		resp, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "get:", err)
			os.Exit(1)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("GET %s -> %d %s", url, resp.StatusCode, body)
		fetched = append(fetched, url)
		time.Sleep(*interval)
	}
	if *urlsOut != "" {
		os.WriteFile(*urlsOut, []byte(strings.Join(fetched, "\n")+"\n"), 0o644)
	}
}
