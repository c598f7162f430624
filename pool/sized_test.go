package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// specRecorder starts sandboxes with a Fake and remembers the specs it was given.
type specRecorder struct {
	*sandboxtest.Fake
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (r *specRecorder) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	return r.Fake.Start(ctx, spec)
}

// A sandbox of a request's own size is started with the pool's spec and those limits,
// is the caller's as any checkout's, and is never replaced; at most Size are out at once,
// kept ones included, and the one past them is refused at once.
func TestCheckoutSized(t *testing.T) {
	f := &sandboxtest.Fake{}
	sweep(t, f)
	rec := &specRecorder{Fake: f}
	cfg := testConfig(1)
	p := New(cfg, rec, discard(), nil)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = p.Close(context.Background())
		}
	})
	waitFor(t, "the warm sandbox", func() bool { return p.Stats().Ready == 1 })

	sb, err := p.CheckoutSized(context.Background(), 500, 256)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	last := rec.specs[len(rec.specs)-1]
	rec.mu.Unlock()
	want := testSpec
	want.MilliCPU, want.MemoryMB = 500, 256
	if last.MilliCPU != 500 || last.MemoryMB != 256 || last.Image != want.Image {
		t.Errorf("started %+v, want the pool's spec with 500m and 256 MB", last)
	}
	if st := p.Stats(); st.Ready != 1 || st.InUse != 1 {
		t.Errorf("ready %d, in use %d; want the warm one untouched and the sized one out", st.Ready, st.InUse)
	}
	if _, err := p.CheckoutSized(context.Background(), 500, 256); !errors.Is(err, kiln.ErrSizedFull) {
		t.Errorf("a second while one is out: %v, want ErrSizedFull", err)
	}
	p.Keep(sb) // a live session keeps it: still one of the pool's sized ones
	if _, err := p.CheckoutSized(context.Background(), 500, 256); !errors.Is(err, kiln.ErrSizedFull) {
		t.Errorf("a second while one is kept: %v, want ErrSizedFull", err)
	}
	p.Release(sb)
	waitFor(t, "the sized sandbox's removal", func() bool { return sb.(*sandboxtest.Sandbox).Removals() == 1 })
	time.Sleep(20 * time.Millisecond)
	if st := p.Stats(); st.Ready != 1 || st.Warming != 0 {
		t.Errorf("after the release: ready %d, warming %d; want nothing started to replace it", st.Ready, st.Warming)
	}
	again, err := p.CheckoutSized(context.Background(), 2000, 1024)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	p.Keep(again)
	closed = true
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := again.(*sandboxtest.Sandbox).Removals(); n != 1 {
		t.Errorf("a kept sized sandbox removed %d times at Close, want 1", n)
	}
	if _, err := p.CheckoutSized(context.Background(), 500, 256); !errors.Is(err, kiln.ErrShuttingDown) {
		t.Errorf("after Close: %v, want ErrShuttingDown", err)
	}
}
