package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// fakeSandbox answers a request with its events, then with a function of the request,
// called at each Receive until it gives a frame; it records what it got.
type fakeSandbox struct {
	ready    protocol.Ready
	events   []protocol.Event
	exchange func(ctx context.Context, req protocol.Request) (protocol.Frame, error)
	exitCode int
	oom      bool
	exitErr  error

	mu          sync.Mutex
	got         []protocol.Request
	interrupted chan struct{} // closed by the first interrupt
	// toolResults gets the tool results sent, when set.
	toolResults chan []protocol.ToolResult
}

func (s *fakeSandbox) ID() string            { return "0123456789abcdef0123" }
func (s *fakeSandbox) Ready() protocol.Ready { return s.ready }
func (s *fakeSandbox) Done() <-chan struct{} { return nil }

func (s *fakeSandbox) Send(ctx context.Context, frame net.Buffers) error {
	f, err := parseFrame(protocol.NewRequestParser(1<<20, 1<<30), frame)
	if err != nil {
		return err
	}
	if _, results, err := protocol.DecodeToolResults(f); err == nil {
		s.toolResults <- results
		return nil
	}
	req, err := protocol.DecodeRequest(f)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.interrupted == nil {
		s.interrupted = make(chan struct{})
	}
	if req.Op == protocol.OpInterrupt {
		select {
		case <-s.interrupted:
		default:
			close(s.interrupted)
		}
		return nil
	}
	s.got = append(s.got, *req)
	return nil
}

func (s *fakeSandbox) Receive(ctx context.Context) (protocol.Frame, error) {
	s.mu.Lock()
	req := s.got[len(s.got)-1]
	if len(s.events) > 0 {
		ev := s.events[0]
		s.events = s.events[1:]
		s.mu.Unlock()
		bufs, err := protocol.EncodeEvent(req.ID, &ev)
		if err != nil {
			return protocol.Frame{}, err
		}
		return parseFrame(protocol.NewParser(1<<20, 1<<30), bufs)
	}
	s.mu.Unlock()
	return s.exchange(ctx, req)
}

// interrupts returns a channel closed once the sandbox got an interrupt.
func (s *fakeSandbox) interrupts() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.interrupted == nil {
		s.interrupted = make(chan struct{})
	}
	return s.interrupted
}

// parseFrame reads the one frame in bufs, as the other side of the wire would.
func parseFrame(p *protocol.Parser, bufs net.Buffers) (protocol.Frame, error) {
	var got []protocol.Frame
	var err error
	for _, b := range bufs {
		p.Feed(b, func(f protocol.Frame, ferr error) {
			got = append(got, f)
			err = errors.Join(err, ferr)
		})
	}
	if err == nil && len(got) != 1 {
		err = fmt.Errorf("got %d frames, want 1", len(got))
	}
	if err != nil {
		return protocol.Frame{}, err
	}
	return got[0], nil
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
	kept      []Sandbox
}

func (p *fakePool) Checkout(ctx context.Context, lang string) (Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if langs, _ := p.Languages(); !slices.Contains(langs, lang) {
		return nil, kiln.ErrUnsupportedLanguage
	}
	p.checkouts++
	if p.err != nil {
		return nil, p.err
	}
	return p.sb, nil
}

// Languages: the fake's sandboxes run what a Python image's do, and one more.
func (p *fakePool) Languages() ([]string, bool) { return []string{"bash", "js", "python"}, true }

func (p *fakePool) Release(sb Sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, sb)
}

func (p *fakePool) Keep(sb Sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept = append(p.kept, sb)
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

// checkHeldUntilRelease checks that a result's sandbox stays checked out until the
// result is released, and goes back once however often Release is called.
func (p *fakePool) checkHeldUntilRelease(t *testing.T, res *Result) {
	t.Helper()
	p.mu.Lock()
	n := len(p.released)
	p.mu.Unlock()
	if n != 0 {
		t.Errorf("got %d releases before Result.Release, want 0", n)
	}
	res.Release()
	res.Release()
	p.checkReleasedOnce(t)
}

func pythonReady() protocol.Ready {
	return protocol.Ready{Type: "ready", Protocol: 2, Capabilities: protocol.Capabilities{Languages: []string{"python", "bash"}, State: true, Tools: true}}
}

// reply returns an exchange function answering every request with a response built
// from a valid one and changed by edit.
func reply(edit func(r *protocol.Response)) func(context.Context, protocol.Request) (protocol.Frame, error) {
	return func(_ context.Context, req protocol.Request) (protocol.Frame, error) {
		r := protocol.Response{ID: req.ID, Status: protocol.StatusOK, Stdout: "out\n", State: newStateBlob}
		if edit != nil {
			edit(&r)
		}
		bufs, err := protocol.EncodeResponse(&r)
		if err != nil {
			return protocol.Frame{}, err
		}
		return parseFrame(protocol.NewParser(1<<20, 1<<30), bufs)
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

		MaxTools:           3,
		MaxToolCallBytes:   1000,
		MaxToolResultBytes: 100,
		MaxToolRounds:      2,
		ToolResultTimeout:  time.Second,
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
