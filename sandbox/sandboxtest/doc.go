// Package sandboxtest serves the tests of everything that runs on sandboxes, as
// store/storetest serves the stores. It owns two things:
//
//   - Fake, a sandbox.Runtime that runs each sandbox's REPL as goroutines in the test
//     process, joined to kiln's side by pipes. kiln's side is the real sandbox.Conn, so
//     framing, the frame queue and the hello/ready handshake run exactly as on Docker;
//     the fake REPL speaks the real protocol (ready, pong, events, results, interrupts,
//     tool results), and runs each request through a Handler: by default Commands, a
//     tiny command language, or one a test writes. Knobs give a pool's tests what they
//     need of a runtime: starts held at a gate, or failing; removals that take a while, or
//     fail; sandboxes that die by themselves; counts of all of it.
//   - Run, the contract test suite every sandbox.Runtime must pass, written once and run
//     against the Fake, against Docker (runc and gVisor) and against Kubernetes
//     (test/runtime), each with the code of its own REPL (Harness, Code).
package sandboxtest
