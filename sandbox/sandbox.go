package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/kilnsh/kiln/protocol"
)

// Sandbox is one running sandbox and the REPL in it, whichever runtime made it. It serves
// one caller at a time: one request, or one live session's requests, then it is removed.
type Sandbox interface {
	// ID names the sandbox in logs, metrics and the health routes, as its runtime knows
	// it (a container's short id, a Pod's name).
	ID() string
	// Ready returns the handshake the REPL sent: its versions and capabilities.
	Ready() protocol.Ready
	// Send writes one frame to the REPL: a request, then maybe an interrupt. When ctx ends
	// first, Send returns its error and the sandbox must be removed; kiln.ErrSandboxExited
	// means the REPL is gone.
	Send(ctx context.Context, frame net.Buffers) error
	// Receive returns the next frame the REPL sent: an event of the running request, or
	// its result. kiln.ErrSandboxExited means the REPL ended first (Exit says how).
	Receive(ctx context.Context) (protocol.Frame, error)
	// Exit reports how a REPL whose stream ended exited: its exit code (-1 when unknown)
	// and whether the kernel's out-of-memory killer struck. It waits within ctx.
	Exit(ctx context.Context) (code int, oomKilled bool, err error)
	// Egress routes the connections the code opens out of the sandbox (through the REPL's
	// proxy port, over its channel) to serve, each in a goroutine of its own, for the
	// request about to be sent; nil refuses them, and a change cuts those still open.
	Egress(serve func(net.Conn))
	// Done is closed when the sandbox has died: its REPL ended, or its stream broke.
	Done() <-chan struct{}
	// Remove kills and removes the sandbox. It is idempotent, and must be given a context
	// of its own, never a request's.
	Remove(ctx context.Context) error
}

// Resizer is a Sandbox whose CPU and memory limits can change while it runs (Docker
// updates a running container's): a call that asks for other resources than the pool's
// gets its warm sandbox adjusted, not rebuilt. Only a runtime whose Traits say it
// Resizes has sandboxes whose Resize works.
type Resizer interface {
	// Limits are the sandbox's limits now: CPU in thousandths of a core, memory in MB.
	Limits() (milliCPU, memoryMB int64)
	// Resize sets them; on an error they are as they were, or the sandbox is unusable.
	Resize(ctx context.Context, milliCPU, memoryMB int64) error
}

// ErrImageMissing is what ImageID's error wraps when the runtime can tell that the image
// is not there (yet).
var ErrImageMissing = errors.New("sandbox image not found")

// Runtime makes sandboxes and removes them: the Docker daemon, a Kubernetes cluster, or
// a fake in tests. Every sandbox it makes carries the owning instance's id, so that a
// runtime lists and sweeps only its own instance's.
type Runtime interface {
	// Name is the runtime's name in logs and in /health/detailed ("docker", "kubernetes").
	Name() string
	// Traits say what its sandboxes are, as it was opened.
	Traits() Traits
	// Ping checks that the runtime answers; its error says what to check.
	Ping(ctx context.Context) error
	// ImageID returns the id of a sandbox image, or an error saying how to get it; a
	// runtime that cannot tell (a cluster pulls on each node) returns the image's name.
	ImageID(ctx context.Context, image string) (string, error)
	// Start makes a sandbox from spec and returns it once its REPL has said it is ready.
	// ctx bounds the whole warm-up; on failure nothing is left behind.
	Start(ctx context.Context, spec Spec) (Sandbox, error)
	// List returns this instance's sandboxes, of every state.
	List(ctx context.Context) ([]Found, error)
	// Remove removes this instance's sandbox with that id; one already gone is not an error.
	Remove(ctx context.Context, id string) error
	// RemoveOrphans removes every sandbox of this instance and says how many it removed:
	// at start the leftovers of an earlier process of the instance, at shutdown those of
	// failed removals.
	RemoveOrphans(ctx context.Context) (int, error)
	// Close releases the runtime's connections.
	Close() error
}

// Traits are what a runtime's sandboxes are, for the layers above that adapt to them:
// the executor and the session layer (Resizes), the log and /health/detailed
// (Isolation).
type Traits struct {
	// Isolation names what isolates the sandboxes from the host and from each other: the
	// OCI runtime (runc, runsc) or the Pods' RuntimeClass ("default" for the cluster's).
	Isolation string
	// Resizes says a running sandbox's CPU and memory limits change in place: a call that
	// asks for other limits than a warm or live sandbox has gets that sandbox adjusted.
	// Without it, such a call gets a sandbox started at its size, and a live sandbox
	// serves only the calls of its own.
	Resizes bool
}

// Found is a sandbox of this instance as its runtime lists it.
type Found struct {
	ID      string // as the sandbox's ID gives it
	State   string // the runtime's word for it, for the log
	Created time.Time
}

// Options are what every runtime is opened with, whatever else it needs of its own.
type Options struct {
	// Instance is the owning kiln instance: its sandboxes carry it, and only those are
	// listed and swept.
	Instance string
	// Frames bound one frame from a sandbox.
	Frames FrameLimits
	Log    *slog.Logger // nil discards the runtime's log
}

// NoRoomError is what a runtime's Start returns when nothing has room for the sandbox
// yet (no node of a cluster can take its Pod), where the runtime cannot see its room
// beforehand. The sandbox keeps its place: Wait goes on waiting for it until it is ready
// or ctx ends, and cleans up after itself as Start does. Whoever gets a NoRoomError must
// call Wait; the pool first asks for room (an idle live session gives up its sandbox).
type NoRoomError struct {
	Why  string // the runtime's reason, for the log
	Wait func(ctx context.Context) (Sandbox, error)
}

func (e *NoRoomError) Error() string { return "no room for a sandbox yet: " + e.Why }

// FrameLimits bound one protocol frame from a sandbox: its JSON header, and its raw
// payloads (the state and the files).
type FrameLimits struct {
	Header int
	Binary int64
}

// Started returns a sandbox a runtime has just started as a Sandbox: nil, not a nil
// pointer in an interface, when starting it failed. A runtime's Start is
// sandbox.Started(its typed start).
func Started[S Sandbox](sb S, err error) (Sandbox, error) {
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// RemoveEach removes the sandboxes with ids one by one, as a runtime's RemoveOrphans does,
// and says how many it removed; the others' errors are joined.
func RemoveEach(ctx context.Context, ids []string, remove func(ctx context.Context, id string) error) (int, error) {
	var errs []error
	n := 0
	for _, id := range ids {
		if err := remove(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
