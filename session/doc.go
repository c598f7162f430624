// Package session is kiln's stateful layer, between the front ends (REST, MCP, Jupyter)
// and the executor. It owns sessions (session.go): who may see one (Caller, Scope), their
// state blobs (state.go) and files (files.go, manage.go), and the storage quota
// (quota.go).
//
// A call (Exec, exec.go) lives through its stages in order, each in its own file: choose
// finds the session it continues and waits for the session's turn (turns.go: one call of
// a session at a time, in order); bind picks the sandbox, the session's live sandbox when
// it has one (live.Registry); load gathers its state, files and egress scope; run runs
// it; keep stores what it produced and makes the answer; settle keeps its sandbox for the
// next call or ends it. events.go hears the run as it goes, outputs.go decodes its rich
// outputs.
//
// A call in a live sandbox may answer before its state is captured (StateSaveDelay):
// the capture follows in the session's turn (flush.go), and the captures wait in memory
// for their store (pending.go), so an answered call's names survive its sandbox's death.
package session
