package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// Fake is a sandbox.Runtime whose sandboxes are fake REPLs in the test process (see the
// package's doc). Its zero value is ready to use; set its fields before the first Start
// and leave them. Its methods are safe for concurrent use.
type Fake struct {
	// Prefix starts every sandbox's id, which goes on with a count from 1 ("fake-" by
	// default): two Fakes in one test keep their sandboxes apart by it.
	Prefix string
	// Languages are what the REPLs' ready frames say they run; python and bash by
	// default. Commands reads the code of every one of them.
	Languages []string
	// Handler serves the exec requests; nil is Commands.
	Handler Handler
	// Images, when set, are the images the runtime has: ImageID and Start fail for any
	// other. When nil, it has every image.
	Images []string
	// Gate, when set, holds each Start until it can take one value from it, or until the
	// Start's context ends.
	Gate chan struct{}
	// WarmUp is how long a REPL takes before it answers the hello: a Start whose context
	// ends sooner fails, as a warm-up that times out.
	WarmUp time.Duration
	// RoomMB, when set, is the most memory a sandbox may have: Start of a larger one
	// returns a sandbox.NoRoomError, as a cluster with no node that large does, and room
	// never comes to its Wait.
	RoomMB int64
	// RemoveDelay is how long each removal takes, within its context.
	RemoveDelay time.Duration
	// RemoveErr, when set, fails every removal: the REPL is killed, but its sandbox stays
	// listed, as a container whose removal failed does.
	RemoveErr error
	// Frames bound a frame from a REPL, as sandbox.Options.Frames do (1 MiB of header,
	// 64 MiB of payloads by default).
	Frames sandbox.FrameLimits
	// Trickle makes each REPL's output reach kiln one byte at a time.
	Trickle bool
	// Log is the log of the sandboxes' connections; nil discards it.
	Log *slog.Logger

	mu      sync.Mutex
	failErr error
	made    int                 // sandboxes created, for their ids
	started []*Sandbox          // the sandboxes Start returned, in order
	live    map[string]*Sandbox // created and not removed, by id
	counts  Counts
}

var _ sandbox.Runtime = (*Fake)(nil)

// Counts are what a Fake has done, for a test to check.
type Counts struct {
	Starts      int // Start calls, those that failed too
	Starting    int // Start calls under way
	MaxStarting int // the most Start calls under way at once
	Failed      int // Start calls that failed
	Removed     int // sandboxes removed, by their Remove or the runtime's
	// StartedAt and FailedAt are when each Start began, and when each failed one failed.
	StartedAt, FailedAt []time.Time
}

// Name returns "fake".
func (f *Fake) Name() string { return "fake" }

// Traits say the fake's sandboxes are isolated by nothing, and do not resize.
func (f *Fake) Traits() sandbox.Traits { return sandbox.Traits{Isolation: "none"} }

// Ping answers at once.
func (f *Fake) Ping(context.Context) error { return nil }

// Close does nothing: the sandboxes stay, as a runtime's do when kiln lets go of it.
func (f *Fake) Close() error { return nil }

// ImageID returns a made-up id of an image the runtime has.
func (f *Fake) ImageID(_ context.Context, image string) (string, error) {
	if err := f.hasImage(image); err != nil {
		return "", err
	}
	return "fake:" + image, nil
}

func (f *Fake) hasImage(image string) error {
	if f.Images != nil && !slices.Contains(f.Images, image) {
		return fmt.Errorf("%w: no image %q", kiln.ErrRuntime, image)
	}
	return nil
}

// Fail makes every Start from now on fail with err, after its gate; nil ends that.
func (f *Fake) Fail(err error) {
	f.mu.Lock()
	f.failErr = err
	f.mu.Unlock()
}

// Counts returns what the Fake has done so far.
func (f *Fake) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts
	c.StartedAt, c.FailedAt = slices.Clone(c.StartedAt), slices.Clone(c.FailedAt)
	return c
}

// Sandboxes returns the sandboxes Start returned, in order, removed ones too.
func (f *Fake) Sandboxes() []*Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.started)
}

// Start makes a sandbox whose REPL runs the Fake's handler, and returns it once the REPL
// has answered the real handshake. It is Docker's order: the sandbox exists (and is
// listed) from its creation, and a warm-up that fails removes it.
func (f *Fake) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if f.RoomMB > 0 && spec.MemoryMB > f.RoomMB {
		why := fmt.Sprintf("%d MB asked, %d MB of room", spec.MemoryMB, f.RoomMB)
		return nil, &sandbox.NoRoomError{Why: why, Wait: func(ctx context.Context) (sandbox.Sandbox, error) {
			<-ctx.Done()
			return nil, fmt.Errorf("%w: %s: %w", kiln.ErrWarmupTimeout, why, ctx.Err())
		}}
	}
	sb, err := f.start(ctx, spec)
	f.mu.Lock()
	f.counts.Starting--
	if err != nil {
		f.counts.Failed++
		f.counts.FailedAt = append(f.counts.FailedAt, time.Now())
	} else {
		f.started = append(f.started, sb)
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return sb, nil
}

func (f *Fake) start(ctx context.Context, spec sandbox.Spec) (*Sandbox, error) {
	f.mu.Lock()
	f.counts.Starts++
	f.counts.Starting++
	f.counts.MaxStarting = max(f.counts.MaxStarting, f.counts.Starting)
	f.counts.StartedAt = append(f.counts.StartedAt, time.Now())
	f.mu.Unlock()

	if f.Gate != nil {
		select {
		case <-f.Gate:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", kiln.ErrWarmupTimeout, ctx.Err())
		}
	}
	f.mu.Lock()
	failErr := f.failErr
	f.mu.Unlock()
	if failErr != nil {
		return nil, failErr
	}
	if err := f.hasImage(spec.Image); err != nil {
		return nil, err
	}

	sb := f.create(spec)
	fail := func(err error) (*Sandbox, error) {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return nil, errors.Join(err, f.remove(rctx, sb))
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("%w: %w", kiln.ErrWarmupTimeout, err))
	}
	if _, err := sb.Handshake(ctx); err != nil {
		return fail(err)
	}
	return sb, nil
}

// create makes a sandbox and starts its REPL.
func (f *Fake) create(spec sandbox.Spec) *Sandbox {
	langs := f.Languages
	if langs == nil {
		langs = []string{"python", "bash"}
	}
	ready := protocol.Ready{Type: "ready", Protocol: protocol.Version, Python: "fake", Preloaded: map[string]string{},
		Capabilities: protocol.Capabilities{Languages: slices.Clone(langs), State: true, Files: true, Tools: true}}
	handler := f.Handler
	if handler == nil {
		handler = Commands
	}
	frames := f.Frames
	if frames.Header == 0 {
		frames.Header = 1 << 20
	}
	if frames.Binary == 0 {
		frames.Binary = 64 << 20
	}
	log := f.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prefix := f.Prefix
	if prefix == "" {
		prefix = "fake-"
	}

	f.mu.Lock()
	f.made++
	id := prefix + strconv.Itoa(f.made)
	sb := &Sandbox{fake: f, id: id, spec: spec, created: time.Now(), repl: newREPL(handler, ready, f.WarmUp)}
	if f.live == nil {
		f.live = map[string]*Sandbox{}
	}
	f.live[id] = sb
	f.mu.Unlock()
	sb.Conn = sandbox.Open(streams{r: sb.repl, trickle: f.Trickle}, frames, log, id)
	return sb
}

// List returns the sandboxes not yet removed, oldest first: "running" while their REPL
// runs, "exited" after.
func (f *Fake) List(context.Context) ([]sandbox.Found, error) {
	f.mu.Lock()
	live := make([]*Sandbox, 0, len(f.live))
	for _, sb := range f.live {
		live = append(live, sb)
	}
	f.mu.Unlock()
	slices.SortFunc(live, func(a, b *Sandbox) int { return a.created.Compare(b.created) })
	out := make([]sandbox.Found, 0, len(live))
	for _, sb := range live {
		state := "running"
		select {
		case <-sb.repl.exited:
			state = "exited"
		default:
		}
		out = append(out, sandbox.Found{ID: sb.id, State: state, Created: sb.created})
	}
	return out, nil
}

// Remove removes the sandbox with id, as its own Remove does; one already gone is not
// an error.
func (f *Fake) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	sb := f.live[id]
	f.mu.Unlock()
	if sb == nil {
		return nil
	}
	return f.remove(ctx, sb)
}

// RemoveOrphans removes every sandbox not yet removed and says how many it removed.
func (f *Fake) RemoveOrphans(ctx context.Context) (int, error) {
	list, err := f.List(ctx)
	if err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(list))
	for _, found := range list {
		ids = append(ids, found.ID)
	}
	return sandbox.RemoveEach(ctx, ids, f.Remove)
}

// remove takes RemoveDelay (within ctx), kills the REPL, hangs up on it and drops the
// sandbox from the list, unless RemoveErr fails the removal.
func (f *Fake) remove(ctx context.Context, sb *Sandbox) error {
	if f.RemoveDelay > 0 {
		t := time.NewTimer(f.RemoveDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	sb.repl.end(ExitStatus{Code: 137}) // SIGKILL, from outside: not the out-of-memory killer
	sb.Conn.Close()
	if f.RemoveErr != nil {
		return fmt.Errorf("remove %s: %w", sb.id, f.RemoveErr)
	}
	f.mu.Lock()
	if f.live[sb.id] == sb {
		delete(f.live, sb.id)
		f.counts.Removed++
	}
	f.mu.Unlock()
	return nil
}

// Sandbox is one sandbox of a Fake: its REPL, and kiln's real connection to it.
type Sandbox struct {
	*sandbox.Conn

	fake    *Fake
	id      string
	spec    sandbox.Spec
	created time.Time
	repl    *repl

	removeOnce sync.Once
	removeErr  error
	mu         sync.Mutex
	removed    int // Remove calls that have returned
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// ID returns the sandbox's id: the Fake's Prefix and a count.
func (s *Sandbox) ID() string { return s.id }

// Spec returns the spec the sandbox was started from.
func (s *Sandbox) Spec() sandbox.Spec { return s.spec }

// Exit reports how the REPL ended, once it has, within ctx: -1 and ctx's error when it
// has not.
func (s *Sandbox) Exit(ctx context.Context) (code int, oomKilled bool, err error) {
	select {
	case <-s.repl.exited:
		st := s.repl.status
		return st.Code, st.OOMKilled, st.Err
	case <-ctx.Done():
		return -1, false, ctx.Err()
	}
}

// Remove kills and removes the sandbox, once however often it is called; every call
// returns the first one's error.
func (s *Sandbox) Remove(ctx context.Context) error {
	s.removeOnce.Do(func() { s.removeErr = s.fake.remove(ctx, s) })
	s.mu.Lock()
	s.removed++
	s.mu.Unlock()
	return s.removeErr
}

// Removals returns how many calls of Remove have returned: a pool removes each of its
// sandboxes exactly once.
func (s *Sandbox) Removals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removed
}

// Requests returns the exec requests the REPL got, in order.
func (s *Sandbox) Requests() []protocol.Request {
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	return slices.Clone(s.repl.requests)
}

// Interrupts returns how many interrupt frames the REPL got.
func (s *Sandbox) Interrupts() int {
	s.repl.mu.Lock()
	defer s.repl.mu.Unlock()
	return s.repl.interrupts
}

// End ends the REPL by itself, as a crash would, and returns once kiln's side has seen
// it (Done is closed). The sandbox stays until it is removed.
func (s *Sandbox) End(st ExitStatus) {
	s.repl.end(st)
	<-s.Done()
}

// Kill ends the REPL as a SIGKILL from outside does (docker kill): Exit reports 137, not
// the out-of-memory killer. It returns once Done is closed.
func (s *Sandbox) Kill() { s.End(ExitStatus{Code: 137}) }
