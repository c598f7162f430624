package sandboxtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// The steps the contract's cases are made of.

// start starts a sandbox of the harness's spec, removed when the test ends.
func (c *contract) start(t *testing.T) sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.h.StartTimeout)
	defer cancel()
	sb, err := startWaiting(ctx, c.rt, c.h.Spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { removeNow(t, sb) })
	return sb
}

// startWaiting starts a sandbox as the pool does: one that has no room yet is waited for,
// as it was before the runtime said so (a cluster busy with another suite's Pods).
func startWaiting(ctx context.Context, rt sandbox.Runtime, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := rt.Start(ctx, spec)
	var room *sandbox.NoRoomError
	if errors.As(err, &room) {
		return room.Wait(ctx)
	}
	return sb, err
}

// startN starts n sandboxes at once.
func (c *contract) startN(t *testing.T, n int) []sandbox.Sandbox {
	t.Helper()
	sbs := make([]sandbox.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), c.h.StartTimeout)
	defer cancel()
	for i := range n {
		wg.Go(func() { sbs[i], errs[i] = startWaiting(ctx, c.rt, c.h.Spec) })
	}
	wg.Wait()
	for i, sb := range sbs {
		if sb != nil {
			t.Cleanup(func() { removeNow(t, sb) })
		}
		if errs[i] != nil {
			t.Fatalf("Start: %v", errs[i])
		}
	}
	return sbs
}

// removeNow removes a sandbox with a context of its own, as every removal must be.
func removeNow(t *testing.T, sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Remove(ctx); err != nil {
		t.Errorf("Remove %s: %v", sb.ID(), err)
	}
}

// request is an exec request of code, with kiln's default limits.
func (c *contract) request(code string) *protocol.Request {
	return &protocol.Request{ID: kiln.NewID(), Op: protocol.OpExec, Lang: c.h.Lang, Code: code, TimeoutMS: execTimeout.Milliseconds(),
		Limits: protocol.Limits{MaxOutputBytes: 1 << 20, MaxFileBytes: 10 << 20, MaxFiles: 50, MaxStateBytes: 64 << 20}}
}

// exec runs code and returns the REPL's answer, failing the test when there is none.
func (c *contract) exec(t *testing.T, sb sandbox.Sandbox, code string) *protocol.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	req := c.request(code)
	send(ctx, t, sb, req)
	f, err := sb.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	resp, err := protocol.DecodeResponse(f, req.ID, req.Limits)
	if err != nil {
		t.Fatalf("DecodeResponse: %v", err)
	}
	return resp
}

func send(ctx context.Context, t *testing.T, sb sandbox.Sandbox, req *protocol.Request) {
	t.Helper()
	frame, err := protocol.EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Send(ctx, frame); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// waitDone waits for a sandbox's Done, failing the test after Settle.
func (c *contract) waitDone(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	select {
	case <-sb.Done():
	case <-time.After(c.h.Settle):
		t.Errorf("Done: not closed %v after %s died", c.h.Settle, sb.ID())
	}
}

// listed returns the ids List gives, in its order.
func (c *contract) listed(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	ids := make([]string, 0, len(list))
	for _, f := range list {
		ids = append(ids, f.ID)
	}
	slices.Sort(ids)
	return ids
}

// find returns the listed sandbox with id, or nil.
func (c *contract) find(t *testing.T, id string) *sandbox.Found {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, f := range list {
		if f.ID == id {
			return &f
		}
	}
	return nil
}

// settle polls List until cond holds of its ids, failing the test after Settle.
func (c *contract) settle(t *testing.T, what string, cond func(ids []string) bool) {
	t.Helper()
	deadline := time.Now().Add(c.h.Settle)
	for {
		ids := c.listed(t)
		if cond(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("List: %v after %v, waiting for %s", ids, c.h.Settle, what)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func str(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
