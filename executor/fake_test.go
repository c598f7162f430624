package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln/protocol"
)

// fakeSandbox answers Exchange with a function of the request; it records what it got.
type fakeSandbox struct {
	ready    protocol.Ready
	exchange func(ctx context.Context, req protocol.Request) ([]byte, error)
	exitCode int
	oom      bool
	exitErr  error

	mu  sync.Mutex
	got []protocol.Request
}

func (s *fakeSandbox) ID() string            { return "0123456789abcdef0123" }
func (s *fakeSandbox) Ready() protocol.Ready { return s.ready }

func (s *fakeSandbox) Exchange(ctx context.Context, payload []byte) ([]byte, error) {
	var req protocol.Request
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.got = append(s.got, req)
	s.mu.Unlock()
	return s.exchange(ctx, req)
}

func (s *fakeSandbox) Exit(ctx context.Context) (int, bool, error) {
	return s.exitCode, s.oom, s.exitErr
}

func (s *fakeSandbox) requests() []protocol.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.Request(nil), s.got...)
}

// fakePool lends one sandbox, or fails with err; it counts checkouts and releases.
type fakePool struct {
	sb  *fakeSandbox
	err error

	mu        sync.Mutex
	checkouts int
	released  []Sandbox
}

func (p *fakePool) Checkout(ctx context.Context) (Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkouts++
	if p.err != nil {
		return nil, p.err
	}
	return p.sb, nil
}

func (p *fakePool) Release(sb Sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, sb)
}

// checkReleasedOnce checks that every checkout that got a sandbox gave it back once.
func (p *fakePool) checkReleasedOnce(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	want := 0
	if p.err == nil {
		want = p.checkouts
	}
	if len(p.released) != want {
		t.Errorf("got %d releases for %d checkouts, want %d", len(p.released), p.checkouts, want)
	}
	for _, sb := range p.released {
		if sb != Sandbox(p.sb) {
			t.Errorf("got release of %v, want the checked-out sandbox", sb)
		}
	}
}

func pythonReady() protocol.Ready {
	return protocol.Ready{Type: "ready", Protocol: 1, Capabilities: protocol.Capabilities{Languages: []string{"python", "bash"}, State: true}}
}

// reply returns an exchange function answering every request with a response built
// from a valid one and changed by edit.
func reply(edit func(r *protocol.Response)) func(context.Context, protocol.Request) ([]byte, error) {
	return func(_ context.Context, req protocol.Request) ([]byte, error) {
		r := protocol.Response{ID: req.ID, Type: "result", Status: protocol.StatusOK, Stdout: "out\n", State: newStateBlob}
		if edit != nil {
			edit(&r)
		}
		return json.Marshal(r)
	}
}

func testLimits() Limits {
	return Limits{
		MaxCodeBytes:   1000,
		MaxStateBytes:  1 << 20,
		MaxStateRaw:    1 << 20,
		MaxOutputBytes: 1 << 16,
		MaxFileBytes:   100,
		MaxFiles:       5,
		DefaultTimeout: 200 * time.Millisecond,
		MinTimeout:     20 * time.Millisecond,
		MaxTimeout:     time.Second,
		Grace:          30 * time.Millisecond,
		RetryAfter:     7,
	}
}

func newTestExecutor(p Pool, lim Limits) *Executor {
	return New(p, lim, slog.New(slog.DiscardHandler))
}

// newStateBlob is the state every fake reply carries: a real LZ4 frame, since the
// executor checks returned state like state sent in.
var newStateBlob = func() []byte {
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	_, _ = zw.Write([]byte("new-state"))
	_ = zw.Close()
	return buf.Bytes()
}()

// lz4Frame compresses raw into one LZ4 frame, as the REPL writes state.
func lz4Frame(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		t.Fatalf("lz4 write: %v", err)
	}
	if err := zw.Close(); err != nil {
		t.Fatalf("lz4 close: %v", err)
	}
	return buf.Bytes()
}

func str(s string) *string { return &s }
