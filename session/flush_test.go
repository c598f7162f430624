package session

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
)

// newDeferringEnv is a liveEnv whose live calls answer before their state is stored
// (StateSaveDelay): the runner stands for the REPL, and a flush's capture returns
// "S<n>", n counting the flushes.
func newDeferringEnv(t *testing.T, delay time.Duration) (*liveEnv, *atomic.Int32) {
	t.Helper()
	e := newLiveEnv(t)
	var flushes atomic.Int32
	e.edit = func(req executor.Request, res *executor.Result) {
		switch {
		case req.Flush:
			res.State, res.StateFromRun = []byte(fmt.Sprintf("S%d", flushes.Add(1))), true
		case !req.CaptureState:
			res.State, res.StateToken = nil, ""
		}
	}
	e.svc.stateDelay, e.svc.capture = delay, e.svc.run
	e.reg.SetFlush(e.svc.flushEnding)
	e.run.result.State = []byte("S0")
	return e, &flushes
}

// A call in the session's live sandbox answers with its state pending: the REPL
// captures nothing, the stored state stays, and a flush stores the namespace once the
// session has had no call for the delay; calls that come sooner run at once, and only
// the last one's namespace is flushed.
func TestALiveCallAnswersBeforeItsStateIsStored(t *testing.T) {
	e, flushes := newDeferringEnv(t, 150*time.Millisecond)
	first := e.exec(t, "", "x = 1")
	sid := first.Session.ID
	if first.StatePending || string(e.state(t, sid)) != "S0" {
		t.Fatalf("a session's first call: pending %v, stored %q; want stored before the answer", first.StatePending, e.state(t, sid))
	}
	for i := range 3 {
		res := e.exec(t, sid, fmt.Sprintf("x += %d", i))
		if !res.StatePending || res.RuntimeStatus != RuntimeReused {
			t.Fatalf("live call %d: pending %v, runtime %s; want pending in the live sandbox", i, res.StatePending, res.RuntimeStatus)
		}
	}
	if got := string(e.state(t, sid)); got != "S0" || flushes.Load() != 0 {
		t.Fatalf("right after three quick calls: stored %q after %d flushes, want S0 and none yet", got, flushes.Load())
	}
	for _, req := range e.run.calls()[1:] {
		if req.CaptureState || req.Flush {
			t.Errorf("a deferred call asked the REPL to capture (%v) or was a flush (%v)", req.CaptureState, req.Flush)
		}
	}
	waitUntil(t, "the flush", func() bool { return string(e.state(t, sid)) == "S1" })
	time.Sleep(300 * time.Millisecond) // the earlier calls' timers found nothing pending
	if n := flushes.Load(); n != 1 {
		t.Errorf("%d flushes, want one for the three calls", n)
	}
	if got := e.reg.Stats().Counts.Flushes; got[live.FlushStored] != 1 || len(got) != 1 {
		t.Errorf("flushes counted %v, want one stored", got)
	}
	reqs := e.run.calls()
	flush := reqs[len(reqs)-1]
	if !flush.Flush || flush.Code != "" || !flush.CaptureState || flush.Sandbox == nil || flush.Sandbox.ID() != "sandbox-1" ||
		flush.StateBase != "token-1" {
		t.Errorf("the flush: %+v; want an empty capture in sandbox-1 based on token-1", flush)
	}
	next := e.exec(t, sid, "print(x)")
	if reqs := e.run.calls(); reqs[len(reqs)-1].StateBase == "token-1" {
		t.Errorf("the call after the flush is based on %q, want the flush's own token", reqs[len(reqs)-1].StateBase)
	}
	if !next.StatePending {
		t.Error("the next live call is not pending")
	}
}

// A pending namespace whose sandbox ends (idle, capacity, shutdown) is stored first; one
// that rolls back on an error stores the state before it runs.
func TestAPendingNamespaceIsStoredBeforeItsSandboxEnds(t *testing.T) {
	e, _ := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "x = 2"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	req := execReq()
	req.SessionID, req.Code, req.OnError = sid, "1/0", executor.OnErrorRollback
	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatal(err)
	}
	reqs := e.run.calls()
	if flush, call := reqs[len(reqs)-2], reqs[len(reqs)-1]; !flush.Flush || !call.CaptureState || call.Flush {
		t.Errorf("a call that rolls back after a pending one: %v then %v, want a flush and then a capturing call", flush.Flush, call.CaptureState)
	}
	if got := string(e.state(t, sid)); got != "S0" && got != "S1" {
		t.Errorf("stored %q", got)
	}
	if res := e.exec(t, sid, "x = 3"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	before := string(e.state(t, sid))
	e.reg.Close() // kiln stops: the pending namespace is stored, then its sandbox goes
	if after := string(e.state(t, sid)); after == before || !strings.HasPrefix(after, "S") {
		t.Errorf("stored %q before the shutdown and %q after, want the namespace flushed", before, after)
	}
	if got := e.releasedIDs(); len(got) != 1 {
		t.Errorf("released %v, want the live sandbox", got)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndShutdown]; n != 1 {
		t.Errorf("%d ended at shutdown, want 1", n)
	}
}

// A Python call that does not run in the live sandbox (capture_state false) reads the
// stored state: a pending namespace is stored first, so that it reads the newest.
func TestACallOutsideTheLiveSandboxReadsTheNewestState(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	e.exec(t, sid, "x = 2")
	req := execReq()
	req.SessionID, req.Code, req.CaptureState = sid, "print(x)", false
	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatal(err)
	}
	reqs := e.run.calls()
	if flushes.Load() != 1 || string(reqs[len(reqs)-1].State) != "S1" {
		t.Errorf("%d flushes, the call got state %q; want the namespace flushed and S1 sent", flushes.Load(), reqs[len(reqs)-1].State)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ = context.Background

// Calls that keep coming push the flush back, up to ten delays after the first pending
// one: a session whose calls never pause is still stored that often.
func TestCallsThatKeepComingPushTheFlushBackWithinALimit(t *testing.T) {
	e, flushes := newDeferringEnv(t, 60*time.Millisecond)
	sid := e.exec(t, "", "x = 1").Session.ID
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		e.exec(t, sid, "x += 1")
		time.Sleep(5 * time.Millisecond)
	}
	during := flushes.Load()
	if during < 1 || during > 4 {
		t.Errorf("%d flushes during 1.5 s of calls with a 60 ms delay, want about two (one every ten delays)", during)
	}
	waitUntil(t, "the flush after the calls", func() bool { return flushes.Load() > during })
}

// When kiln drains, the pending namespaces are stored at once and every later call
// stores before it answers: other replicas resume these sessions from the store.
func TestStoreAllStoresThePendingAndEndsTheDelay(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if !e.exec(t, sid, "x = 2").StatePending {
		t.Fatal("the live call is not pending")
	}
	e.svc.StoreAll(t.Context())
	if flushes.Load() != 1 || string(e.state(t, sid)) != "S1" {
		t.Errorf("after StoreAll: %d flushes, stored %q; want the pending namespace stored", flushes.Load(), e.state(t, sid))
	}
	if res := e.exec(t, sid, "x = 3"); res.StatePending {
		t.Error("a call after StoreAll answered before storing its state")
	}
}

// A pending namespace whose session's stored state changed elsewhere meanwhile (another
// replica resumed and ran it) is not written back over the newer state: its sandbox ends
// as stale, and the flush is counted as stale.
func TestAStaleFlushWritesNothingBack(t *testing.T) {
	e, flushes := newDeferringEnv(t, 100*time.Millisecond)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "x = 2"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	e.putState(t, sid, "S9-from-elsewhere")
	waitUntil(t, "the stale flush counted", func() bool { return e.reg.Stats().Counts.Flushes[live.FlushStale] == 1 })
	if got := string(e.state(t, sid)); got != "S9-from-elsewhere" || flushes.Load() != 0 {
		t.Errorf("stored %q after %d captures, want the other replica's state and no capture", got, flushes.Load())
	}
	if n := e.reg.Stats().Counts.Ended[live.EndStale]; n != 1 {
		t.Errorf("ended stale: %d, want 1", n)
	}
}

// On a runtime that cannot resize a running sandbox, a live sandbox serves only the calls
// of its own size: a call that asks for another stores the pending namespace, ends the
// sandbox and resumes from that state in a sandbox of its size, which then serves the
// calls of that size; a call of the default size again goes back the same way.
func TestALiveSandboxServesOnlyItsOwnSizeWhereItCannotBeResized(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	e.svc.limits.FixedSize, e.svc.limits.DefaultMilliCPU, e.svc.limits.DefaultMemoryMB = true, 1000, 512
	call := func(sid, code string, memoryMB int64) *ExecResult {
		t.Helper()
		req := execReq()
		req.SessionID, req.Code, req.MemoryMB = sid, code, memoryMB
		res, err := e.svc.Exec(t.Context(), alice, req)
		if err != nil {
			t.Fatalf("Exec %q: %v", code, err)
		}
		return res
	}
	sid := call("", "x = 1", 0).Session.ID
	if res := call(sid, "x = 2", 512); res.RuntimeStatus != RuntimeReused || !res.StatePending {
		t.Fatalf("the default size named: %s, pending %v; want reused and pending", res.RuntimeStatus, res.StatePending)
	}
	big := call(sid, "x = 3", 1024)
	reqs := e.run.calls()
	last, flush := reqs[len(reqs)-1], reqs[len(reqs)-2]
	if big.RuntimeStatus != RuntimeResumed || last.Sandbox != nil || last.MemoryMB != 1024 || string(last.State) != "S1" ||
		!flush.Flush || flushes.Load() != 1 {
		t.Fatalf("1024 MB: %s in %v with %d MB from state %q after a flush %v; want resumed from the flushed state in a sandbox of its own",
			big.RuntimeStatus, last.Sandbox, last.MemoryMB, last.State, flush.Flush)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndDiscard]; n != 1 {
		t.Errorf("%d live sandboxes discarded, want the default-sized one", n)
	}
	if res := call(sid, "x = 4", 1024); res.RuntimeStatus != RuntimeReused {
		t.Errorf("1024 MB again: %s, want reused", res.RuntimeStatus)
	}
	if res := call(sid, "x = 5", 0); res.RuntimeStatus != RuntimeResumed {
		t.Errorf("the default size again: %s, want resumed in a sandbox of that size", res.RuntimeStatus)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndDiscard]; n != 2 {
		t.Errorf("%d live sandboxes discarded, want 2", n)
	}
	e.svc.limits.FixedSize = false // a runtime that resizes: the live sandbox serves every size
	if res := call(sid, "x = 6", 2048); res.RuntimeStatus != RuntimeReused {
		t.Errorf("resizable, 2048 MB: %s, want reused", res.RuntimeStatus)
	}
}

// A fork of a session whose last call's state waits for its store copies the newest
// state: the pending namespace is stored first.
func TestAForkCopiesThePendingState(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "x = 2"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	dst, _, err := e.svc.Fork(t.Context(), alice, sid)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.state(t, dst.ID)); got != "S1" || flushes.Load() != 1 {
		t.Errorf("the fork holds %q after %d flushes, want S1, the pending namespace stored first", got, flushes.Load())
	}
}
