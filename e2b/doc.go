// Package e2b serves E2B's SDKs (npm e2b, Python e2b) on kiln: the control plane that
// creates, finds, extends and kills the sandboxes a caller holds (/sandboxes,
// /v2/sandboxes), and, for requests that name a sandbox in E2B's headers
// (E2b-Sandbox-Id, E2b-Sandbox-Port), the sandbox's own agent as E2B's envd speaks it:
// the process and filesystem services over the Connect protocol, /files and /health.
//
// A held sandbox is a warm kiln sandbox (session.Service.Hold) bound to its caller until
// its timeout, which the caller sets and extends. envd's calls are carried to the
// sandbox's REPL as agent calls (protocol.OpAgent) on its existing channel: the sandbox
// still has no network interface. docs/e2b.md says what is and is not supported.
package e2b
