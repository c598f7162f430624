// Package e2b drives kiln's E2B front end with E2B's own JS SDK, unchanged (npm e2b,
// pinned in test/e2b/node, with the oldest version kiln supports beside it): sandboxes
// created, used and killed through the SDK with E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY pointing at a real kiln on the real sandbox image.
package e2b

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

// The SDKs check a key's shape on the client: "e2b_" and hex.
const (
	keyA = "e2b_0123456789abcdef0123456789abcdef01234567"
	keyB = "e2b_fedcba9876543210fedcba9876543210fedcba98"
)

// upstream is a server on loopback that kiln's egress policy lets sandboxes reach as
// allowed.test.
var upstream string

func TestMain(m *testing.M) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("hello from upstream"))
		}))
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	upstream = "http://allowed.test:" + port + "/"
	os.Exit(kilntest.Main(m, kilntest.Options{Key: keyA, Env: []string{
		"POOL_SIZE=2", "API_KEYS=" + keyA + "," + keyB, "QUEUE_TIMEOUT_SECONDS=60",
		"E2B_MAX_SANDBOXES_PER_CALLER=3",
		"EGRESS_ALLOW=allowed.test:" + port + ",also.test:" + port,
		"EGRESS_RESOLVE=allowed.test=127.0.0.1,also.test=127.0.0.1,other.test=127.0.0.1",
		"EGRESS_ALLOW_PRIVATE=127.0.0.1/32",
	}}, &srv))
}

// TestE2BSDK runs test/e2b/node/kiln-e2b.test.mjs.
func TestE2BSDK(t *testing.T) {
	kilntest.NodeTest(t, "test/e2b/node", "kiln-e2b.test.mjs", "e2b", "test-e2b-deps",
		"E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY="+keyA, "KILN_OTHER_KEY="+keyB, "KILN_UPSTREAM="+upstream,
		"E2B_DOMAIN=kiln.invalid")
}
