package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// Harness is what Run needs of a runtime under test: how to open it, what to start, and
// the code of each behaviour in the language of its REPL.
type Harness struct {
	// Open returns the runtime under test, for an instance of the suite's own: Run counts
	// on its sandboxes being the only ones listed. Run removes what is left and closes it.
	Open func(t *testing.T) sandbox.Runtime
	// Spec is what the suite starts; its MemoryMB bounds Code.OOM.
	Spec sandbox.Spec
	// Lang is the language of Code, one the REPL lists; "python" by default.
	Lang string
	Code Code
	// Traits are what the runtime must say it is.
	Traits sandbox.Traits
	// MissingImage, when set, names an image the runtime does not have: ImageID must
	// fail for it. A runtime that cannot tell (a cluster) leaves it empty.
	MissingImage string
	// NoRoom, when set, is a spec nothing has room for (a Pod larger than every node):
	// Start must return a sandbox.NoRoomError, whose Wait ends with its context and
	// leaves nothing behind. A runtime that sees its own room beforehand (the local
	// daemon) leaves it nil.
	NoRoom *sandbox.Spec
	// StartTimeout bounds one Start (2 minutes by default: a Pod may wait for its node).
	StartTimeout time.Duration
	// Settle bounds how long a sandbox may take to die, and to leave List, once removed
	// or ended (30 s by default: a Pod's deletion reaches the watch late).
	Settle time.Duration
}

// Code is the code of each behaviour the suite asks for, in the REPL's language.
type Code struct {
	// Print prints Printed.
	Print, Printed string
	// Set binds a name that Get, in a later request to the same sandbox, prints as Got.
	// Set "" skips the case.
	Set, Get, Got string
	// Sleep prints a line, then sleeps for far longer than the suite waits.
	Sleep string
	// Exit ends the REPL process with ExitCode, without an answer.
	Exit     string
	ExitCode int
	// OOM allocates past Spec.MemoryMB until the kernel's out-of-memory killer ends the
	// REPL; "" skips the case.
	OOM string
}

// How long the suite waits for a request's answer, and how soon an interrupt must end a
// sleeping run.
const (
	execTimeout      = 60 * time.Second
	interruptTimeout = 10 * time.Second
)

// Run is the contract every sandbox.Runtime meets: what kiln's pool, executor and live
// sessions count on, whichever runtime made their sandboxes. It starts six sandboxes, in
// three rounds, and shares one between the cases that allow it.
func Run(t *testing.T, h Harness) {
	if h.Lang == "" {
		h.Lang = "python"
	}
	if h.StartTimeout == 0 {
		h.StartTimeout = 2 * time.Minute
	}
	if h.Settle == 0 {
		h.Settle = 30 * time.Second
	}
	rt := h.Open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := rt.RemoveOrphans(ctx); err != nil {
			t.Errorf("RemoveOrphans at the end: %v", err)
		}
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	c := &contract{h: h, rt: rt}
	t.Run("Ping", c.ping)
	t.Run("ImageID", c.imageID)
	t.Run("StartCancelled", c.startCancelled)
	if h.NoRoom != nil {
		t.Run("NoRoom", c.noRoom)
	}
	t.Run("Lifecycle", c.lifecycle)
	if h.Code.OOM != "" {
		t.Run("OOM", c.oom)
	}
	t.Run("Removal", c.removal)
}

type contract struct {
	h  Harness
	rt sandbox.Runtime
}

func (c *contract) ping(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.rt.Ping(ctx); err != nil {
		t.Errorf("Ping: got %v, want nil", err)
	}
	if c.rt.Name() == "" {
		t.Error("Name: got \"\", want the runtime's name")
	}
}

// traits checks that the runtime says what it is, and that a runtime that says it
// resizes running sandboxes does: a call of another size counts on it.
func (c *contract) traits(t *testing.T, sb sandbox.Sandbox) {
	got := c.rt.Traits()
	if got != c.h.Traits {
		t.Errorf("Traits: got %+v, want %+v", got, c.h.Traits)
	}
	if !got.Resizes {
		return
	}
	r, ok := sb.(sandbox.Resizer)
	if !ok {
		t.Fatalf("a sandbox of a runtime that resizes is not a sandbox.Resizer: %T", sb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cpu, mb := r.Limits()
	if err := r.Resize(ctx, cpu, mb+64); err != nil {
		t.Fatalf("Resize to %d MB: %v", mb+64, err)
	}
	if gotCPU, gotMB := r.Limits(); gotCPU != cpu || gotMB != mb+64 {
		t.Errorf("Limits after Resize: %d, %d MB; want %d, %d MB", gotCPU, gotMB, cpu, mb+64)
	}
	if err := r.Resize(ctx, cpu, mb); err != nil {
		t.Errorf("Resize back to %d MB: %v", mb, err)
	}
	if resp := c.exec(t, sb, c.h.Code.Print); resp.Status != protocol.StatusOK {
		t.Errorf("a request after Resize: status %s (error %s)", resp.Status, str(resp.Error))
	}
}

func (c *contract) imageID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if id, err := c.rt.ImageID(ctx, c.h.Spec.Image); err != nil || id == "" {
		t.Errorf("ImageID(%s): got %q, %v; want an id", c.h.Spec.Image, id, err)
	}
	if c.h.MissingImage == "" {
		return
	}
	if id, err := c.rt.ImageID(ctx, c.h.MissingImage); err == nil {
		t.Errorf("ImageID(%s): got %q, want an error for an image the runtime does not have", c.h.MissingImage, id)
	}
}

// startCancelled checks that a warm-up whose context has ended fails as a warm-up
// timeout, and leaves nothing behind: neither with a context ended before Start, nor
// with one that ends during it.
func (c *contract) startCancelled(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	short, cancelShort := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelShort()
	for _, tt := range []struct {
		name string
		ctx  context.Context
	}{
		{"cancelled before", cancelled},
		{"deadline during", short},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := c.listed(t)
			sb, err := c.rt.Start(tt.ctx, c.h.Spec)
			if err == nil {
				removeNow(t, sb)
				t.Fatalf("Start: got sandbox %s, want an error", sb.ID())
			}
			if !errors.Is(err, kiln.ErrWarmupTimeout) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Start: got %v, want kiln.ErrWarmupTimeout or the context's error", err)
			}
			c.settle(t, "the failed warm-up's sandbox to go", func(ids []string) bool { return slices.Equal(ids, before) })
		})
	}
}

// noRoom checks that a sandbox nothing has room for is reported as such at once, and that
// waiting on for it ends with the wait's context and removes it.
func (c *contract) noRoom(t *testing.T) {
	before := c.listed(t)
	ctx, cancel := context.WithTimeout(context.Background(), c.h.StartTimeout)
	defer cancel()
	sb, err := c.rt.Start(ctx, *c.h.NoRoom)
	var room *sandbox.NoRoomError
	if !errors.As(err, &room) {
		if err == nil {
			removeNow(t, sb)
		}
		t.Fatalf("Start of a sandbox nothing has room for: got %v, want a sandbox.NoRoomError", err)
	}
	if room.Why == "" {
		t.Error("NoRoomError: got no reason")
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if sb, err := room.Wait(wctx); err == nil {
		removeNow(t, sb)
		t.Fatalf("Wait: got sandbox %s, want the wait's end", sb.ID())
	} else if !errors.Is(err, kiln.ErrWarmupTimeout) {
		t.Errorf("Wait: got %v, want kiln.ErrWarmupTimeout", err)
	}
	c.settle(t, "the sandbox with no room to go", func(ids []string) bool { return slices.Equal(ids, before) })
}

// lifecycle takes one sandbox through its life: ready, listed, serving requests that
// share their namespace, a REPL ping, an interrupt, then its REPL's own end, and removal.
func (c *contract) lifecycle(t *testing.T) {
	sb := c.start(t)
	t.Run("Ready", func(t *testing.T) {
		if sb.ID() == "" {
			t.Error("ID: got \"\"")
		}
		if langs := sb.Ready().Capabilities.Languages; !slices.Contains(langs, c.h.Lang) {
			t.Errorf("Ready: languages %v, want %s among them", langs, c.h.Lang)
		}
		select {
		case <-sb.Done():
			t.Error("Done: closed for a sandbox that runs")
		default:
		}
	})
	t.Run("Listed", func(t *testing.T) {
		found := c.find(t, sb.ID())
		if found == nil {
			t.Fatalf("List: %v, want %s among them", c.listed(t), sb.ID())
		}
		if found.State == "" || found.Created.IsZero() || time.Since(found.Created) > time.Hour {
			t.Errorf("List: got %+v, want a state and a creation time", *found)
		}
	})
	t.Run("Exec", func(t *testing.T) {
		resp := c.exec(t, sb, c.h.Code.Print)
		if resp.Status != protocol.StatusOK || resp.Stdout != c.h.Code.Printed {
			t.Errorf("got status %s, stdout %q (error %s); want ok, %q", resp.Status, resp.Stdout, str(resp.Error), c.h.Code.Printed)
		}
	})
	if c.h.Code.Set != "" {
		t.Run("NamespaceOutlivesARequest", func(t *testing.T) {
			c.exec(t, sb, c.h.Code.Set)
			if resp := c.exec(t, sb, c.h.Code.Get); resp.Status != protocol.StatusOK || resp.Stdout != c.h.Code.Got {
				t.Errorf("got status %s, stdout %q (error %s); want ok, %q", resp.Status, resp.Stdout, str(resp.Error), c.h.Code.Got)
			}
		})
	}
	t.Run("Traits", func(t *testing.T) { c.traits(t, sb) })
	t.Run("REPLPing", func(t *testing.T) { c.replPing(t, sb) })
	t.Run("Interrupt", func(t *testing.T) { c.interrupt(t, sb) })
	t.Run("Exit", func(t *testing.T) { c.exit(t, sb) })
	t.Run("Remove", func(t *testing.T) {
		c.remove(t, sb)
		if err := c.rt.Remove(context.Background(), sb.ID()); err != nil {
			t.Errorf("runtime Remove of a sandbox already gone: got %v, want nil", err)
		}
	})
}

// replPing checks that the REPL answers a ping frame with a pong of its id.
func (c *contract) replPing(t *testing.T, sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	frame, err := protocol.EncodeRequest(&protocol.Request{ID: "ping-1", Op: protocol.OpPing})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Send(ctx, frame); err != nil {
		t.Fatalf("Send: %v", err)
	}
	f, err := sb.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	var pong struct{ ID, Type string }
	if err := json.Unmarshal(f.Header, &pong); err != nil || pong.ID != "ping-1" || pong.Type != "pong" {
		t.Errorf("got %s (%v), want a pong of ping-1", f.Header, err)
	}
}

// interrupt checks that an interrupt frame ends a sleeping run promptly, as cancelled,
// with its output so far, and that the REPL serves again after.
func (c *contract) interrupt(t *testing.T, sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	req := c.request(c.h.Code.Sleep)
	req.Events = true
	send(ctx, t, sb, req)
	var interrupted time.Time
	for {
		f, err := sb.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		ev, resp, err := protocol.Decode(f, req.ID, req.Limits)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if ev != nil {
			if interrupted.IsZero() {
				if err := sb.Send(ctx, protocol.EncodeInterrupt(req.ID)); err != nil {
					t.Fatalf("Send interrupt: %v", err)
				}
				interrupted = time.Now()
			}
			continue
		}
		if interrupted.IsZero() {
			t.Fatalf("got the result before any output: %s %q", resp.Status, str(resp.Error))
		}
		if took := time.Since(interrupted); took > interruptTimeout {
			t.Errorf("the interrupted run answered after %v, want within %v", took, interruptTimeout)
		}
		if resp.Status != protocol.StatusCancelled || resp.ExitCode != 130 || str(resp.Error) != "Interrupted" || resp.Stdout == "" {
			t.Errorf("got %s %d %q, stdout %q; want cancelled 130 \"Interrupted\" with the output so far",
				resp.Status, resp.ExitCode, str(resp.Error), resp.Stdout)
		}
		break
	}
	if resp := c.exec(t, sb, c.h.Code.Print); resp.Status != protocol.StatusOK || resp.Stdout != c.h.Code.Printed {
		t.Errorf("after the interrupt: got %s, stdout %q; want the REPL to serve as before", resp.Status, resp.Stdout)
	}
}

// exit checks a REPL that ends under a request: Receive says it exited, Exit gives its
// code, Done closes, and the sandbox is still listed until it is removed.
func (c *contract) exit(t *testing.T, sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	req := c.request(c.h.Code.Exit)
	send(ctx, t, sb, req)
	if f, err := sb.Receive(ctx); !errors.Is(err, kiln.ErrSandboxExited) {
		t.Fatalf("Receive: got %s, %v; want kiln.ErrSandboxExited", f.Header, err)
	}
	code, oom, err := sb.Exit(ctx)
	if code != c.h.Code.ExitCode || oom || err != nil {
		t.Errorf("Exit: got %d, %v, %v; want %d, false, nil", code, oom, err, c.h.Code.ExitCode)
	}
	c.waitDone(t, sb)
	if c.find(t, sb.ID()) == nil {
		t.Errorf("List: %v, want %s still there until it is removed", c.listed(t), sb.ID())
	}
}

// oom checks a REPL that the out-of-memory killer ends: Exit says so.
func (c *contract) oom(t *testing.T) {
	sb := c.start(t)
	defer removeNow(t, sb)
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	req := c.request(c.h.Code.OOM)
	send(ctx, t, sb, req)
	if f, err := sb.Receive(ctx); !errors.Is(err, kiln.ErrSandboxExited) {
		t.Fatalf("Receive: got %s, %v; want kiln.ErrSandboxExited", f.Header, err)
	}
	if code, oom, err := sb.Exit(ctx); code != 137 || !oom || err != nil {
		t.Errorf("Exit: got %d, %v, %v; want 137, true, nil", code, oom, err)
	}
	c.waitDone(t, sb)
}

// removal checks the three ways a sandbox goes: its own Remove, the runtime's Remove by
// id, and RemoveOrphans, which takes every sandbox of the instance. Each closes Done,
// and each is idempotent.
func (c *contract) removal(t *testing.T) {
	sbs := c.startN(t, 4)
	own, byID, orphans := sbs[0], sbs[1], sbs[2:]
	t.Run("Sandbox.Remove", func(t *testing.T) { c.remove(t, own) })
	t.Run("Runtime.Remove", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), c.h.Settle)
		defer cancel()
		if err := c.rt.Remove(ctx, byID.ID()); err != nil {
			t.Fatalf("Remove(%s): %v", byID.ID(), err)
		}
		c.waitDone(t, byID)
		c.settle(t, byID.ID()+" to leave the list", func(ids []string) bool { return !slices.Contains(ids, byID.ID()) })
		if err := c.rt.Remove(ctx, byID.ID()); err != nil {
			t.Errorf("a second Remove: got %v, want nil", err)
		}
		if err := byID.Remove(ctx); err != nil {
			t.Errorf("the sandbox's own Remove after the runtime's: got %v, want nil", err)
		}
	})
	t.Run("RemoveOrphans", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), c.h.Settle)
		defer cancel()
		n, err := c.rt.RemoveOrphans(ctx)
		if n != len(orphans) || err != nil {
			t.Errorf("RemoveOrphans: got %d, %v; want %d, nil", n, err, len(orphans))
		}
		for _, sb := range orphans {
			c.waitDone(t, sb)
			if err := sb.Remove(ctx); err != nil {
				t.Errorf("%s: its own Remove after RemoveOrphans: got %v, want nil", sb.ID(), err)
			}
		}
		c.settle(t, "every sandbox to leave the list", func(ids []string) bool { return len(ids) == 0 })
	})
}

// remove checks a sandbox's own Remove: it succeeds twice, closes Done, and the sandbox
// leaves the list.
func (c *contract) remove(t *testing.T, sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), c.h.Settle)
	defer cancel()
	if err := sb.Remove(ctx); err != nil {
		t.Errorf("Remove: %v", err)
	}
	if err := sb.Remove(ctx); err != nil {
		t.Errorf("a second Remove: got %v, want nil", err)
	}
	c.waitDone(t, sb)
	c.settle(t, sb.ID()+" to leave the list", func(ids []string) bool { return !slices.Contains(ids, sb.ID()) })
}
