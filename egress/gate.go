package egress

import (
	"net"
	"sync/atomic"
)

// Gate is kiln's egress as a call sees it: the proxy, the environment's policy, and the
// policy file's overrides, which SetPolicies replaces while kiln runs. It picks each
// call's policy and opens its scope.
type Gate struct {
	proxy *Proxy
	base  Policy
	file  atomic.Pointer[Policies]
}

// NewGate returns a gate that serves calls on p under base, overridden per tenant or key
// by file (nil for none).
func NewGate(p *Proxy, base Policy, file *Policies) *Gate {
	g := &Gate{proxy: p, base: base}
	g.file.Store(file)
	return g
}

// Close closes the gate's proxy (Proxy.Close): every call's connections are cut, and
// Close waits for their handlers.
func (g *Gate) Close() error { return g.proxy.Close() }

// SetPolicies replaces the policy file's overrides (nil for none): calls opened from now
// on get them, calls under way keep theirs.
func (g *Gate) SetPolicies(file *Policies) { g.file.Store(file) }

// Call is who makes a call and what it asked for.
type Call struct {
	Tenant  string // the tenant of a signed token; empty for an API key's caller
	Key     string // the fingerprint of the caller's API key, as the policy file names it
	Caller  string // for the audit: who made the call
	Session string
	Network *Network // the request's field; nil keeps the policy as it is
}

// Open returns how one call's connections are served, and the function that ends its
// scope once the call is over (cutting what is still open). A malformed Network is an
// error naming the field.
func (g *Gate) Open(c Call) (serve func(net.Conn), end func(), err error) {
	scope, err := g.scope(c)
	if err != nil {
		return nil, nil, err
	}
	serve = func(conn net.Conn) { _ = g.proxy.ServeConn(conn, scope) }
	return serve, func() { _ = scope.Close() }, nil
}

// scope opens the scope of call c under its policy.
func (g *Gate) scope(c Call) (*Scope, error) {
	policy, err := g.file.Load().Select(g.base, c.Tenant, c.Key).Narrow(c.Network)
	if err != nil {
		return nil, err
	}
	return g.proxy.NewScope(policy, Labels{Caller: c.Caller, Session: c.Session}), nil
}
