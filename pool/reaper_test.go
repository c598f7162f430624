package pool

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// fakeRuntime lists a fixed set of sandboxes and records removals.
type fakeRuntime struct {
	list      []Found
	listErr   error
	removeErr map[string]error
	removed   []string
}

func (f *fakeRuntime) List(context.Context) ([]Found, error) { return f.list, f.listErr }

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
		list: []Found{
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
