package live

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// env is a registry of sandboxes of a Fake, with a clock the test moves and a record of
// the sandboxes released, each named sb-SESSION after the session it was put for.
type env struct {
	r    *Registry
	rt   *sandboxtest.Fake
	now  time.Time
	mu   sync.Mutex
	name map[string]string // sandbox id -> sb-SESSION
	// released are the names of the sandboxes released, which the release removes, as
	// the pool does.
	released []string
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{rt: &sandboxtest.Fake{}, now: time.Unix(1_700_000_000, 0), name: map[string]string{}}
	e.r = New(cfg, func(sb sandbox.Sandbox) {
		e.mu.Lock()
		e.released = append(e.released, e.name[sb.ID()])
		e.mu.Unlock()
		if err := sb.Remove(context.Background()); err != nil {
			t.Errorf("removing %s: %v", sb.ID(), err)
		}
	}, slog.New(slog.DiscardHandler))
	e.r.now = func() time.Time { return e.now }
	t.Cleanup(func() { _, _ = e.rt.RemoveOrphans(context.Background()) })
	return e
}

func (e *env) releasedIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(slices.Values(e.released))
}

// put starts a sandbox and makes it the session's live one.
func (e *env) put(t *testing.T, session string) *Binding {
	t.Helper()
	return e.putAs(t, "", session)
}

// putAs is put for a session of owner's.
func (e *env) putAs(t *testing.T, owner, session string) *Binding {
	t.Helper()
	sb, err := e.rt.Start(t.Context(), sandbox.Spec{Image: "kiln-fake"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	e.mu.Lock()
	e.name[sb.ID()] = "sb-" + session
	e.mu.Unlock()
	b := &Binding{Session: session, Sandbox: sb, Owner: owner}
	e.r.Put(b)
	return b
}

func TestTakeAndPut(t *testing.T) {
	e := newEnv(t, Config{Max: 4, Idle: time.Minute, Lifetime: time.Hour})
	if e.r.Take("s1") != nil {
		t.Fatal("Take of a session with no live sandbox returned one")
	}
	b := e.put(t, "s1")
	b.Memory = 200 << 20
	got := e.r.Take("s1")
	if got != b {
		t.Fatalf("Take returned %v, want the sandbox put", got)
	}
	if st := e.r.Stats(); st.Idle != 0 || st.Busy != 1 || st.Memory != 200<<20 {
		t.Errorf("while lent: got %+v, want 0 idle, 1 busy, 200 MB", st)
	}
	if !e.r.Holds(b.Sandbox.ID()) || e.r.Holds("other") {
		t.Errorf("Holds: got %v for the live sandbox, %v for another", e.r.Holds(b.Sandbox.ID()), e.r.Holds("other"))
	}
	if e.r.Take("s1") != nil {
		t.Error("a sandbox lent to one call was lent again")
	}
	e.r.Put(got)
	if st := e.r.Stats(); st.Idle != 1 || st.Busy != 0 {
		t.Errorf("after Put: got %+v, want 1 idle", st)
	}
	if len(e.releasedIDs()) != 0 {
		t.Errorf("released %v, want nothing", e.releasedIDs())
	}
}

func TestBounds(t *testing.T) {
	e := newEnv(t, Config{Max: 4, Idle: time.Minute, Lifetime: time.Hour})
	e.put(t, "idle")
	e.now = e.now.Add(30 * time.Second)
	e.put(t, "fresh")
	dead := e.put(t, "dead")
	dead.Sandbox.(*sandboxtest.Sandbox).Kill()
	e.r.sweep()
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-dead"}) {
		t.Errorf("after a sweep: released %v, want the dead one", got)
	}
	e.now = e.now.Add(31 * time.Second)
	if e.r.Take("idle") != nil {
		t.Error("Take returned a sandbox idle past its timeout")
	}
	e.r.sweep()
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-dead", "sb-idle"}) {
		t.Errorf("released %v, want the dead and the idle one", got)
	}
	if st := e.r.Stats(); st.Counts.Ended[EndDied] != 1 || st.Counts.Ended[EndIdle] != 1 {
		t.Errorf("got ends %v, want one each of died and idle", st.Counts.Ended)
	}
}

func TestLifetime(t *testing.T) {
	// A sandbox in use all along still ends at its lifetime.
	e := newEnv(t, Config{Max: 4, Idle: 30 * time.Minute, Lifetime: time.Hour})
	e.put(t, "busy")
	for range 3 {
		e.now = e.now.Add(20 * time.Minute)
		if b := e.r.Take("busy"); b != nil {
			e.r.Put(b)
		}
	}
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-busy"}) {
		t.Errorf("released %v, want the one past its lifetime", got)
	}
	if st := e.r.Stats(); st.Counts.Ended[EndLifetime] != 1 {
		t.Errorf("got ends %v, want one for its lifetime", st.Counts.Ended)
	}
}

func TestCapacityEndsTheLeastRecentlyUsed(t *testing.T) {
	e := newEnv(t, Config{Max: 2})
	e.put(t, "a")
	e.now = e.now.Add(time.Second)
	e.put(t, "b")
	e.now = e.now.Add(time.Second)
	e.r.Put(e.r.Take("a")) // a is now the most recent
	e.now = e.now.Add(time.Second)
	e.put(t, "c")
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-b"}) {
		t.Errorf("released %v, want b, the least recently used", got)
	}
	// Every other one busy: the newcomer gets no room.
	x, y := e.r.Take("a"), e.r.Take("c")
	e.put(t, "d")
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-b", "sb-d"}) {
		t.Errorf("released %v, want d too: nothing idle to make room", got)
	}
	e.r.Put(x)
	e.r.Put(y)
	if st := e.r.Stats(); st.Idle != 2 || st.Counts.Ended[EndCapacity] != 2 {
		t.Errorf("got %+v, want 2 idle and 2 ended for capacity", st)
	}
}

// One owner opening session after session under the cap ends its own, never another
// owner's within its share (the cap divided among those holding some); an owner past its
// quota ends its own least recently used first.
func TestSharesAcrossOwners(t *testing.T) {
	e := newEnv(t, Config{Max: 4})
	e.putAs(t, "bob", "b1")
	for i := range 10 {
		e.now = e.now.Add(time.Second)
		e.putAs(t, "alice", "a"+string(rune('0'+i)))
	}
	if e.r.Take("b1") == nil {
		t.Fatalf("bob's session was ended by alice's: released %v", e.releasedIDs())
	}
	if st := e.r.Stats(); st.Idle+st.Busy != 4 {
		t.Errorf("got %+v, want the cap held", st)
	}
	// alice kept her most recent three.
	for _, id := range []string{"a7", "a8", "a9"} {
		if b := e.r.Take(id); b == nil {
			t.Errorf("alice's %s ended, want her three most recent kept", id)
		}
	}
	// With bob's busy and alice's busy, a third owner finds no one over the share idle:
	// its own sandbox ends rather than anyone else's.
	e.putAs(t, "carol", "c1")
	if got := e.releasedIDs(); !slices.Contains(got, "sb-c1") {
		t.Errorf("released %v, want carol's: nobody over the share is idle", got)
	}

	q := newEnv(t, Config{Max: 8, PerOwner: 2})
	q.putAs(t, "bob", "b1")
	q.putAs(t, "alice", "a1")
	q.now = q.now.Add(time.Second)
	q.putAs(t, "alice", "a2")
	q.now = q.now.Add(time.Second)
	q.putAs(t, "alice", "a3")
	if got := q.releasedIDs(); !slices.Equal(got, []string{"sb-a1"}) {
		t.Errorf("released %v, want alice's least recent past her quota of 2", got)
	}
	busy2, busy3 := q.r.Take("a2"), q.r.Take("a3")
	q.putAs(t, "alice", "a4")
	if got := q.releasedIDs(); !slices.Equal(got, []string{"sb-a1", "sb-a4"}) {
		t.Errorf("released %v, want a4 too: her other two are busy", got)
	}
	q.r.Put(busy2)
	q.r.Put(busy3)
	if st := q.r.Stats(); st.Counts.Ended[EndQuota] != 2 || st.Idle != 3 {
		t.Errorf("got %+v, want 2 ended for the quota and b1, a2, a3 idle", st)
	}
}

// Room the registry cannot see (a full cluster) is made on demand: the least recently
// used idle sandbox ends, never a busy one.
func TestEvictOldest(t *testing.T) {
	e := newEnv(t, Config{Max: 8})
	e.put(t, "a")
	e.now = e.now.Add(time.Second)
	e.put(t, "b")
	busy := e.r.Take("a")
	if !e.r.EvictOldest() || !slices.Equal(e.releasedIDs(), []string{"sb-b"}) {
		t.Fatalf("released %v, want b: a is busy", e.releasedIDs())
	}
	if e.r.EvictOldest() {
		t.Error("evicted with nothing idle")
	}
	e.r.Put(busy)
	if st := e.r.Stats(); st.Idle != 1 || st.Counts.Ended[EndCapacity] != 1 {
		t.Errorf("got %+v, want a idle and one ended for capacity", st)
	}
}

func TestEndDropAndClose(t *testing.T) {
	e := newEnv(t, Config{Max: 4})
	e.put(t, "a")
	e.r.End(e.r.Take("a"), EndDiscard)
	e.put(t, "b")
	e.r.Drop("b", EndDiscard)
	e.r.Drop("nobody", EndDiscard)
	e.put(t, "c")
	lent := e.r.Take("c")
	e.put(t, "d")
	e.r.Close()
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-a", "sb-b", "sb-d"}) {
		t.Errorf("released %v, want a, b and the idle d; c is lent", got)
	}
	e.r.Put(lent)
	e.put(t, "e")
	if got := e.releasedIDs(); !slices.Equal(got, []string{"sb-a", "sb-b", "sb-c", "sb-d", "sb-e"}) {
		t.Errorf("after Close: released %v, want every one, put back or new", got)
	}
	if st := e.r.Stats(); st.Idle+st.Busy != 0 || st.Counts.Ended[EndShutdown] != 3 {
		t.Errorf("got %+v, want none left and 3 ended at shutdown", st)
	}
}
