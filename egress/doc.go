// Package egress owns the way out of a sandbox: the operator's egress policy, and
// (to come) the HTTP forward proxy that enforces it. A sandbox has no network; its HTTP and HTTPS
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
// The package reads no environment and no files: cmd/ passes it plain values.
package egress
