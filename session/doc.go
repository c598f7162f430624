// Package session is kiln's stateful layer, between the HTTP API and the executor: it
// picks the session an execution belongs to, loads and saves its state blob, moves its
// files into and out of the sandbox, and enforces who may see what. Sessions, state and
// files live in a store.Store; executions run through a Runner.
package session
