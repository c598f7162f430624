// Package egress tests the way out of a sandbox end to end: a kiln with an egress policy,
// real sandboxes with no network, and upstreams of the test's own on loopback (plain HTTP,
// HTTPS under a CA the test makes, and a package index serving a wheel the test builds),
// reached only through kiln's proxy over the sandbox's channel.
package egress

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

var (
	srv *kilntest.Server
	// The upstreams' ports: plain HTTP (allowed.test and other.test, both on it) and
	// HTTPS (secure.test, the index too).
	plainPort, securePort int
	// wheelName and wheelSHA are the test's package as the index serves it.
	wheelSHA string
)

const (
	pkgName    = "kilnpkg"
	pkgVersion = "1.0"
	wheelName  = pkgName + "-" + pkgVersion + "-py3-none-any.whl"
	greeting   = "hello from upstream"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ca, leaf, err := kilntest.TestCA("secure.test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wheel, err := buildWheel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sum := sha256.Sum256(wheel)
	wheelSHA = hex.EncodeToString(sum[:])

	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	secure, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plainPort, securePort = plain.Addr().(*net.TCPAddr).Port, secure.Addr().(*net.TCPAddr).Port
	upstream := &http.Server{Handler: handler(wheel), ReadHeaderTimeout: 10 * time.Second}
	go upstream.Serve(plain)
	go upstream.Serve(secure)
	defer upstream.Close()

	p, s := strconv.Itoa(plainPort), strconv.Itoa(securePort)
	return kilntest.Main(m, kilntest.Options{Env: []string{
		"POOL_SIZE=2",
		"EGRESS_ALLOW=allowed.test:" + p + ",secure.test:" + s,
		"EGRESS_RESOLVE=allowed.test=127.0.0.1,other.test=127.0.0.1,secure.test=127.0.0.1",
		"EGRESS_ALLOW_PRIVATE=127.0.0.1/32",
		"EGRESS_CA_BUNDLE=" + ca,
		"PIP_INDEX_URL=https://secure.test:" + s + "/simple/",
	}}, &srv)
}

// handler serves the upstreams: a greeting, a stream of n bytes, and a PEP 503 index
// with one package.
func handler(wheel []byte) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s (%s)", greeting, r.Host)
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/simple/", func(w http.ResponseWriter, r *http.Request) {
		switch strings.Trim(r.URL.Path, "/") {
		case "simple":
			fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="%s/">%s</a></body></html>`, pkgName, pkgName)
		case "simple/" + pkgName:
			fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`,
				wheelName, wheelSHA, wheelName)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("/files/"+wheelName, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(wheel)
	})
	return mux
}

// buildWheel makes the test's package: a pure-Python wheel whose module holds a
// function and a constant.
func buildWheel() ([]byte, error) {
	distInfo := pkgName + "-" + pkgVersion + ".dist-info"
	files := []struct{ name, body string }{
		{pkgName + "/__init__.py", "VALUE = 42\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n\n" +
			"class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n\n" +
			"    def __repr__(self):\n        return f'Point({self.x}, {self.y})'\n"},
		{distInfo + "/METADATA", "Metadata-Version: 2.1\nName: " + pkgName + "\nVersion: " + pkgVersion + "\n"},
		{distInfo + "/WHEEL", "Wheel-Version: 1.0\nGenerator: kiln-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return nil, err
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
	w, err := zw.Create(distInfo + "/RECORD")
	if err != nil {
		return nil, err
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
