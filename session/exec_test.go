package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/store"
)

func TestExecChoosesSession(t *testing.T) {
	const agent = "agent-1"
	caller := aliceU1
	tests := []struct {
		name string
		// setup returns the request and the id of the session it must use; "" means
		// a new one.
		setup func(t *testing.T, e *testEnv) (ExecRequest, string)
	}{
		{"session_id wins over the file's session and the latest", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			a := e.session(t, caller, agent)
			b := e.session(t, caller, agent)
			e.touch(t, b.ID, time.Minute)
			f := e.file(t, b.ID, "in.txt", "x")
			req := execReq()
			req.SessionID, req.EntityID = a.ID, agent
			req.Files = []FileRef{{ID: f.ID, SessionID: b.ID}}
			return req, a.ID
		}},
		{"the first file's session wins over the latest", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			a := e.session(t, caller, agent)
			b := e.session(t, caller, agent)
			e.touch(t, b.ID, time.Minute)
			f := e.file(t, a.ID, "in.txt", "x")
			g := e.file(t, b.ID, "other.txt", "y")
			req := execReq()
			req.SessionID, req.EntityID = kiln.NewID(), agent
			req.Files = []FileRef{{ID: f.ID, SessionID: a.ID}, {ID: g.ID, SessionID: b.ID}}
			return req, a.ID
		}},
		{"the caller's latest session for the entity", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, caller, agent)
			b := e.session(t, caller, agent)
			e.touch(t, b.ID, time.Minute)
			e.session(t, caller, "agent-2")
			req := execReq()
			req.EntityID = agent
			return req, b.ID
		}},
		{"a foreign session_id falls through to the latest", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			foreign := e.session(t, bob, agent)
			a := e.session(t, caller, agent)
			req := execReq()
			req.SessionID, req.EntityID = foreign.ID, agent
			return req, a.ID
		}},
		{"an expired session_id falls through to the file's session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			old := e.expiredSession(t, caller, agent)
			a := e.session(t, caller, "")
			f := e.file(t, a.ID, "in.txt", "x")
			req := execReq()
			req.SessionID = old.ID
			req.Files = []FileRef{{ID: f.ID, SessionID: a.ID}}
			return req, a.ID
		}},
		{"an unknown session_id starts a new session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, caller, "")
			req := execReq()
			req.SessionID = kiln.NewID()
			return req, ""
		}},
		{"a malformed session_id starts a new session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			req := execReq()
			req.SessionID = "../not-an-id"
			return req, ""
		}},
		{"another key's session_id starts a new session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			foreign := e.session(t, bob, agent)
			req := execReq()
			req.SessionID, req.EntityID = foreign.ID, agent
			return req, ""
		}},
		{"another user's session_id starts a new session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			foreign := e.session(t, aliceU2, agent)
			req := execReq()
			req.SessionID, req.EntityID = foreign.ID, agent
			return req, ""
		}},
		{"an expired session_id starts a new session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			old := e.expiredSession(t, caller, "")
			req := execReq()
			req.SessionID = old.ID
			return req, ""
		}},
		{"an expired latest session is skipped", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.expiredSession(t, caller, agent)
			req := execReq()
			req.EntityID = agent
			return req, ""
		}},
		{"another key's latest session is skipped", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, Caller{Key: "key-b", User: caller.User}, agent)
			req := execReq()
			req.EntityID = agent
			return req, ""
		}},
		{"another user's latest session is skipped", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, aliceU2, agent)
			req := execReq()
			req.EntityID = agent
			return req, ""
		}},
		{"another entity's session is skipped", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, caller, "agent-2")
			req := execReq()
			req.EntityID = agent
			return req, ""
		}},
		{"a runtime hint continues the caller's session that carries it, not the file's", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			rt := e.session(t, caller, runtimeEntity("v2:conversation:1f0c"))
			a := e.session(t, caller, "")
			e.touch(t, a.ID, time.Minute)
			f := e.file(t, a.ID, "in.txt", "x")
			req := execReq()
			req.RuntimeHint = "v2:conversation:1f0c"
			req.Files = []FileRef{{ID: f.ID, SessionID: a.ID}}
			return req, rt.ID
		}},
		{"session_id wins over the runtime hint", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, caller, runtimeEntity("conv"))
			a := e.session(t, caller, "")
			req := execReq()
			req.SessionID, req.RuntimeHint = a.ID, "conv"
			return req, a.ID
		}},
		{"a runtime hint with no session of its own starts one, whatever the files", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			a := e.session(t, caller, "")
			f := e.file(t, a.ID, "in.txt", "x")
			req := execReq()
			req.RuntimeHint = "conv-new"
			req.Files = []FileRef{{ID: f.ID, SessionID: a.ID}}
			return req, ""
		}},
		{"another user's session of the same runtime hint is skipped", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, aliceU2, runtimeEntity("conv"))
			req := execReq()
			req.RuntimeHint = "conv"
			return req, ""
		}},
		{"a resource's session is never continued", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			skill := e.session(t, caller.In(Scope{Kind: KindSkill, ID: "pptx", Version: 3}), "")
			req := execReq()
			req.SessionID = skill.ID
			return req, ""
		}},
		{"no hint starts a new session", func(t *testing.T, e *testEnv) (ExecRequest, string) {
			e.session(t, caller, "")
			return execReq(), ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			req, want := tt.setup(t, e)
			before := e.sessionIDs(t)

			res, err := e.svc.Exec(t.Context(), caller, req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			e.run.only(t)
			got := res.Session.ID
			if want != "" {
				if got != want {
					t.Errorf("session = %s, want %s", got, want)
				}
				if n := len(e.sessionIDs(t)); n != len(before) {
					t.Errorf("%d sessions after the run, want %d (no new one)", n, len(before))
				}
				return
			}
			if slices.Contains(before, got) {
				t.Errorf("session = %s, an existing one; want a new session", got)
			}
			if !kiln.ValidID(got) {
				t.Errorf("new session id %q is not a kiln id", got)
			}
			if res.Session.Owner != caller.owner() {
				t.Errorf("new session owner = %q, want %q", res.Session.Owner, caller.owner())
			}
			entity := req.EntityID
			if req.RuntimeHint != "" {
				entity = runtimeEntity(req.RuntimeHint)
			}
			if res.Session.EntityID != entity {
				t.Errorf("new session entity = %q, want %q", res.Session.EntityID, entity)
			}
		})
	}
}

// A run records the session's last use, which extends its expiry, unless the last
// one is under a minute old: rewriting the session to move it by seconds would cost a
// synced write on every run.
func TestExecRecordsLastUse(t *testing.T) {
	for _, tt := range []struct {
		name  string
		after time.Duration // since the session's last use
		moved bool
	}{
		{"ten minutes later: recorded", 10 * time.Minute, true},
		{"half a minute later: left", touchEvery / 2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			sess := e.session(t, alice, "")
			at := sess.LastUsedAt.Add(tt.after)
			e.svc.now = func() time.Time { return at }
			req := execReq()
			req.SessionID = sess.ID

			res, err := e.svc.Exec(t.Context(), alice, req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			want := sess.LastUsedAt
			if tt.moved {
				want = at
			}
			if !res.Session.LastUsedAt.Equal(want) {
				t.Errorf("LastUsedAt = %v, want %v", res.Session.LastUsedAt, want)
			}
			if want := want.Add(testTTL); !res.Session.ExpiresAt.Equal(want) {
				t.Errorf("ExpiresAt = %v, want %v", res.Session.ExpiresAt, want)
			}
		})
	}
}

func TestExecRefusedRequestLeavesNoSession(t *testing.T) {
	tests := []struct {
		name string
		req  func(t *testing.T, e *testEnv) ExecRequest
		want kiln.Code
	}{
		{"empty code", func(t *testing.T, e *testEnv) ExecRequest {
			req := execReq()
			req.Code = "  \n"
			req.SessionID, req.EntityID = kiln.NewID(), "agent"
			return req
		}, kiln.CodeInvalid},
		{"empty code, stateless", func(t *testing.T, e *testEnv) ExecRequest {
			req := execReq()
			req.Code, req.Stateless = "", true
			return req
		}, kiln.CodeInvalid},
		{"another key's file", func(t *testing.T, e *testEnv) ExecRequest {
			foreign := e.session(t, bob, "")
			f := e.file(t, foreign.ID, "secret.txt", "s")
			req := execReq()
			req.Files = []FileRef{{ID: f.ID, SessionID: foreign.ID}}
			return req
		}, kiln.CodeForbidden},
		{"another key's file, stateless", func(t *testing.T, e *testEnv) ExecRequest {
			foreign := e.session(t, bob, "")
			f := e.file(t, foreign.ID, "secret.txt", "s")
			req := execReq()
			req.Stateless = true
			req.Files = []FileRef{{ID: f.ID, SessionID: foreign.ID}}
			return req
		}, kiln.CodeForbidden},
		{"another user's file", func(t *testing.T, e *testEnv) ExecRequest {
			foreign := e.session(t, aliceU2, "")
			f := e.file(t, foreign.ID, "secret.txt", "s")
			req := execReq()
			req.Files = []FileRef{{ID: f.ID, SessionID: foreign.ID}}
			return req
		}, kiln.CodeForbidden},
		{"a file of an expired session", func(t *testing.T, e *testEnv) ExecRequest {
			old := e.expiredSession(t, aliceU1, "")
			f := e.file(t, old.ID, "old.txt", "o")
			req := execReq()
			req.Files = []FileRef{{ID: f.ID, SessionID: old.ID}}
			return req
		}, kiln.CodeForbidden},
		{"a missing file", func(t *testing.T, e *testEnv) ExecRequest {
			own := e.session(t, aliceU1, "")
			req := execReq()
			req.Files = []FileRef{{ID: kiln.NewID(), SessionID: own.ID}}
			return req
		}, kiln.CodeForbidden},
		{"a missing second file", func(t *testing.T, e *testEnv) ExecRequest {
			own := e.session(t, aliceU1, "")
			f := e.file(t, own.ID, "a.txt", "a")
			req := execReq()
			req.Files = []FileRef{{ID: f.ID, SessionID: own.ID}, {ID: kiln.NewID(), SessionID: own.ID}}
			return req
		}, kiln.CodeForbidden},
		{"a file of another of the caller's sessions, named in the wrong one", func(t *testing.T, e *testEnv) ExecRequest {
			a := e.session(t, aliceU1, "")
			b := e.session(t, aliceU1, "")
			f := e.file(t, b.ID, "b.txt", "b")
			req := execReq()
			req.Files = []FileRef{{ID: f.ID, SessionID: a.ID}}
			return req
		}, kiln.CodeForbidden},
		{"a file without a session and no session", func(t *testing.T, e *testEnv) ExecRequest {
			own := e.session(t, aliceU1, "")
			f := e.file(t, own.ID, "a.txt", "a")
			req := execReq()
			req.Files = []FileRef{{ID: f.ID}}
			return req
		}, kiln.CodeForbidden},
		{"more files named than a session holds", func(t *testing.T, e *testEnv) ExecRequest {
			own := e.session(t, aliceU1, "")
			req := execReq()
			for range testLimits.MaxFilesPerSession + 1 {
				f := e.file(t, own.ID, "a.txt", "a")
				req.Files = append(req.Files, FileRef{ID: f.ID, SessionID: own.ID})
			}
			req.SessionID = kiln.NewID()
			return req
		}, kiln.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			req := tt.req(t, e)
			before := e.sessionIDs(t)

			res, err := e.svc.Exec(t.Context(), aliceU1, req)
			if res != nil {
				t.Errorf("result = %+v, want nil", res)
			}
			wantCode(t, err, tt.want)
			if got := e.sessionIDs(t); !slices.Equal(got, before) {
				t.Errorf("sessions after = %v, want %v (none created)", got, before)
			}
			if n := len(e.run.calls()); n != 0 {
				t.Errorf("runner called %d times, want 0", n)
			}
		})
	}
}

func TestExecRunnerError(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	e.putState(t, sess.ID, "S1")
	busy := &kiln.Error{Code: kiln.CodeUnavailable, Message: "busy", RetryAfter: 3}
	e.run.err = busy
	req := execReq()
	req.SessionID = sess.ID

	_, err := e.svc.Exec(t.Context(), alice, req)
	if err != busy {
		t.Fatalf("error = %v, want the runner's %v", err, busy)
	}
	if got := e.state(t, sess.ID); string(got) != "S1" {
		t.Errorf("state after a failed run = %q, want %q", got, "S1")
	}
}

func TestExecState(t *testing.T) {
	tests := []struct {
		name      string
		stored    string // the session's state before; "" for none
		noCapture bool
		runState  string // what the run hands back; "" for nil
		wantSent  string // what the runner must get; "" for nil
		wantAfter string // the session's state after; "" for none
		wantPuts  int
	}{
		{"restored and saved", "S1", false, "S2", "S1", "S2", 1},
		{"first state saved", "", false, "S2", "", "S2", 1},
		{"unchanged state not written", "S1", false, "S1", "S1", "S1", 0},
		{"no state and no note: the namespace is empty now", "S1", false, "", "S1", "", 0},
		{"capture_state false restores but does not save", "S1", true, "S2", "S1", "S1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			sess := e.session(t, alice, "")
			if tt.stored != "" {
				e.putState(t, sess.ID, tt.stored)
			}
			if tt.runState != "" {
				e.run.result.State = []byte(tt.runState)
			}
			e.run.result.StateFromRun = true
			req := execReq()
			req.SessionID = sess.ID
			req.CaptureState = !tt.noCapture

			res, err := e.svc.Exec(t.Context(), alice, req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if got := e.run.only(t).State; !bytes.Equal(got, bytesOrNil(tt.wantSent)) {
				t.Errorf("runner got state %q, want %q", got, tt.wantSent)
			}
			if got := e.state(t, sess.ID); !bytes.Equal(got, bytesOrNil(tt.wantAfter)) {
				t.Errorf("stored state = %q, want %q", got, tt.wantAfter)
			}
			if got := e.st.puts(); got != tt.wantPuts {
				t.Errorf("state writes = %d, want %d", got, tt.wantPuts)
			}
			if got, want := res.Session.HasState, tt.wantAfter != ""; got != want {
				t.Errorf("result session HasState = %v, want %v", got, want)
			}
		})
	}
}

// A run whose sandbox ended before it could say (the state handed back is the one it
// was given, with a note) leaves the old state; a run that answered with no state,
// whatever its notes, leaves none: never an older one.
func TestExecStateNotes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		fromRun   bool
		wantAfter string
	}{
		{"the sandbox ended: the state before the call", false, "S1"},
		{"the run kept nothing: no state", true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, testLimits)
			sess := e.session(t, alice, "")
			e.putState(t, sess.ID, "S1")
			note := "not kept (unpicklable): gen (generator)"
			e.run.result.StateError = &note
			e.run.result.StateFromRun = tt.fromRun
			if !tt.fromRun {
				e.run.result.State = []byte("S1") // what the executor hands back: the state it was given
			}
			req := execReq()
			req.SessionID = sess.ID
			req.CaptureState = true
			res, err := e.svc.Exec(t.Context(), alice, req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if got := e.state(t, sess.ID); string(got) != tt.wantAfter {
				t.Errorf("stored state = %q, want %q", got, tt.wantAfter)
			}
			if got, want := res.Session.HasState, tt.wantAfter != ""; got != want {
				t.Errorf("result session HasState = %v, want %v", got, want)
			}
		})
	}
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func TestExecStateless(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "agent")
	e.putState(t, sess.ID, "SESSION")
	e.file(t, sess.ID, "old.txt", "old")
	e.run.result.State = []byte("NEW")
	e.run.result.Files = []protocol.File{{Path: "made.txt", Content: []byte("m")}}
	req := execReq()
	req.Stateless = true
	req.State = []byte("CLIENT")
	req.EntityID = "agent"

	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	sent := e.run.only(t)
	if string(sent.State) != "CLIENT" {
		t.Errorf("runner got state %q, want the client's %q", sent.State, "CLIENT")
	}
	if len(sent.Files) != 0 {
		t.Errorf("runner got files %v, want none", sent.Files)
	}
	if string(res.State) != "NEW" {
		t.Errorf("result state = %q, want %q", res.State, "NEW")
	}
	if res.Session.ID == sess.ID {
		t.Fatalf("stateless run used the entity's session %s, want a fresh one", sess.ID)
	}
	if res.Session.HasState || e.state(t, res.Session.ID) != nil {
		t.Errorf("the fresh session has state, want none")
	}
	if got := e.st.puts(); got != 0 {
		t.Errorf("state writes = %d, want 0", got)
	}
	if got := e.state(t, sess.ID); string(got) != "SESSION" {
		t.Errorf("the entity's session state = %q, want it untouched", got)
	}
	if got, want := e.storedNames(t, res.Session.ID), []string{"made.txt"}; !slices.Equal(got, want) {
		t.Errorf("fresh session files = %q, want %q", got, want)
	}
}

func TestExecLoadsNamedFiles(t *testing.T) {
	e := newEnv(t, testLimits)
	a := e.session(t, alice, "")
	b := e.session(t, alice, "")
	fa := e.file(t, a.ID, "a.txt", "A")
	fb := e.file(t, a.ID, "b.csv", "B")
	e.file(t, a.ID, "unnamed.txt", "U")
	fc := e.file(t, b.ID, "c.txt", "C")
	req := execReq()
	req.SessionID = a.ID
	req.Files = []FileRef{
		{ID: fb.ID, SessionID: a.ID},
		{ID: fc.ID, SessionID: b.ID, Name: "../in/renamed.txt"},
		{ID: fa.ID}, // no session: the session in use
	}

	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	got := e.run.only(t).Files
	want := []protocol.File{
		{Path: "b.csv", Content: []byte("B")},
		{Path: "in/renamed.txt", Content: []byte("C")},
		{Path: "a.txt", Content: []byte("A")},
	}
	if !equalFiles(got, want) {
		t.Errorf("runner got files %v, want %v", got, want)
	}
}

func TestExecInjectsSessionFiles(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	e.file(t, sess.ID, "a.txt", "A")
	e.file(t, sess.ID, "sub/b.txt", "B")
	other := e.session(t, alice, "")
	e.file(t, other.ID, "other.txt", "O")
	req := execReq()
	req.SessionID = sess.ID

	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	got := e.run.only(t).Files
	want := []protocol.File{{Path: "a.txt", Content: []byte("A")}, {Path: "sub/b.txt", Content: []byte("B")}}
	if !equalFiles(got, want) {
		t.Errorf("runner got files %v, want %v", got, want)
	}
}

func TestExecNewSessionHasNoFiles(t *testing.T) {
	e := newEnv(t, testLimits)
	own := e.session(t, alice, "")
	e.file(t, own.ID, "a.txt", "A")

	res, err := e.svc.Exec(t.Context(), alice, execReq())
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got := e.run.only(t).Files; len(got) != 0 {
		t.Errorf("runner got files %v, want none", got)
	}
	if res.Files == nil || len(res.Files) != 0 {
		t.Errorf("result files = %#v, want an empty, non-nil list", res.Files)
	}
}

func equalFiles(a, b []protocol.File) bool {
	return slices.EqualFunc(a, b, func(x, y protocol.File) bool {
		return x.Path == y.Path && bytes.Equal(x.Content, y.Content)
	})
}

func TestExecPassesTheRequestThrough(t *testing.T) {
	e := newEnv(t, testLimits)
	req := execReq()
	req.Lang = execution.LangBash
	req.Code = "echo $1"
	req.Args = []string{"a b", "c"}
	req.Timeout = 3 * time.Second

	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	got := e.run.only(t)
	if got.Lang != req.Lang || got.Code != req.Code || !slices.Equal(got.Args, req.Args) || got.Timeout != req.Timeout || !got.CaptureState {
		t.Errorf("runner got %+v, want the request %+v", got, req.Request)
	}
}

// A stateless run that produces no file has nothing to keep: no session is stored.
func TestExecStatelessWithoutFilesStoresNothing(t *testing.T) {
	e := newEnv(t, testLimits)
	e.run.result.State = []byte("NEW")
	req := execReq()
	req.Stateless = true
	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if !kiln.ValidID(res.Session.ID) {
		t.Errorf("session id %q, want a kiln id", res.Session.ID)
	}
	if ids := e.sessionIDs(t); len(ids) != 0 {
		t.Errorf("sessions stored: %v, want none", ids)
	}
	if string(res.State) != "NEW" {
		t.Errorf("result state = %q, want NEW", res.State)
	}
}

// failingFiles is a store whose file writes fail as an outage would.
type failingFiles struct{ *spyStore }

func (f failingFiles) PutFile(context.Context, *store.File, io.Reader, int64) error {
	return errors.New("disk on fire")
}

// TestExecHandsTheSandboxBack checks who releases a run's sandbox: the caller, once it
// has answered, when Exec succeeds; Exec itself when it fails after the run.
func TestExecHandsTheSandboxBack(t *testing.T) {
	for _, failSave := range []bool{false, true} {
		t.Run(fmt.Sprintf("save fails %v", failSave), func(t *testing.T) {
			e := newEnv(t, testLimits)
			released := 0
			run := RunnerFunc(func(context.Context, executor.Request) (*executor.Result, error) {
				res := &executor.Result{Status: execution.StatusOK, Files: []protocol.File{{Path: "out.txt", Content: []byte("x")}}}
				res.SetRelease(func() { released++ })
				return res, nil
			})
			var st store.Store = e.st
			if failSave {
				st = failingFiles{e.st}
			}
			svc := New(Config{Store: st, Runner: run, Validate: validateCode, Limits: testLimits, Log: slog.New(slog.DiscardHandler)})
			res, err := svc.Exec(t.Context(), alice, execReq())
			if failSave {
				if err == nil || released != 1 {
					t.Errorf("got error %v and %d releases, want an error and 1 release", err, released)
				}
				return
			}
			if err != nil || released != 0 {
				t.Fatalf("got error %v and %d releases, want no error and the sandbox still held", err, released)
			}
			res.Release()
			if released != 1 {
				t.Errorf("after Release: got %d releases, want 1", released)
			}
		})
	}
}

// TestExecEvents checks what a caller hears while a run goes: the start with the
// session the run will have (a new one here), the output, and each figure stored at
// once and not stored again from the result.
func TestExecEvents(t *testing.T) {
	e := newEnv(t, testLimits)
	png := []byte("\x89PNG figure")
	var stored *store.File
	run := RunnerFunc(func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		req.OnStart()
		req.OnEvent(protocol.Event{Type: protocol.EventOutput, Stream: "stdout", Text: "a\n"})
		req.OnEvent(protocol.Event{Type: protocol.EventDisplay, Name: "figure-1.png", MIME: "image/png", Data: png})
		return &executor.Result{Status: execution.StatusOK, Stdout: "a\n", ExecutionID: req.ExecutionID,
			Files: []protocol.File{{Path: "figure-1.png", Content: png}, {Path: "out.txt", Content: []byte("o")}}}, nil
	})
	svc := New(Config{Store: e.st, Runner: run, Validate: validateCode, Limits: testLimits, Log: slog.New(slog.DiscardHandler)})
	var got []Event
	req := execReq()
	req.Events = func(ev Event) {
		got = append(got, ev)
		if ev.Type == EventDisplay {
			stored = ev.File
		}
	}
	res, err := svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Type != EventStart || got[1].Type != EventStdout || got[1].Text != "a\n" || got[2].Type != EventDisplay {
		t.Fatalf("got events %+v, want start, stdout, display", got)
	}
	if got[0].SessionID != res.Session.ID || got[0].ExecutionID == "" || got[0].ExecutionID != res.ExecutionID {
		t.Errorf("start named session %q execution %q, want the run's %q and %q", got[0].SessionID, got[0].ExecutionID, res.Session.ID, res.ExecutionID)
	}
	if stored == nil || stored.SessionID != res.Session.ID || stored.Name != "figure-1.png" || stored.Size != int64(len(png)) {
		t.Fatalf("display file %+v, want figure-1.png stored in the run's session", stored)
	}
	if len(res.Files) != 2 || res.Files[0].ID != stored.ID || res.Files[1].Name != "out.txt" {
		t.Errorf("result files %+v, want the shown figure (same id) and out.txt", res.Files)
	}
	all, err := e.st.Files(t.Context(), res.Session.ID)
	if err != nil || len(all) != 2 {
		t.Errorf("session holds %d files (%v), want 2: the figure once, and out.txt", len(all), err)
	}
	_, data, err := e.st.File(t.Context(), res.Session.ID, stored.ID)
	if err != nil || !bytes.Equal(data, png) {
		t.Errorf("stored figure = %q, %v; want the PNG", data, err)
	}
}

// Calls that name one runtime before it has a session make one session between them:
// the first creates it while the others wait, and they continue it.
func TestExecRuntimeHintMakesOneSession(t *testing.T) {
	e := newEnv(t, testLimits)
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.svc.run = RunnerFunc(func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		once.Do(func() { // the first run holds on until the others have come
			close(entered)
			<-gate
		})
		return &executor.Result{Status: execution.StatusOK}, nil
	})
	req := execReq()
	req.RuntimeHint = "conv-race"
	ids := make(chan string, 3)
	var wg sync.WaitGroup
	call := func() {
		defer wg.Done()
		res, err := e.svc.Exec(t.Context(), aliceU1, req)
		if err != nil {
			t.Errorf("Exec: %v", err)
			return
		}
		ids <- res.Session.ID
	}
	wg.Add(3)
	go call()
	<-entered
	go call()
	go call()
	for deadline := time.Now().Add(5 * time.Second); e.svc.turns.waiting() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the two later calls queue behind the first (or, wrongly, run)
	}
	close(gate)
	wg.Wait()
	close(ids)
	var got []string
	for id := range ids {
		got = append(got, id)
	}
	if len(got) != 3 || got[0] != got[1] || got[1] != got[2] {
		t.Fatalf("three calls of one runtime ran in sessions %v, want one session", got)
	}
	if n := len(e.sessionIDs(t)); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
}
