// Package mcp drives a real kiln's MCP server, with the real sandbox image on the real
// Docker daemon, through real MCP clients: the Go SDK here, and the TypeScript SDK
// (test/mcp/node, installed by `make test-mcp-deps`) over HTTP and over `kiln mcp`.
// One server is shared by the package.
package mcp

import (
	"os"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

const (
	keyA = "mcp-key-a"
	keyB = "mcp-key-b"
)

func TestMain(m *testing.M) {
	os.Exit(kilntest.Main(m, kilntest.Options{Key: keyA, Env: []string{
		"POOL_SIZE=2", "TIMEOUT_GRACE_MS=1000", "INTERRUPT_GRACE_MS=500", "SANDBOX_MEMORY_MB=512",
		"QUEUE_TIMEOUT_SECONDS=90", "MAX_QUEUE=16", "API_KEYS=" + keyA + "," + keyB,
		"MAX_TIMEOUT_MS=900000",
	}}, &srv))
}
