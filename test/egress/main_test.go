// Package egress tests the way out of a sandbox end to end: a kiln with an egress policy,
// real sandboxes with no network, and upstreams of the test's own on loopback (plain HTTP,
// HTTPS under a CA the test makes, and a package index serving a wheel the test builds),
// reached only through kiln's proxy over the sandbox's channel.
package egress

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
	"github.com/kilnsh/kiln/test/testca"
)

// policyNone is a policy file that changes nothing for the test's callers (no key, no
// tenant): its one entry is another tenant's.
const policyNone = `{"tenants": {"someone-else": {"allow": []}}}`

var (
	srv *kilntest.Server
	// policyFile is kiln's EGRESS_POLICY_FILE, which a test rewrites and reloads.
	policyFile string
	// egressEnv is the shared kiln's egress configuration, for a test's own kiln.
	egressEnv []string
	// The upstreams' ports: plain HTTP (allowed.test and other.test, both on it) and
	// HTTPS (secure.test, the index too).
	plainPort, securePort int
)

const (
	pkgName    = "kilnpkg"
	pkgVersion = "1.0"
	greeting   = "hello from upstream"
	// wheelModule is the test package's module: a function, a constant and a class.
	wheelModule = "VALUE = 42\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n\n" +
		"class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n\n" +
		"    def __repr__(self):\n        return f'Point({self.x}, {self.y})'\n"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ca, err := testca.New("secure.test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wheel, err := kilntest.Wheel(pkgName, pkgVersion, wheelModule)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	secure, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.Leaf}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plainPort, securePort = plain.Addr().(*net.TCPAddr).Port, secure.Addr().(*net.TCPAddr).Port
	upstream := &http.Server{Handler: handler(wheel), ReadHeaderTimeout: 10 * time.Second}
	go upstream.Serve(plain)
	go upstream.Serve(secure)
	defer upstream.Close()

	dir, err := os.MkdirTemp("", "kiln-egress-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	policyFile = filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policyFile, []byte(policyNone), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	p, s := strconv.Itoa(plainPort), strconv.Itoa(securePort)
	egressEnv = []string{
		// js runs in the polyglot pool: Node's fetch through the proxy.
		"POOLS=python:2,polyglot:1",
		// rebind.test and meta.test are allowed names whose addresses are not: a private one
		// EGRESS_ALLOW_PRIVATE leaves closed, and the cloud metadata address.
		"EGRESS_ALLOW=allowed.test:" + p + ",secure.test:" + s + ",rebind.test:" + p + ",meta.test:80",
		"EGRESS_RESOLVE=allowed.test=127.0.0.1,other.test=127.0.0.1,secure.test=127.0.0.1," +
			"rebind.test=127.0.0.2,meta.test=169.254.169.254",
		"EGRESS_ALLOW_PRIVATE=127.0.0.1/32",
		"EGRESS_CA_BUNDLE=" + ca.PEM,
		"PIP_INDEX_URL=https://secure.test:" + s + "/simple/",
		"EGRESS_POLICY_FILE=" + policyFile,
	}
	return kilntest.Main(m, kilntest.Options{Env: egressEnv}, &srv)
}

// handler serves the upstreams: a greeting, a stream of n bytes, and a PEP 503 index
// with one package.
func handler(wheel []byte) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/data.csv", func(w http.ResponseWriter, r *http.Request) {
		w.Write(dataCSV())
	})
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s (%s)", greeting, r.Host)
	})
	kilntest.Bytes(mux)
	kilntest.PackageIndex(mux, pkgName, pkgVersion, wheel)
	return mux
}

// dataCSV is a table of 5,000 rows (about 150 KB) where y = 2 x1 - 3 x2 + 1 exactly.
func dataCSV() []byte {
	var b bytes.Buffer
	b.WriteString("x1,x2,y,label\n")
	for i := range 5000 {
		x1, x2 := float64(i%97)/7, float64(i%89)/3
		fmt.Fprintf(&b, "%.6f,%.6f,%.6f,row-%d\n", x1, x2, 2*x1-3*x2+1, i)
	}
	return b.Bytes()
}
