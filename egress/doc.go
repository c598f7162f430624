// Package egress owns the way out of a sandbox: the operator's egress policy and the
// HTTP forward proxy that enforces it. A sandbox has no network; its HTTP and HTTPS
// reach the proxy over a channel kiln owns, and the proxy decides every connection on
// names kiln resolved itself, so the code in the sandbox never chooses an address, it
// only asks for a host.
//
// Policy is what the operator allows: host patterns (EGRESS_ALLOW), names mapped ahead
// of DNS (EGRESS_RESOLVE), the special address ranges that may be reached
// (EGRESS_ALLOW_PRIVATE), and per-call caps. Policies overrides it per tenant or key
// from a policy file; a call's Network narrows it and can never widen it. Decisions
// carry a one-line reason meant for the user of the sandbox.
//
// Proxy serves HTTP/1.1 proxy requests on any net.Listener, or one connection at a
// time, each under a Scope: one call's policy, the labels of its caller and session,
// and its caps. HTTPS goes through CONNECT tunnels whose TLS is end to end, after the
// ClientHello's server name is checked against the CONNECT host; plain HTTP is
// forwarded request by request. Every tunnel and request, allowed or refused, ends in
// one audit Record.
//
// The proxy is net/http's server and httputil.ReverseProxy, with the CONNECT tunnel
// written here. github.com/elazarl/goproxy (v1.9.3) was tried first and left: its
// hijack hook drops the bytes the server had already read past a CONNECT (a
// ClientHello sent with it), its accept path splices before anything can read the
// ClientHello, its tunnel goroutines have no owner that Close could wait for, and its
// defaults read HTTPS_PROXY from the environment and skip TLS verification.
//
// The package reads no environment and no files: cmd/ passes it plain values.
package egress
