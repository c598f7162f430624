package session

import (
	"context"
	"errors"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
)

// A caller's slots are counted together whoever asks for them, a release frees one
// once however often it is called, and callers of other keys (or, with authentication
// off, other addresses) have slots of their own.
func TestAdmitCountsEachCallersSlots(t *testing.T) {
	e := newEnv(t, Limits{MaxFileBytes: 1 << 10, MaxFilesPerSession: 5, MaxConcurrent: 2})
	take := func(c Caller) (func(), bool) {
		release, err := e.svc.Admit(c)
		if err != nil {
			if ke := (*kiln.Error)(nil); !errors.As(err, &ke) || ke.Code != kiln.CodeRateLimited || ke.Quota != kiln.QuotaConcurrency {
				t.Fatalf("refusal %v, want a rate_limited error for the concurrency quota", err)
			}
			return nil, false
		}
		return release, true
	}
	r1, ok1 := take(aliceU1)
	r2, ok2 := take(aliceU2) // unproven users of one key share its slots
	_, ok3 := take(alice)
	rb, okb := take(bob)
	if !ok1 || !ok2 || ok3 || !okb {
		t.Fatalf("got %v %v %v (bob %v), want true true false (bob true)", ok1, ok2, ok3, okb)
	}
	r1()
	r1() // a second release must not free a slot it does not hold
	r4, ok4 := take(alice)
	_, ok5 := take(alice)
	if !ok4 || ok5 {
		t.Errorf("after one release: got %v %v, want true false", ok4, ok5)
	}
	here, there := Caller{Client: "addr:192.0.2.1"}, Caller{Client: "addr:192.0.2.2"}
	h1, _ := take(here)
	h2, _ := take(here)
	if _, ok := take(here); ok {
		t.Error("a third slot for one address with authentication off")
	}
	t1, ok := take(there)
	if !ok {
		t.Error("another address had no slot of its own")
	}
	for _, release := range []func(){r2, r4, rb, h1, h2, t1} {
		release()
	}
	if n := len(e.svc.admission.n); n != 0 {
		t.Errorf("%d callers remembered with nothing in flight, want none", n)
	}
}

// Exec takes its caller's slot for the whole call and frees it before it returns; a call
// past the cap is refused before it waits for anything. A call a front end admitted, and
// kiln's own reads of a live namespace, take none.
func TestExecTakesASlot(t *testing.T) {
	e := newEnv(t, Limits{MaxFileBytes: 1 << 10, MaxFilesPerSession: 5, MaxConcurrent: 1})
	inside := -1
	e.svc.run = RunnerFunc(func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		inside = e.svc.inFlight(alice)
		return &executor.Result{Status: execution.StatusOK}, nil
	})
	if _, err := e.svc.Exec(t.Context(), alice, execReq()); err != nil || inside != 1 {
		t.Fatalf("a call: %v, %d slots held while it ran; want 1", err, inside)
	}
	if n := e.svc.inFlight(alice); n != 0 {
		t.Errorf("%d slots held once the call returned, want 0", n)
	}
	release, err := e.svc.Admit(alice)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	e.svc.run = RunnerFunc(func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		runs++
		return &executor.Result{Status: execution.StatusOK}, nil
	})
	if _, err := e.svc.Exec(t.Context(), alice, execReq()); kiln.ErrorCode(err) != kiln.CodeRateLimited || runs != 0 {
		t.Errorf("a call past the cap: %v after %d runs; want rate_limited before any run", err, runs)
	}
	admitted := execReq()
	admitted.Admitted = true
	if _, err := e.svc.Exec(t.Context(), alice, admitted); err != nil {
		t.Errorf("a call its front end admitted: %v", err)
	}
	read := execReq()
	read.ReadOnly = true
	if _, err := e.svc.Exec(t.Context(), alice, read); err != nil {
		t.Errorf("kiln's own read: %v", err)
	}
	release()
}

// inFlight is how many of the caller's calls hold slots, for tests.
func (s *Service) inFlight(c Caller) int {
	s.admission.mu.Lock()
	defer s.admission.mu.Unlock()
	return s.admission.n[c.admissionKey()]
}
