// Test program for the values of the standard library's types: the errors network and
// file calls return (*net.OpError, *os.SyscallError, *url.Error, *fs.PathError,
// *net.DNSError, syscall.Errno), type aliases in signatures (os.FileInfo, os.PathError),
// and nil pointers.
//
// Every call prints one line "REC <json>": the function and each value a probe captures,
// keyed by the capture as written and spelled as gprobe's JSONL record should hold it: an
// error as the text its Error() returns, a nil pointer as null, a pointer as %p, an
// interface as its %T.
//
//	stdvalues [-rounds N]   makes each call N times (default 2)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

type holder struct {
	Val  int
	Next *holder
	Err  error
}

func rec(fn string, v map[string]interface{}) {
	v["func"] = fn
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println("REC " + string(b))
}

func errText(err error) interface{} {
	if err == nil {
		return nil
	}
	return err.Error()
}

func ptr(p interface{}) interface{} {
	switch q := p.(type) {
	case *int:
		if q == nil {
			return nil
		}
	case *holder:
		if q == nil {
			return nil
		}
	}
	return fmt.Sprintf("%p", p)
}

//go:noinline
func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

//go:noinline
func open(path string) error {
	f, err := os.Open(path)
	if err == nil {
		f.Close()
	}
	return err
}

//go:noinline
func get(url string) error {
	resp, err := http.Get(url)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

//go:noinline
func lookup(name string) error {
	// The resolver asks a DNS server that is not there: a real *net.DNSError.
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", deadUDP)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := r.LookupHost(ctx, name)
	return err
}

//go:noinline
func readTimeout(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := c.Read(make([]byte, 1))
	return err
}

//go:noinline
func errno(n int) error {
	return syscall.Errno(n)
}

//go:noinline
func wrapped(h *holder) int {
	return h.Val
}

//go:noinline
func pointers(p *int, h *holder) int {
	if p == nil || h == nil {
		return 0
	}
	return *p + h.Val
}

//go:noinline
func stat(fi os.FileInfo, pe *os.PathError) string {
	return fi.Name() + pe.Op
}

var deadUDP string

// closedPort is a loopback port nothing listens on.
func closedPort(network string) string {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		a := c.LocalAddr().String()
		c.Close()
		return a
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

func main() {
	rounds := flag.Int("rounds", 2, "calls of each function")
	flag.Parse()
	deadUDP = closedPort("udp")
	refused := closedPort("tcp")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	fi, err := os.Stat("/")
	if err != nil {
		panic(err)
	}
	for i := 0; i < *rounds; i++ {
		err := dial(refused)
		rec("main.dial", map[string]interface{}{"addr": refused, "r0": errText(err)})
		path := fmt.Sprintf("/nonexistent/gprobe-%d", i)
		err = open(path)
		rec("main.open", map[string]interface{}{"path": path, "r0": errText(err)})
		url := fmt.Sprintf("http://%s/item/%d?q=1", refused, i)
		err = get(url)
		rec("main.get", map[string]interface{}{"url": url, "r0": errText(err)})
		name := fmt.Sprintf("host%d.gprobe.invalid", i)
		err = lookup(name)
		rec("main.lookup", map[string]interface{}{"name": name, "r0": errText(err)})
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			panic(err)
		}
		err = readTimeout(c)
		c.Close()
		rec("main.readTimeout", map[string]interface{}{"r0": errText(err)})
		for _, n := range []int{2, 111, 116, 4000} {
			err = errno(n)
			rec("main.errno", map[string]interface{}{"n": n, "r0": errText(err)})
		}
		_, oerr := os.Open(path)
		h := &holder{Val: i, Err: fmt.Errorf("holder %d: %w", i, oerr)}
		if i%2 == 1 {
			h.Err = &os.SyscallError{Syscall: "write", Err: syscall.EPIPE}
		}
		wrapped(h)
		rec("main.wrapped", map[string]interface{}{"h.Err": errText(h.Err)})

		// Nil pointers: the pointer itself and a pointer field, and a path through one.
		var p *int
		var hp *holder
		if i%2 == 1 {
			v := i
			p = &v
			hp = &holder{Val: i, Next: &holder{Val: 10 * i}}
		}
		pointers(p, hp)
		next, nextVal, nextNext := interface{}(nil), interface{}(nil), interface{}(nil)
		if hp != nil {
			next = ptr(hp.Next)
			nextVal = hp.Next.Val
			nextNext = ptr(hp.Next.Next) // a nil pointer field: null
		}
		rec("main.pointers", map[string]interface{}{
			"p": ptr(p), "h": ptr(hp), "h.Next": next, "h.Next.Val": nextVal,
			"h.Next.Next": nextNext,
		})

		_, perr := os.Open(path)
		var pe *os.PathError
		if !errors.As(perr, &pe) {
			panic(perr)
		}
		stat(fi, pe)
		rec("main.stat", map[string]interface{}{
			"fi": fmt.Sprintf("%T", fi), "pe.Op": pe.Op, "pe.Path": pe.Path,
			"pe.Err": errText(pe.Err),
		})
	}
	ln.Close()
}
