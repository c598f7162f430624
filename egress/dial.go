package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
)

// maxAddrs bounds the addresses of one name the proxy checks and tries.
const maxAddrs = 8

// splitHostPort reads a request's host:port and normalises the host.
func splitHostPort(s string) (Host, uint16, error) {
	hostText, portText, err := net.SplitHostPort(s)
	if err != nil {
		return Host{}, 0, errors.New("want host:port")
	}
	port, err := parsePort(portText)
	if err != nil {
		return Host{}, 0, err
	}
	h, err := ParseHost(hostText)
	if err != nil {
		return Host{}, 0, err
	}
	return h, port, nil
}

// open decides a connection to h on port under policy and, when it is allowed, dials
// it: the host is checked against the allow list, then resolved by kiln (an address
// as itself, a mapped name through EGRESS_RESOLVE, any other through the resolver),
// then every address is checked, and only then is one dialled. Nothing is dialled
// unless all of that allows it.
func (p *Proxy) open(ctx context.Context, policy Policy, h Host, port uint16) (net.Conn, netip.AddrPort, Decision) {
	if d := policy.CheckHost(h, port); !d.Allowed() {
		return nil, netip.AddrPort{}, d
	}
	addrs, d := p.resolve(ctx, policy, h)
	if !d.Allowed() {
		return nil, netip.AddrPort{}, d
	}
	// Every address must pass, not only the one dialled: a name that answers with a
	// public address and a private one is a rebinding attempt, not a choice.
	for _, a := range addrs {
		if d := policy.CheckAddr(h, a); !d.Allowed() {
			return nil, netip.AddrPort{}, d
		}
	}
	var last error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		dctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
		c, err := p.opts.Dialer.DialContext(dctx, "tcp", ap.String())
		cancel()
		if err == nil {
			return c, ap, allowed
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, Decision{CodeDial, fmt.Sprintf("egress: cannot reach %s: %s", hostPort(h, port), dialFailure(last))}
}

// resolve returns the addresses kiln itself gives h, at most maxAddrs of them.
func (p *Proxy) resolve(ctx context.Context, policy Policy, h Host) ([]netip.Addr, Decision) {
	if h.Addr.IsValid() {
		return []netip.Addr{h.Addr}, allowed
	}
	if addrs, ok := policy.mapped(h.Name); ok {
		return addrs, allowed
	}
	lctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	addrs, err := p.opts.Resolver.LookupNetIP(lctx, "ip", h.Name)
	if err != nil || len(addrs) == 0 {
		return nil, Decision{CodeResolve, fmt.Sprintf("egress: cannot resolve %s", h.Name)}
	}
	if len(addrs) > maxAddrs {
		addrs = addrs[:maxAddrs]
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, allowed
}

// dialFailure names why a dial failed in words the user can act on, without the
// detail of kiln's own network.
func dialFailure(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "no route"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "connection failed"
}
