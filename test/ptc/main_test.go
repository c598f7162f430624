// Package ptc drives kiln's programmatic tool calling route, POST /exec/programmatic,
// with the real sandbox image on the real Docker daemon: through LibreChat's own client
// (test/ptc/node, @librechat/agents installed by `make test-ptc-deps`) for what a
// LibreChat agent does, and with plain HTTP here for what that client never shows:
// abandoned runs, replayed, foreign and forged continuation tokens, and the limits.
// One server is shared by the package.
package ptc

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

// The shared server accepts two keys; helpers send keyA unless told otherwise.
const (
	keyA = "ptc-key-a"
	keyB = "ptc-key-b"
)

// The limits the server is started with, which the tests probe.
const (
	toolResultTimeout  = 4 * time.Second
	maxTools           = 8
	maxToolResultBytes = 65536
)

func TestMain(m *testing.M) {
	os.Exit(kilntest.Main(m, kilntest.Options{Key: keyA, Env: []string{
		"POOL_SIZE=2", "TIMEOUT_GRACE_MS=1000", "INTERRUPT_GRACE_MS=500", "SANDBOX_MEMORY_MB=512",
		"QUEUE_TIMEOUT_SECONDS=90", "MAX_QUEUE=16", "API_KEYS=" + keyA + "," + keyB,
		"TOOL_RESULT_TIMEOUT_SECONDS=" + strconv.Itoa(int(toolResultTimeout/time.Second)),
		"MAX_TOOLS=" + strconv.Itoa(maxTools),
		"MAX_TOOL_RESULT_BYTES=" + strconv.Itoa(maxToolResultBytes),
	}}, &srv))
}
