// services is two HTTP services and their client in one program, for tests of traces
// that cross services. `-role back` serves /back: backHandler calls lookup(id). `-role
// front` serves /front: frontHandler calls work(id), starts a goroutine that runs
// async(id) and gets /back?id=N&from=goroutine, and gets /back?id=N itself. `-role
// client` sends -n requests to the front service, some with a traceparent header of their
// own (valid or not) and some with many headers. Each role prints
// one line per request ("sent", "front", "back") with what it sent or received, so a test
// can rebuild the traces the spans must form.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
)

var out = struct {
	sync.Mutex
	w io.Writer
}{w: os.Stdout}

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Fprintf(out.w, format+"\n", args...)
}

//go:noinline
func lookup(id int) int { return id * 7 }

//go:noinline
func work(id int) int { return id + 1 }

//go:noinline
func async(id int) int { return id + 2 }

var backend string

//go:noinline
func backHandler(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(r.URL.Query().Get("id"))
	v := lookup(id)
	from := r.URL.Query().Get("from")
	say("back id=%d%s traceparent=%s", id, map[bool]string{true: "/" + from}[from != ""],
		orDash(r.Header.Get("Traceparent")))
	fmt.Fprintf(w, "%d", v)
}

//go:noinline
func frontHandler(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(r.URL.Query().Get("id"))
	v := work(id)
	var wg sync.WaitGroup
	var fromGoroutine error
	wg.Add(1)
	go func() {
		defer wg.Done()
		async(id)
		_, fromGoroutine = get(fmt.Sprintf("%s/back?id=%d&from=goroutine", backend, id))
	}()
	wg.Wait()
	body, err := get(fmt.Sprintf("%s/back?id=%d", backend, id))
	if err == nil {
		err = fromGoroutine
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	say("front id=%d traceparent=%s", id, orDash(r.Header.Get("Traceparent")))
	fmt.Fprintf(w, "%d %s", v, body)
}

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func serve(path string, h http.HandlerFunc) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	say("listening port=%d", ln.Addr().(*net.TCPAddr).Port)
	mux := http.NewServeMux()
	mux.HandleFunc(path, h)
	panic(http.Serve(ln, mux))
}

func client(front string, n int) {
	c := &http.Client{}
	for i := 1; i <= n; i++ {
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/front?id=%d", front, i), nil)
		if err != nil {
			panic(err)
		}
		// Valid traceparents (version 00, and a later version with one more field), an
		// invalid one (flags not hex) and none.
		tp, valid := "-", 0
		switch i % 6 {
		case 1, 3:
			tp, valid = "00-"+randomHex(16)+"-"+randomHex(8)+"-01", 1
		case 5:
			tp, valid = "cc-"+randomHex(16)+"-"+randomHex(8)+"-01-what-comes-later", 1
		case 2:
			tp = "00-" + randomHex(16) + "-" + randomHex(8) + "-zz"
		}
		if tp != "-" {
			req.Header.Set("Traceparent", tp)
		}
		if i%4 >= 2 {
			// A bigger header map: more buckets (Go <= 1.23) or a table of several
			// groups (Go >= 1.24) to search.
			for k := 0; k < 20; k++ {
				req.Header.Set(fmt.Sprintf("X-Pad-%d", k), "v")
			}
		}
		resp, err := c.Do(req)
		if err != nil {
			panic(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			panic(resp.Status)
		}
		say("sent id=%d traceparent=%s valid=%d", i, tp, valid)
	}
}

func main() {
	role := flag.String("role", "", "back, front or client")
	back := flag.String("backend", "", "front: the back service's URL")
	front := flag.String("front", "", "client: the front service's URL")
	n := flag.Int("n", 10, "client: requests")
	log := flag.String("log", "", "write the lines to this file instead of stdout")
	flag.Parse()
	if *log != "" {
		f, err := os.Create(*log)
		if err != nil {
			panic(err)
		}
		out.w = f
	}
	switch *role {
	case "back":
		serve("/back", backHandler)
	case "front":
		backend = *back
		serve("/front", frontHandler)
	case "client":
		client(*front, *n)
	default:
		fmt.Fprintln(os.Stderr, "-role back|front|client")
		os.Exit(2)
	}
}
