package mcp_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln/mcp"
)

// TestBridge drives the stdio bridge as a client that starts `kiln mcp` would.
func TestBridge(t *testing.T) {
	e := newEnv(t)
	clientIn, bridgeOut := io.Pipe()
	bridgeIn, clientOut := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- mcp.Bridge(ctx, mcp.BridgeConfig{URL: e.url, Key: testKey, In: bridgeIn, Out: bridgeOut})
	}()
	t.Cleanup(func() {
		cancel()
		clientOut.Close()
		if err := <-done; err != nil {
			t.Errorf("Bridge: %v", err)
		}
	})
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 8 {
		t.Fatalf("ListTools = %v, %v; want 8 tools", tools, err)
	}
	call[execOut](t, cs, "execute", map[string]any{"code": "state kept"})
	res, out := call[execOut](t, cs, "execute", map[string]any{"code": "print hi\nfile r.csv 1,2"})
	if res.IsError || out.Stdout != "hi\n" || len(out.Files) != 1 {
		t.Fatalf("execute = %+v, want hi and a file", out)
	}
	if got := e.runner.lastStates(1)[0]; got != "kept" {
		t.Errorf("state through the bridge = %q, want kept", got)
	}
	rr, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: out.Files[0].URI})
	if err != nil || rr.Contents[0].Text != "1,2" {
		t.Errorf("ReadResource = %v, %v; want 1,2", rr, err)
	}
	if !strings.Contains(text(res), "[stdout]") {
		t.Errorf("text = %q", text(res))
	}
}

func TestBridgeWrongKey(t *testing.T) {
	e := newEnv(t)
	r, w := io.Pipe()
	defer w.Close()
	err := mcp.Bridge(t.Context(), mcp.BridgeConfig{URL: e.url, Key: "wrong", In: r, Out: w})
	if err == nil {
		t.Fatal("Bridge with a wrong key succeeded")
	}
}

// TestBridgeProgressAndCancel: progress comes through the bridge to the client that
// asked, and a cancelled call ends the run behind it.
func TestBridgeProgressAndCancel(t *testing.T) {
	e := newEnv(t)
	clientIn, bridgeOut := io.Pipe()
	bridgeIn, clientOut := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- mcp.Bridge(ctx, mcp.BridgeConfig{URL: e.url, Key: testKey, In: bridgeIn, Out: bridgeOut})
	}()
	t.Cleanup(func() {
		cancel()
		clientOut.Close()
		<-done
	})
	got := make(chan string, 64)
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			got <- req.Params.Message
		},
	})
	cs, err := c.Connect(t.Context(), &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	callCtx, stop := context.WithCancel(t.Context())
	params := &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": "print working\nwait"}}
	params.SetProgressToken(7)
	res := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, params)
		res <- err
	}()
	for m := range got {
		if strings.Contains(m, "working") {
			break
		}
	}
	stop()
	select {
	case <-e.runner.ended:
	case <-time.After(3 * time.Second):
		t.Fatal("the run did not end within 3 s of the cancel")
	}
	<-res
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Errorf("the bridge after a cancel: %v", err)
	}
}
