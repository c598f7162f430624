package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/sandbox"
)

// HoldPool is where held sandboxes come from: the warm pools (pool.Set).
type HoldPool interface {
	Checkout(ctx context.Context, lang string) (sandbox.Sandbox, error)
	Keep(sandbox.Sandbox)
	Release(sandbox.Sandbox)
}

// agentSandbox is a sandbox whose REPL answers agent calls (sandbox.Conn's Agent): every
// runtime's but the REPL-per-call wrapper's.
type agentSandbox interface {
	Agent(ctx context.Context, method string, args any, data []byte) (*sandbox.AgentStream, error)
}

// Held is a sandbox bound to one caller for a lifetime its front end keeps (an E2B
// sandbox): taken warm from a pool, never lent to a call of any session, removed by
// Release. Its code reaches out only through the caller's egress scope, held as long.
type Held struct {
	sb      sandbox.Sandbox
	agent   agentSandbox
	release func()
	once    sync.Once
}

// HoldRequest is what a front end asks of a held sandbox: the language its pool must
// run, and how its egress narrows the operator's policy (nil keeps it).
type HoldRequest struct {
	Lang    string
	Network *egress.Network
	// Name names the sandbox in the egress audit, as a session id does.
	Name string
}

// Hold takes a warm sandbox for the caller. The front end counts and ends it; a caller's
// held sandboxes are not sessions and take no execution slot.
func (s *Service) Hold(ctx context.Context, c Caller, req HoldRequest) (*Held, error) {
	if s.hold == nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "this kiln holds no sandboxes for its callers")
	}
	var serve func(net.Conn)
	end := func() {}
	if s.egress != nil {
		srv, stop, err := s.egress.Open(egressCall(c, req.Name, req.Network))
		if err != nil {
			return nil, kiln.Errorf(kiln.CodeInvalid, "%v", err)
		}
		serve, end = srv, stop
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, HoldTimeout)
		defer cancel()
	}
	sb, err := s.hold.Checkout(kiln.WithCaller(ctx, c.Principal()), req.Lang)
	if err != nil {
		end()
		return nil, err
	}
	s.hold.Keep(sb)
	agent, ok := sb.(agentSandbox)
	if !ok || !sb.Ready().Capabilities.Agent {
		s.hold.Release(sb)
		end()
		return nil, kiln.Errorf(kiln.CodeUnavailable, "this kiln's sandboxes cannot be held: they run a REPL per call (REPL_ENABLED=false) or an image without the agent")
	}
	sb.Egress(serve)
	return &Held{sb: sb, agent: agent, release: func() {
		sb.Egress(nil)
		end()
		s.hold.Release(sb)
	}}, nil
}

// ID is the runtime's name of the sandbox, for logs.
func (h *Held) ID() string { return h.sb.ID() }

// Done is closed when the sandbox has died.
func (h *Held) Done() <-chan struct{} { return h.sb.Done() }

// Agent sends one agent call (sandbox.Conn.Agent) to the sandbox's REPL.
func (h *Held) Agent(ctx context.Context, method string, args any, data []byte) (*sandbox.AgentStream, error) {
	st, err := h.agent.Agent(ctx, method, args, data)
	if errors.Is(err, kiln.ErrSandboxExited) {
		return nil, fmt.Errorf("%w: the sandbox has ended", err)
	}
	return st, err
}

// Release removes the sandbox and ends its egress scope; it is idempotent.
func (h *Held) Release() { h.once.Do(h.release) }

// HoldTimeout bounds a checkout for a held sandbox when its context has no deadline.
const HoldTimeout = 30 * time.Second
