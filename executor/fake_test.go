package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// newSandbox starts a sandbox of a Fake whose REPL serves every request with h, and
// removes it when the test ends. Its ready frame says python and bash, with state,
// files and tools, as the Python image's does.
func newSandbox(t *testing.T, h sandboxtest.Handler) *sandboxtest.Sandbox {
	t.Helper()
	return startOn(t, &sandboxtest.Fake{Handler: h})
}

// startOn starts a sandbox of f, removed when the test ends.
func startOn(t *testing.T, f *sandboxtest.Fake) *sandboxtest.Sandbox {
	t.Helper()
	sb, err := f.Start(t.Context(), sandbox.Spec{Image: "kiln-fake"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = sb.Remove(context.Background()) })
	return sb.(*sandboxtest.Sandbox)
}

// reply returns a handler answering every request with a response built from a valid
// one and changed by edit.
func reply(edit func(r *protocol.Response)) sandboxtest.Handler {
	return func(x *sandboxtest.Exchange) {
		r := protocol.Response{Status: protocol.StatusOK, Stdout: "out\n", State: newStateBlob}
		if edit != nil {
			edit(&r)
		}
		_ = x.Reply(r)
	}
}

// eventsThen returns a handler that sends events, then serves the request with h.
func eventsThen(events []protocol.Event, h sandboxtest.Handler) sandboxtest.Handler {
	return func(x *sandboxtest.Exchange) {
		for _, ev := range events {
			if err := x.Event(ev); err != nil {
				return
			}
		}
		h(x)
	}
}

// exit is a handler whose REPL ends under the request, as st says.
func exit(st sandboxtest.ExitStatus) sandboxtest.Handler {
	return func(x *sandboxtest.Exchange) { x.End(st) }
}

// raw is a handler that answers with bytes of its own making.
func raw(b []byte) sandboxtest.Handler {
	return func(x *sandboxtest.Exchange) { _ = x.Write(b) }
}

// deaf is a handler that never answers, interrupt or not, until the REPL is killed.
func deaf(x *sandboxtest.Exchange) { <-x.Done() }

// deadlines is a sandbox that records when each Receive began and the deadline it was
// given: what the executor asks of the sandbox, beyond what the REPL can see.
type deadlines struct {
	sandbox.Sandbox

	mu     sync.Mutex
	called []time.Time
	given  []time.Time
}

func (d *deadlines) Receive(ctx context.Context) (protocol.Frame, error) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.called, d.given = append(d.called, time.Now()), append(d.given, dl)
	d.mu.Unlock()
	return d.Sandbox.Receive(ctx)
}

// first returns when the first Receive began and its deadline.
func (d *deadlines) first() (called, deadline time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.called) == 0 {
		return time.Time{}, time.Time{}
	}
	return d.called[0], d.given[0]
}

// fakePool lends one sandbox, or fails with err; it counts checkouts and releases.
type fakePool struct {
	sb  sandbox.Sandbox
	err error

	mu        sync.Mutex
	checkouts int
	released  []sandbox.Sandbox
	kept      []sandbox.Sandbox
	sized     [][2]int64 // the limits CheckoutSized was asked for
}

func (p *fakePool) Checkout(ctx context.Context, lang string) (sandbox.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if langs, _ := p.Languages(); !slices.Contains(langs, lang) {
		return nil, kiln.ErrUnsupportedLanguage
	}
	p.checkouts++
	if p.err != nil {
		return nil, p.err
	}
	if p.sb == nil {
		return nil, errors.New("the test's pool has no sandbox")
	}
	return p.sb, nil
}

// CheckoutSized hands out the pool's sandbox as Checkout does, recording the size asked.
func (p *fakePool) CheckoutSized(ctx context.Context, lang string, milliCPU, memoryMB int64) (sandbox.Sandbox, error) {
	p.mu.Lock()
	p.sized = append(p.sized, [2]int64{milliCPU, memoryMB})
	p.mu.Unlock()
	return p.Checkout(ctx, lang)
}

// Languages: the fake's sandboxes run what a Python image's do, and one more.
func (p *fakePool) Languages() ([]string, bool) { return []string{"bash", "js", "python"}, true }

func (p *fakePool) Release(sb sandbox.Sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, sb)
}

func (p *fakePool) Keep(sb sandbox.Sandbox) {
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
		if sb != p.sb {
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

// frame is a response frame around header, whatever it says: the REPL's framing, for
// answers no encoder would make.
func frame(header string) []byte {
	return fmt.Appendf(nil, "%s\n%s\n%s\n", protocol.ResponseStart, header, protocol.ResponseEnd)
}
