// dwarf links a large part of the standard library and keeps its DWARF: the "Go binary
// with DWARF" of the resolution benchmark (gprobe reads every function's signature).
package main

import (
	"archive/zip"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"html/template"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/rpc"
	"net/smtp"
	"os"
	"regexp"
	"text/tabwriter"
)

func main() {
	// Reference each package so the linker keeps (most of) it.
	fmt.Println(zip.Store, gzip.BestSpeed, tls.VersionTLS13, x509.RSA, sql.Drivers(),
		token.ADD, types.Typ[types.Int], png.DefaultCompression, http.MethodGet,
		regexp.MustCompile("a+").String(), tabwriter.AlignRight)
	_ = json.Valid([]byte("{}"))
	_ = xml.Unmarshal([]byte("<a/>"), new(struct{}))
	f, _ := parser.ParseFile(token.NewFileSet(), "x.go", "package x", 0)
	ast.Inspect(f, func(ast.Node) bool { return true })
	_, _ = template.New("x").Parse("{{.}}")
	s := httptest.NewUnstartedServer(http.NotFoundHandler())
	_ = s
	_, _ = mail.ParseAddress("a@b.c")
	_ = rpc.NewServer()
	_ = smtp.PlainAuth
	_ = (&types.Config{}).Check
	if len(os.Args) > 1 {
		os.Exit(1)
	}
}
