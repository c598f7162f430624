// Package sandbox is the boundary between kiln and the runtimes that run its sandboxes.
// It holds the contract every runtime meets (Runtime, which makes and removes sandboxes,
// and Sandbox, one running REPL kiln talks to), the runtime-neutral Spec of a sandbox (its
// image, limits, environment and how its REPL starts), and what every runtime shares: the
// connection to a REPL over a pair of byte streams (Conn), which owns the framing, the
// queue of frames waiting for the executor, the hello/ready handshake and the decoding.
//
// A runtime (package docker, package kube) owns only what is its own: a sandbox's
// lifecycle (create, start, how it exited, remove) and the byte streams of its REPL.
// Everything above this package (pool, executor, live, session, api, mcp) knows sandboxes
// through these types alone and never which runtime made them.
package sandbox
