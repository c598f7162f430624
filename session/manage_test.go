package session

import (
	"slices"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
)

func TestSessionsNewestFirstPaged(t *testing.T) {
	e := newEnv(t, testLimits)
	var want []string
	for range 3 {
		sess, err := e.svc.NewSession(t.Context(), alice, "")
		if err != nil {
			t.Fatalf("NewSession: %v", err)
		}
		want = append([]string{sess.ID}, want...)
		time.Sleep(time.Millisecond) // distinct creation times
	}
	e.session(t, bob, "")
	e.expiredSession(t, alice, "")
	tests := []struct {
		offset, limit int
		want          []string
		more          bool
	}{
		{0, 10, want, false},
		{0, 2, want[:2], true},
		{2, 2, want[2:], false},
	}
	for _, tt := range tests {
		got, more, err := e.svc.Sessions(t.Context(), alice, tt.offset, tt.limit)
		if err != nil {
			t.Fatalf("Sessions: %v", err)
		}
		var ids []string
		for _, s := range got {
			ids = append(ids, s.ID)
		}
		if !slices.Equal(ids, tt.want) || more != tt.more {
			t.Errorf("Sessions(%d, %d) = %v, %v; want %v, %v", tt.offset, tt.limit, ids, more, tt.want, tt.more)
		}
	}
}

func TestFork(t *testing.T) {
	e := newEnv(t, testLimits)
	src := e.session(t, alice, "asst")
	e.putState(t, src.ID, "state")
	e.file(t, src.ID, "a.csv", "1,2")
	dst, files, err := e.svc.Fork(t.Context(), alice, src.ID)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if dst.ID == src.ID || !dst.HasState || dst.EntityID != "asst" {
		t.Errorf("fork = %+v, want a new session with state, of entity asst", dst)
	}
	if got := string(e.state(t, dst.ID)); got != "state" {
		t.Errorf("forked state = %q, want %q", got, "state")
	}
	if len(files) != 1 || files[0].SessionID != dst.ID {
		t.Errorf("forked files = %+v, want one in the new session", files)
	}
	if got := e.storedNames(t, dst.ID); !slices.Equal(got, []string{"a.csv"}) {
		t.Errorf("forked names = %v, want [a.csv]", got)
	}
	// The copy is independent: a change to one side is not seen by the other.
	e.putState(t, dst.ID, "changed")
	if got := string(e.state(t, src.ID)); got != "state" {
		t.Errorf("source state = %q after changing the fork, want %q", got, "state")
	}
	_, _, err = e.svc.Fork(t.Context(), bob, src.ID)
	wantCode(t, err, kiln.CodeNotFound)
}

func TestAddFile(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	for _, data := range []string{"one", "two"} {
		if _, err := e.svc.AddFile(t.Context(), alice, sess.ID, BytesUpload("../d.txt", []byte(data))); err != nil {
			t.Fatalf("AddFile: %v", err)
		}
	}
	if got := e.storedNames(t, sess.ID); !slices.Equal(got, []string{"d.txt"}) {
		t.Errorf("names = %v, want [d.txt] (replaced, not doubled)", got)
	}
	_, err := e.svc.AddFile(t.Context(), bob, sess.ID, BytesUpload("x", []byte("x")))
	wantCode(t, err, kiln.CodeNotFound)
	_, err = e.svc.AddFile(t.Context(), alice, sess.ID, BytesUpload("big", make([]byte, testLimits.MaxFileBytes+1)))
	wantCode(t, err, kiln.CodeTooLarge)
}
