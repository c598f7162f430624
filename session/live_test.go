package session

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// liveEnv is a Service with live sessions over a runner that stands for the executor:
// each run checked out gets a new sandbox of a Fake (its REPL never asked anything: the
// runner answers for it), which Keep hands over.
type liveEnv struct {
	*testEnv
	reg      *Live
	rt       *sandboxtest.Fake
	mu       sync.Mutex
	sandbox  int
	released []string
	// edit, when set, changes each result before it is returned.
	edit func(req executor.Request, res *executor.Result)
}

func newLiveEnv(t *testing.T) *liveEnv {
	t.Helper()
	e := &liveEnv{testEnv: newEnv(t, testLimits), rt: &sandboxtest.Fake{Prefix: "sandbox-"}}
	t.Cleanup(func() { _, _ = e.rt.RemoveOrphans(context.Background()) })
	e.reg = live.New(live.Config{Max: 8}, func(sb sandbox.Sandbox) {
		e.mu.Lock()
		e.released = append(e.released, sb.ID())
		e.mu.Unlock()
		if err := sb.Remove(context.Background()); err != nil { // as the pool does
			t.Errorf("removing %s: %v", sb.ID(), err)
		}
	}, slog.New(slog.DiscardHandler))
	e.svc.live, e.svc.turnWait = e.reg, time.Second
	e.svc.run = RunnerFunc(func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		res, err := e.run.Run(ctx, req)
		if err != nil {
			return nil, err
		}
		res.Reusable = true
		e.mu.Lock()
		e.sandbox++
		res.StateToken = fmt.Sprintf("token-%d", e.sandbox)
		e.mu.Unlock()
		if req.Sandbox == nil {
			sb, err := e.rt.Start(ctx, sandbox.Spec{Image: "kiln-fake"})
			if err != nil {
				return nil, err
			}
			// As the executor's: a run whose sandbox is not kept gives it back to the
			// pool, which removes it.
			res.SetRelease(func() { _ = sb.Remove(context.Background()) })
			res.SetKeep(func() sandbox.Sandbox { return sb })
		}
		if e.edit != nil {
			e.edit(req, res)
		}
		return res, nil
	})
	return e
}

// exec runs code in the session sid (a new one for ""), and returns once the session's
// turn is free again: the capture that follows a deferred call has run.
func (e *liveEnv) exec(t *testing.T, sid, code string) *ExecResult {
	t.Helper()
	req := execReq()
	req.SessionID, req.Code = sid, code
	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatalf("Exec %q: %v", code, err)
	}
	e.quiet(t, res.Session.ID)
	return res
}

// quiet waits until no call or capture of the session holds its turn.
func (e *liveEnv) quiet(t *testing.T, sid string) {
	t.Helper()
	release, _, err := e.svc.turns.acquire(t.Context(), sid, 5*time.Second)
	if err != nil {
		t.Fatalf("the session's turn: %v", err)
	}
	release()
}

func (e *liveEnv) releasedIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.released)
}

func TestLiveSessionReusesItsSandbox(t *testing.T) {
	e := newLiveEnv(t)
	e.run.result.State = []byte("S1")
	first := e.exec(t, "", "x = 1")
	if first.RuntimeStatus != RuntimeNew {
		t.Errorf("first call: runtime %q, want new", first.RuntimeStatus)
	}
	sid := first.Session.ID
	e.run.result.State, e.run.result.StateUnchanged = nil, true
	second := e.exec(t, sid, "print(x)")
	reqs := e.run.calls()
	got := reqs[1]
	if second.RuntimeStatus != RuntimeReused || got.Sandbox == nil || got.Sandbox.ID() != "sandbox-1" {
		t.Fatalf("second call: runtime %q on %v, want reused on sandbox-1", second.RuntimeStatus, got.Sandbox)
	}
	if !got.Live || got.State != nil || got.StateBase != "token-1" {
		t.Errorf("second call sent live %v, %d bytes of state, base %q; want live, none, token-1", got.Live, len(got.State), got.StateBase)
	}
	if string(e.state(t, sid)) != "S1" {
		t.Errorf("stored state %q, want S1 kept: the run left it unchanged", e.state(t, sid))
	}
	if st := e.reg.Stats(); st.Idle != 1 || st.Counts.Calls[RuntimeReused] != 1 || st.Counts.Calls[RuntimeNew] != 1 {
		t.Errorf("registry %+v, want 1 idle, one new and one reused call", st)
	}
}

func TestLiveSessionPlacesOnlyChangedFiles(t *testing.T) {
	e := newLiveEnv(t)
	sess := e.session(t, alice, "")
	a := e.file(t, sess.ID, "a.csv", "a")
	e.exec(t, sess.ID, "1")
	e.file(t, sess.ID, "b.csv", "b")
	if err := e.svc.DeleteFile(t.Context(), alice, sess.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	e.exec(t, sess.ID, "2")
	reqs := e.run.calls()
	if names := paths(reqs[0].Files); !slices.Equal(names, []string{"a.csv"}) {
		t.Errorf("first call placed %v, want a.csv", names)
	}
	if names := paths(reqs[1].Files); !slices.Equal(names, []string{"b.csv"}) || !slices.Equal(reqs[1].DeleteFiles, []string{"a.csv"}) {
		t.Errorf("second call placed %v and removed %v, want b.csv placed and a.csv removed", names, reqs[1].DeleteFiles)
	}
	// A file the run deletes leaves the session too, and is not placed again.
	e.edit = func(req executor.Request, res *executor.Result) { res.DeletedFiles = []string{"b.csv"} }
	third := e.exec(t, sess.ID, "os.remove('b.csv')")
	if !slices.Equal(third.DeletedFiles, []string{"b.csv"}) || len(e.storedNames(t, sess.ID)) != 0 {
		t.Errorf("deleted %v, stored %v; want b.csv deleted from the session", third.DeletedFiles, e.storedNames(t, sess.ID))
	}
	e.edit = nil
	e.exec(t, sess.ID, "4")
	if last := e.run.calls()[3]; len(last.Files)+len(last.DeleteFiles) != 0 {
		t.Errorf("fourth call placed %v, removed %v; want nothing", paths(last.Files), last.DeleteFiles)
	}
}

func paths(files []protocol.File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

func TestLiveSandboxEnds(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(executor.Request, *executor.Result)
		want string
	}{
		{"the sandbox died", func(_ executor.Request, r *executor.Result) {
			r.Status, r.Reusable, r.StateFromRun = execution.StatusOOM, false, false
		}, live.EndDied},
		{"a rollback", func(_ executor.Request, r *executor.Result) {
			r.Status, r.StateFromRun = execution.StatusError, false
		}, live.EndDiscard},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newLiveEnv(t)
			e.run.result.State = []byte("S1")
			sid := e.exec(t, "", "x = 1").Session.ID
			e.edit = tt.edit
			e.exec(t, sid, "boom")
			if got := e.releasedIDs(); !slices.Equal(got, []string{"sandbox-1"}) {
				t.Fatalf("released %v, want sandbox-1", got)
			}
			e.edit = nil
			next := e.exec(t, sid, "x")
			if req := e.run.calls()[2]; next.RuntimeStatus != RuntimeResumed || req.Sandbox != nil || string(req.State) != "S1" {
				t.Errorf("next call: %q on %v with state %q, want resumed from S1 in a new sandbox", next.RuntimeStatus, req.Sandbox, req.State)
			}
			if n := e.reg.Stats().Counts.Ended[tt.want]; n != 1 {
				t.Errorf("ended for %s: %d, want 1", tt.want, n)
			}
		})
	}
}

// Calls that do not keep a state of the session's go to a sandbox of their own: the
// live one stays for the next.
func TestNotLive(t *testing.T) {
	e := newLiveEnv(t)
	sid := e.exec(t, "", "x = 1").Session.ID
	for _, req := range []ExecRequest{
		{Request: execution.Request{Lang: execution.LangBash, Code: "ls", CaptureState: true}, SessionID: sid},
		{Request: execution.Request{Lang: execution.LangPython, Code: "y = 2"}, SessionID: sid},
	} {
		res, err := e.svc.Exec(t.Context(), alice, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.RuntimeStatus != RuntimeResumed || e.run.calls()[len(e.run.calls())-1].Sandbox != nil {
			t.Errorf("%s capture %v: runtime %q, want resumed in a sandbox of its own", req.Lang, req.CaptureState, res.RuntimeStatus)
		}
	}
	if st := e.reg.Stats(); st.Idle != 1 {
		t.Errorf("got %d live sandboxes, want the session's one left as it was", st.Idle)
	}
	if next := e.exec(t, sid, "x"); next.RuntimeStatus != RuntimeReused {
		t.Errorf("then: runtime %q, want reused", next.RuntimeStatus)
	}
}

func TestStateChangesEndTheLiveSandbox(t *testing.T) {
	e := newLiveEnv(t)
	sid := e.exec(t, "", "x = 1").Session.ID
	if _, err := e.svc.PutState(t.Context(), alice, sid, []byte("PUT")); err != nil {
		t.Fatal(err)
	}
	if next := e.exec(t, sid, "x"); next.RuntimeStatus != RuntimeResumed || string(e.run.calls()[1].State) != "PUT" {
		t.Errorf("after a state put: runtime %q, state %q; want resumed from PUT", next.RuntimeStatus, e.run.calls()[1].State)
	}
	if err := e.svc.DeleteSession(t.Context(), alice, sid); err != nil {
		t.Fatal(err)
	}
	if st := e.reg.Stats(); st.Idle+st.Busy != 0 {
		t.Errorf("after the session's deletion: %+v, want no live sandbox", st)
	}
}

// A call of a session waits while another runs, and gets session_busy when the other
// outlasts the wait.
func TestOneCallOfASessionAtATime(t *testing.T) {
	e := newLiveEnv(t)
	sid := e.exec(t, "", "x = 1").Session.ID
	started, finish := make(chan struct{}), make(chan struct{})
	inner := e.svc.run
	e.svc.run = RunnerFunc(func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		if req.Code == "slow" {
			close(started)
			<-finish
		}
		return inner.Run(ctx, req)
	})
	e.svc.turnWait = 50 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		req := execReq()
		req.SessionID, req.Code = sid, "slow"
		_, err := e.svc.Exec(context.Background(), alice, req)
		done <- err
	}()
	<-started
	req := execReq()
	req.SessionID = sid
	_, err := e.svc.Exec(t.Context(), alice, req)
	wantCode(t, err, kiln.CodeBusy)
	if ke, _ := err.(*kiln.Error); ke.RetryAfter <= 0 {
		t.Errorf("got %v, want a Retry-After", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if next := e.exec(t, sid, "x"); next.RuntimeStatus != RuntimeReused {
		t.Errorf("after: runtime %q, want reused", next.RuntimeStatus)
	}
}

// Another instance that ran the session since (its stored state is another) leaves this
// one's live sandbox stale: the call resumes from the store.
func TestStaleLiveSandboxEnds(t *testing.T) {
	e := newLiveEnv(t)
	e.run.result.State = []byte("S1")
	sid := e.exec(t, "", "x = 1").Session.ID
	e.putState(t, sid, "S2-from-elsewhere")
	next := e.exec(t, sid, "x")
	if req := e.run.calls()[1]; next.RuntimeStatus != RuntimeResumed || req.Sandbox != nil || string(req.State) != "S2-from-elsewhere" {
		t.Errorf("got %q on %v with state %q, want resumed from the other instance's state", next.RuntimeStatus, req.Sandbox, req.State)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndStale]; n != 1 {
		t.Errorf("ended stale: %d, want 1", n)
	}
}
