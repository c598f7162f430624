package pool

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// fakeRuntime lists a fixed set of sandboxes and records removals: the reaper's whole
// view of a runtime, with states and ages no Fake's sandbox has (a container created and
// never started, one created minutes ago).
type fakeRuntime struct {
	list      []sandbox.Found
	listErr   error
	removeErr map[string]error
	removed   []string
}

func (f *fakeRuntime) List(context.Context) ([]sandbox.Found, error) { return f.list, f.listErr }

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	if err := f.removeErr[id]; err != nil {
		return err
	}
	f.removed = append(f.removed, id)
	return nil
}

func TestReaperRemovesOnlyUnheldContainersOlderThanAWarmup(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-2*time.Minute), now.Add(-30*time.Second)
	f := &fakeRuntime{
		list: []sandbox.Found{
			{ID: "held-running", State: "running", Created: old},
			{ID: "held-exited", State: "exited", Created: old}, // checked out, its run is ending
			{ID: "lost-created", State: "created", Created: old},
			{ID: "lost-running", State: "running", Created: old},
			{ID: "lost-exited", State: "exited", Created: old},
			{ID: "warming", State: "created", Created: young}, // a warm-up may still own it
			{ID: "failing", State: "exited", Created: old},
		},
		removeErr: map[string]error{"failing": errors.New("daemon busy")},
	}
	held := map[string]bool{"held-running": true, "held-exited": true}
	r := &Reaper{
		rt: f, holds: func(id string) bool { return held[id] },
		grace: time.Minute, now: func() time.Time { return now }, log: slog.New(slog.DiscardHandler),
	}
	if n := r.sweep(context.Background()); n != 3 {
		t.Errorf("sweep removed %d, want 3", n)
	}
	slices.Sort(f.removed)
	if want := []string{"lost-created", "lost-exited", "lost-running"}; !slices.Equal(f.removed, want) {
		t.Errorf("removed %v, want %v", f.removed, want)
	}

	f.list, f.listErr, f.removed = nil, errors.New("daemon away"), nil
	if n := r.sweep(context.Background()); n != 0 || len(f.removed) != 0 {
		t.Errorf("with the daemon away: removed %d %v, want nothing", n, f.removed)
	}
}

// TestReaperSparesWhatThePoolHolds runs the reaper against a pool on a runtime: the
// pool's sandboxes, ready, checked out or kept, stay; one nobody holds goes, running or
// dead, and the runtime no longer lists it.
func TestReaperSparesWhatThePoolHolds(t *testing.T) {
	f := &sandboxtest.Fake{}
	p := newTestPool(t, testConfig(2), f, nil)
	out, kept := checkout(t, p), checkout(t, p)
	p.Keep(kept)
	defer p.Release(out)
	defer p.Release(kept)
	waitFor(t, "the pool to refill", func() bool { return p.Stats().Ready == 2 })
	var lost []string
	for _, dead := range []bool{false, true} {
		sb, err := f.Start(t.Context(), testSpec) // started by a warm-up that gave up on it
		if err != nil {
			t.Fatal(err)
		}
		if dead {
			sb.(*sandboxtest.Sandbox).Kill()
		}
		lost = append(lost, sb.ID())
	}
	// Every sandbox is older than a warm-up by now.
	r := NewReaper(f, p.Holds, time.Minute, discard())
	r.now = func() time.Time { return time.Now().Add(r.grace + time.Second) }
	if n := r.sweep(t.Context()); n != 2 {
		t.Errorf("sweep removed %d, want the 2 nobody holds", n)
	}
	list, err := f.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, found := range list {
		left = append(left, found.ID)
		if slices.Contains(lost, found.ID) {
			t.Errorf("%s, which nobody holds, is still listed", found.ID)
		}
		if !p.Holds(found.ID) {
			t.Errorf("%s is listed and not the pool's", found.ID)
		}
	}
	if len(left) != 4 {
		t.Errorf("listed %v, want the pool's 4: 2 ready, 1 checked out, 1 kept", left)
	}
}
