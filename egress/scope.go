package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Labels say whose traffic a scope carries. They are opaque to the proxy, which only
// copies them into audit records.
type Labels struct {
	Caller  string // who made the call: a tenant, a user, a key
	Session string // the session the call runs in
}

// Scope is one call's egress: the policy it runs under (the operator's, selected for
// its caller and narrowed by its Network), its labels, and its caps, which every
// connection served in the scope shares. Closing the scope cuts what is still open in
// it and refuses anything more, so nothing a call started outlives it.
type Scope struct {
	proxy  *Proxy
	policy Policy
	labels Labels
	ctx    context.Context // done when the scope or the proxy closes
	cancel context.CancelFunc

	conns atomic.Int64 // connections admitted
	bytes atomic.Int64 // payload bytes spent, both ways

	mu        sync.Mutex
	transport *http.Transport // plain HTTP's upstream connections, kept for this scope alone
}

// NewScope returns a scope for one call under policy, labelled for the audit.
func (p *Proxy) NewScope(policy Policy, labels Labels) *Scope {
	ctx, cancel := context.WithCancel(p.ctx)
	return &Scope{proxy: p, policy: policy, labels: labels, ctx: ctx, cancel: cancel}
}

// Policy returns the policy the scope enforces.
func (s *Scope) Policy() Policy { return s.policy }

// Close ends the scope: its tunnels and requests in flight are cut, its idle upstream
// connections closed, and later requests in it refused. It is idempotent.
func (s *Scope) Close() error {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// admit counts one more connection against the cap, or refuses it.
func (s *Scope) admit() Decision {
	if s.ctx.Err() != nil {
		return denied(CodeEnded, "this call has ended")
	}
	if s.bytes.Load() >= s.policy.limits.MaxBytes {
		return s.bytesSpent()
	}
	if s.conns.Add(1) > int64(s.policy.limits.MaxConnections) {
		s.conns.Add(-1)
		return denied(CodeConnections, "this call's connection cap (%d) is spent", s.policy.limits.MaxConnections)
	}
	return allowed
}

func (s *Scope) bytesSpent() Decision {
	return denied(CodeBytes, "this call's byte cap (%d bytes) is spent", s.policy.limits.MaxBytes)
}

// errBytesCap is how a metered stream stops when the scope's byte cap is spent.
var errBytesCap = errors.New("byte cap spent")

// spend takes n bytes from the scope's budget and returns how many of them may pass:
// all of them, or what was left when the cap is reached.
func (s *Scope) spend(n int) (int, bool) {
	total := s.bytes.Add(int64(n))
	over := total - s.policy.limits.MaxBytes
	if over <= 0 {
		return n, true
	}
	return n - int(min(over, int64(n))), false
}

// httpTransport returns the scope's transport for plain HTTP, made on first use. Its
// connections are the scope's alone: a connection dialled under another call's policy
// is never reused here.
func (s *Scope) httpTransport() *http.Transport {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.transport == nil {
		p := s.proxy
		s.transport = &http.Transport{
			Proxy: nil, // never the environment's proxy
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return p.dialTarget(ctx, s, addr)
			},
			DisableCompression:     true, // bodies pass as the upstream sent them
			MaxIdleConnsPerHost:    4,
			IdleConnTimeout:        p.opts.IdleTimeout,
			MaxResponseHeaderBytes: maxHeaderBytes,
		}
	}
	return s.transport
}

// refusal is a Decision carried as an error, from a dial inside the HTTP transport
// back to the handler that answers the client.
type refusal struct{ Decision }

func (r *refusal) Error() string { return r.Reason }

// dialTarget is the plain HTTP transport's dial: addr is the request URL's host and port.
func (p *Proxy) dialTarget(ctx context.Context, s *Scope, target string) (net.Conn, error) {
	h, port, err := splitHostPort(target)
	if err != nil {
		return nil, &refusal{Decision{CodeMalformed, fmt.Sprintf("egress: %s: %v", target, err)}}
	}
	c, addr, d := p.open(ctx, s.policy, h, port)
	if !d.Allowed() {
		return nil, &refusal{d}
	}
	return &dialedConn{Conn: c, addr: addr}, nil
}
