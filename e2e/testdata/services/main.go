// services is two HTTP services and their client in one program, for tests of traces
// that cross services. `-role back` serves /back: backHandler calls lookup(id). `-role
// front` serves /front: frontHandler calls work(id), starts a goroutine that runs
// async(id) and gets /back?id=N&from=goroutine, and gets /back?id=N itself. `-role
// client` sends -n requests to the front service, some with a traceparent header of their
// own (valid or not) and some with many headers. `-role headers` sends -n requests straight
// to the back service, each with a valid traceparent among -headers headers. `-role
// shared` makes -rounds rounds of -n concurrent requests to the back service that share
// one http.Header, each from call(id) on a goroutine of its own, and -outside more from
// goroutines that are in no call; the back service started with -barrier N answers only
// once N requests are in, so that a round's requests are all in flight at once, and the
// client's idle connections serve the next round. `-addr` fixes the address a service
// listens on (default: a free loopback port); a client with `-every D` waits until the
// front service answers, then sends a request every D (for ever with -n 0), as a
// Deployment does. Each role prints one line per request
// ("sent", "front", "back") with what it sent or received (a client also with the answer
// it got), so a test can rebuild the traces the spans must form.
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
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
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
	barrier.wait()
	fmt.Fprintf(w, "%d", v)
}

// barrier holds the back service's answers until n requests are in (n 0: none held).
var barrier hold

type hold struct {
	sync.Mutex
	n, in   int
	release chan struct{}
}

func (b *hold) wait() {
	if b.n == 0 {
		return
	}
	b.Lock()
	if b.release == nil {
		b.release = make(chan struct{})
	}
	ch := b.release
	b.in++
	if b.in == b.n {
		close(ch)
		b.release, b.in = nil, 0
	}
	b.Unlock()
	// A request that never comes must not hang the others: the test then fails on counts.
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
	}
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

// waitFor returns once a TCP connection to the host of URL u succeeds (a service of the same
// pod that is still starting).
func waitFor(u string) {
	host := strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	for {
		if conn, err := net.Dial("tcp", host); err == nil {
			conn.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
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

func serve(addr, path string, h http.HandlerFunc) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	say("listening port=%d", ln.Addr().(*net.TCPAddr).Port)
	mux := http.NewServeMux()
	mux.HandleFunc(path, h)
	srv := &http.Server{Handler: mux}
	// Go 1.27's server takes at most 500 header values by default (MaxHeaderValueCount, a
	// field older releases do not have): the tests send more.
	if f := reflect.ValueOf(srv).Elem().FieldByName("MaxHeaderValueCount"); f.IsValid() {
		f.SetInt(1 << 20)
	}
	panic(srv.Serve(ln))
}

func client(front string, n int, every time.Duration, plain bool) {
	c := &http.Client{}
	if every > 0 {
		waitFor(front)
	}
	for i := 1; n <= 0 || i <= n; i++ {
		if every > 0 && i > 1 {
			time.Sleep(every)
		}
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/front?id=%d", front, i), nil)
		if err != nil {
			panic(err)
		}
		// Valid traceparents (version 00, and a later version with one more field), an
		// invalid one (flags not hex) and none; -plain: none at all.
		tp, valid := "-", 0
		switch i % 6 * map[bool]int{false: 1, true: 0}[plain] {
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
		if i%4 >= 2 && !plain {
			// A bigger header map: more buckets (Go <= 1.23) or a table of several
			// groups (Go >= 1.24) to search.
			for k := 0; k < 20; k++ {
				req.Header.Set(fmt.Sprintf("X-Pad-%d", k), "v")
			}
		}
		resp, err := c.Do(req)
		var answer []byte
		if err == nil {
			answer, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		if err != nil && every > 0 {
			// A service of the pod still starting: said, and the next request tried.
			say("failed id=%d traceparent=%s: %v", i, tp, err)
			continue
		}
		if err != nil {
			panic(err)
		}
		// The answer ("work(id) lookup(id)", blanks as /): a request the back service got
		// wrong shows here.
		say("sent id=%d traceparent=%s valid=%d answer=%s", i, tp, valid,
			strings.ReplaceAll(string(answer), " ", "/"))
	}
}

// headers sends n requests to the back service, ids first.., each with a valid
// traceparent among `total` headers (User-Agent and Accept-Encoding come on top).
func headers(back string, n, total, first int) {
	c := &http.Client{}
	for i := first; i < first+n; i++ {
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/back?id=%d", back, i), nil)
		if err != nil {
			panic(err)
		}
		for k := 0; k < total-1; k++ {
			req.Header.Set(fmt.Sprintf("X-Pad-%d", k), "v")
		}
		tp := "00-" + randomHex(16) + "-" + randomHex(8) + "-01"
		req.Header.Set("Traceparent", tp)
		resp, err := c.Do(req)
		if err != nil {
			panic(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			panic(resp.Status)
		}
		say("sent id=%d traceparent=%s headers=%d answer=%s", i, tp, len(req.Header), answer)
	}
}

// call makes one request with the shared header map h: the probed span it goes out in.
//
//go:noinline
func call(id int, c *http.Client, back string, h http.Header) error {
	return send(c, fmt.Sprintf("%s/back?id=%d&from=call", back, id), h)
}

func send(c *http.Client, url string, h http.Header) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header = h
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// shared runs `rounds` rounds of n requests from call(id) and `outside` requests from no
// call, all at once, every one with the same header map. Then it says "client done" and,
// with linger, stays until its stdin ends, for a test to look at it after its requests.
func shared(back string, rounds, n, outside int, linger bool) {
	h := http.Header{}
	h.Set("X-Shared", "1")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n + outside}}
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, n+outside)
		for i := 1; i <= n+outside; i++ {
			id, inCall := 100*(r+1)+i, i <= n
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				from := "call"
				if inCall {
					err = call(id, c, back, h)
				} else {
					from = "outside"
					err = send(c, fmt.Sprintf("%s/back?id=%d&from=outside", back, id), h)
				}
				if err != nil {
					errs <- err
					return
				}
				say("sent id=%d/%s", id, from)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			panic(err)
		}
	}
	say("client done")
	if linger {
		io.Copy(io.Discard, os.Stdin)
	}
}

func main() {
	role := flag.String("role", "", "back, front, client, headers or shared")
	back := flag.String("backend", "", "front, headers, shared: the back service's URL")
	front := flag.String("front", "", "client: the front service's URL")
	n := flag.Int("n", 10, "client, headers: requests; shared: requests from calls per round")
	total := flag.Int("headers", 150, "headers: headers of each request")
	first := flag.Int("first", 1, "headers: the first request's id")
	rounds := flag.Int("rounds", 2, "shared: rounds")
	outside := flag.Int("outside", 10, "shared: requests from no call per round")
	linger := flag.Bool("linger", false, "shared: stay until stdin ends")
	flag.IntVar(&barrier.n, "barrier", 0, "back: answer once this many requests are in")
	log := flag.String("log", "", "write the lines to this file instead of stdout")
	addr := flag.String("addr", "127.0.0.1:0", "back, front: the address to listen on")
	every := flag.Duration("every", 0, "client: wait for the front service, then a request every this long (-n 0: for ever)")
	plain := flag.Bool("plain", false, "client: requests without a traceparent or extra headers")
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
		serve(*addr, "/back", backHandler)
	case "front":
		backend = *back
		serve(*addr, "/front", frontHandler)
	case "client":
		client(*front, *n, *every, *plain)
	case "headers":
		headers(*back, *n, *total, *first)
	case "shared":
		shared(*back, *rounds, *n, *outside, *linger)
	default:
		fmt.Fprintln(os.Stderr, "-role back|front|client")
		os.Exit(2)
	}
}
