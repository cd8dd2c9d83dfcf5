// Test program for gprobe's resolve module: calls net/http.Get, which the compiler
// inlines unless the binary is built with -gcflags='net/http=-l'.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: httpget URL")
		return
	}
	resp, err := http.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
}
