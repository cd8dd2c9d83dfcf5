// chain calls a noinline function that takes a pointer to the head of a linked list of
// nine nodes: the target of bench/paths.sh, whose probes capture n.V, n.Next.V, ...,
// n.Next.Next.Next.Next.Next.Next.Next.Next.V (0 to 8 pointers followed). At exit it
// prints one JSON line with the number of calls it made.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

type node struct {
	V    int64
	Next *node
}

//go:noinline
func walk(n *node) int64 {
	return n.V
}

var sink int64

func main() {
	calls := flag.Int64("n", 200000, "calls")
	flag.Parse()
	var head *node
	for i := 8; i >= 0; i-- {
		head = &node{V: int64(100 + i), Next: head}
	}
	for i := int64(0); i < *calls; i++ {
		sink += walk(head)
	}
	b, _ := json.Marshal(map[string]int64{"pid": int64(os.Getpid()), "calls": *calls})
	fmt.Println(string(b))
}
