package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

func testCreateGet(t *testing.T, s store.Store) {
	t0 := baseTime()
	in := &store.Session{
		ID: kiln.NewID(), Owner: "key\x00user\xff", EntityID: "asst_1", Creator: "key\x00uploader\xfe",
		CreatedAt: t0, LastUsedAt: t0.Add(time.Second),
	}
	if err := s.CreateSession(t.Context(), in); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	got := getSession(t, s, in.ID)
	if got.ID != in.ID || got.Owner != in.Owner || got.EntityID != in.EntityID || got.Creator != in.Creator {
		t.Errorf("Session = %q %q %q %q, want %q %q %q %q", got.ID, got.Owner, got.EntityID, got.Creator, in.ID, in.Owner, in.EntityID, in.Creator)
	}
	if !got.CreatedAt.Equal(t0) || !got.LastUsedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("times = %v, %v, want %v, %v", got.CreatedAt, got.LastUsedAt, t0, t0.Add(time.Second))
	}
	if !got.ExpiresAt.After(got.LastUsedAt) || !got.ExpiresAt.Equal(in.ExpiresAt) {
		t.Errorf("ExpiresAt = %v, want after %v and equal to the created session's %v", got.ExpiresAt, got.LastUsedAt, in.ExpiresAt)
	}
	if got.HasState || got.StateSize != 0 || got.StateSHA256 != "" || !got.StateCreatedAt.IsZero() {
		t.Errorf("new session has state: %+v", got)
	}
}

func testCreateFillsTimes(t *testing.T, s store.Store) {
	before := time.Now().Add(-time.Millisecond)
	in := &store.Session{ID: kiln.NewID(), Owner: "o"}
	if err := s.CreateSession(t.Context(), in); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	after := time.Now().Add(time.Millisecond)
	got := getSession(t, s, in.ID)
	for name, v := range map[string]time.Time{"CreatedAt": got.CreatedAt, "LastUsedAt": got.LastUsedAt} {
		if v.Before(before) || v.After(after) {
			t.Errorf("%s = %v, want between %v and %v", name, v, before, after)
		}
	}
	if !in.CreatedAt.Equal(got.CreatedAt) {
		t.Errorf("caller's CreatedAt = %v, stored %v", in.CreatedAt, got.CreatedAt)
	}
}

func testCreateTwice(t *testing.T, s store.Store) {
	first := newSession(t, s, "first", "e", baseTime())
	err := s.CreateSession(t.Context(), &store.Session{ID: first.ID, Owner: "second"})
	wantErr(t, "second CreateSession", err, store.ErrExists)
	if got := getSession(t, s, first.ID); got.Owner != "first" {
		t.Errorf("Owner = %q after a refused create, want %q", got.Owner, "first")
	}
}

func testUnknownIDs(t *testing.T, s store.Store) {
	sess := newSession(t, s, "o", "e", baseTime())
	for _, o := range sessionOps {
		err := o.call(t.Context(), s, kiln.NewID(), kiln.NewID())
		wantErr(t, o.name+" on an unknown session", err, store.ErrNotFound)
	}
	for _, o := range fileOps[1:] { // PutFile creates the file
		err := o.call(t.Context(), s, sess.ID, kiln.NewID())
		wantErr(t, o.name+" of an unknown file", err, store.ErrNotFound)
	}
	_, err := s.State(t.Context(), sess.ID)
	wantErr(t, "State of a session without state", err, store.ErrNotFound)
	wantErr(t, "DeleteState of a session without state", s.DeleteState(t.Context(), sess.ID), store.ErrNotFound)
}

// invalidIDs are ids no store may accept, some of them aimed at paths and key patterns.
var invalidIDs = []string{
	"",
	"../../etc/passwd",
	"../../../../../../../../tmp",
	"..",
	"/etc/passwd",
	strings.Repeat("a", kiln.IDLength-1),
	strings.Repeat("a", kiln.IDLength+1),
	"aaaaaaaaaa/aaaaaaaaaa",
	"aaaaaaaaaa.aaaaaaaaaa",
	"aaaaaaaaaa\x00aaaaaaaaaa",
	"kiln:s:*aaaaaaaaaaaaa",
	"*********************",
	"ééééééééééé",
}

func testInvalidIDs(t *testing.T, s store.Store) {
	sess := newSession(t, s, "o", "e", baseTime())
	for _, id := range invalidIDs {
		for _, o := range sessionOps {
			wantErr(t, o.name+"("+id+")", o.call(t.Context(), s, id, kiln.NewID()), store.ErrNotFound)
		}
		for _, o := range fileOps {
			wantErr(t, o.name+"(session, "+id+")", o.call(t.Context(), s, sess.ID, id), store.ErrNotFound)
		}
		err := s.CreateSession(t.Context(), &store.Session{ID: id, Owner: "o"})
		wantErr(t, "CreateSession("+id+")", err, store.ErrNotFound)
	}
	files, err := s.Files(t.Context(), sess.ID)
	if err != nil || len(files) != 0 {
		t.Errorf("Files = %d files, %v; want none stored under invalid ids", len(files), err)
	}
}

func testTouch(t *testing.T, s store.Store) {
	t0 := baseTime()
	sess := newSession(t, s, "o", "e", t0)
	ttl := ttlOf(t, s, sess.ID)
	tests := []struct {
		name string
		at   time.Time
		want time.Time
	}{
		{"later", t0.Add(time.Hour), t0.Add(time.Hour)},
		{"earlier is ignored", t0.Add(time.Minute), t0.Add(time.Hour)},
		{"later again", t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
	}
	for _, tt := range tests {
		if err := s.TouchSession(t.Context(), sess.ID, tt.at); err != nil {
			t.Fatalf("%s: TouchSession: %v", tt.name, err)
		}
		got := getSession(t, s, sess.ID)
		if !got.LastUsedAt.Equal(tt.want) || !got.ExpiresAt.Equal(tt.want.Add(ttl)) {
			t.Errorf("%s: LastUsedAt, ExpiresAt = %v, %v, want %v, %v", tt.name, got.LastUsedAt, got.ExpiresAt, tt.want, tt.want.Add(ttl))
		}
		if !got.CreatedAt.Equal(t0) {
			t.Errorf("%s: CreatedAt = %v, want %v", tt.name, got.CreatedAt, t0)
		}
	}
}

func testLatest(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := baseTime()
	older := newSession(t, s, "alice", "asst", t0)
	newer := newSession(t, s, "alice", "asst", t0.Add(time.Second))
	newSession(t, s, "bob", "asst", t0.Add(time.Minute))    // another owner, later
	newSession(t, s, "alice", "other", t0.Add(time.Minute)) // another entity, later

	latest := func(step, want string) {
		t.Helper()
		got, err := s.LatestSession(ctx, "alice", "asst")
		if err != nil {
			t.Fatalf("%s: LatestSession: %v", step, err)
		}
		if got.ID != want {
			t.Errorf("%s: LatestSession = %s, want %s", step, got.ID, want)
		}
	}
	latest("after create", newer.ID)
	if err := s.TouchSession(ctx, older.ID, t0.Add(2*time.Second)); err != nil {
		t.Fatalf("TouchSession: %v", err)
	}
	latest("after touching the older", older.ID)
	if err := s.DeleteSession(ctx, older.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	latest("after deleting it", newer.ID)

	_, err := s.LatestSession(ctx, "carol", "asst")
	wantErr(t, "LatestSession of an owner without sessions", err, store.ErrNotFound)
	_, err = s.LatestSession(ctx, "alice", "none")
	wantErr(t, "LatestSession of an entity without sessions", err, store.ErrNotFound)
}

func testLatestOwners(t *testing.T, s store.Store) {
	t0 := baseTime()
	pairs := []struct{ owner, entity string }{
		{"ab", "c"}, {"a", "bc"}, {"o\xff", "e"}, {"o\xfe", "e"}, {"o\x00", "e"}, {"o", "\x00e"},
		{"kiln:*", "e"}, {"", ""}, {"o\n", "e"},
	}
	ids := make([]string, len(pairs))
	for i, p := range pairs {
		ids[i] = newSession(t, s, p.owner, p.entity, t0.Add(time.Duration(i)*time.Second)).ID
	}
	for i, p := range pairs {
		got, err := s.LatestSession(t.Context(), p.owner, p.entity)
		if err != nil {
			t.Errorf("LatestSession(%q, %q): %v", p.owner, p.entity, err)
			continue
		}
		if got.ID != ids[i] || got.Owner != p.owner || got.EntityID != p.entity {
			t.Errorf("LatestSession(%q, %q) = %s of %q %q, want %s", p.owner, p.entity, got.ID, got.Owner, got.EntityID, ids[i])
		}
	}
}

func testOwnerSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := baseTime()
	var want []string // newest first
	for i := range 5 {
		sess := newSession(t, s, "alice", "e"+fmt.Sprint(i%2), t0.Add(time.Duration(i)*time.Second))
		want = append([]string{sess.ID}, want...)
	}
	newSession(t, s, "alice\x00u", "e", t0.Add(time.Minute)) // another owner
	newSession(t, s, "bob", "e", t0.Add(time.Minute))
	// Touching an old session does not move it: the order is by creation.
	if err := s.TouchSession(ctx, want[4], t0.Add(time.Hour)); err != nil {
		t.Fatalf("TouchSession: %v", err)
	}
	ids := func(offset, limit int) []string {
		t.Helper()
		got, err := s.OwnerSessions(ctx, "alice", offset, limit)
		if err != nil {
			t.Fatalf("OwnerSessions(%d, %d): %v", offset, limit, err)
		}
		out := []string{}
		for _, sess := range got {
			if sess.Owner != "alice" {
				t.Errorf("OwnerSessions returned a session of %q", sess.Owner)
			}
			out = append(out, sess.ID)
		}
		return out
	}
	tests := []struct {
		offset, limit int
		want          []string
	}{
		{0, 10, want},
		{0, 2, want[:2]},
		{2, 2, want[2:4]},
		{4, 2, want[4:]},
		{5, 2, []string{}},
		{9, 2, []string{}},
	}
	for _, tt := range tests {
		if got := ids(tt.offset, tt.limit); !slices.Equal(got, tt.want) {
			t.Errorf("OwnerSessions(%d, %d) = %v, want %v", tt.offset, tt.limit, got, tt.want)
		}
	}
	if err := s.DeleteSession(ctx, want[1]); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if got, w := ids(0, 10), slices.Delete(slices.Clone(want), 1, 2); !slices.Equal(got, w) {
		t.Errorf("after a delete, OwnerSessions = %v, want %v", got, w)
	}
	if got := ids(0, 10); len(got) != 4 {
		t.Errorf("got %d sessions, want 4", len(got))
	}
	got, err := s.OwnerSessions(ctx, "carol", 0, 10)
	if err != nil || len(got) != 0 {
		t.Errorf("OwnerSessions of an owner without sessions = %v, %v; want none", got, err)
	}
}

func testDeleteSession(t *testing.T, s store.Store) {
	ctx := t.Context()
	sess := newSession(t, s, "o", "e", baseTime())
	putState(t, s, sess.ID, []byte("state"))
	f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "a.txt"}
	putFile(t, s, f, []byte("data"))
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	wantGone(t, s, sess.ID, f.ID)
	_, err := s.LatestSession(ctx, "o", "e")
	wantErr(t, "LatestSession after delete", err, store.ErrNotFound)
	wantErr(t, "second DeleteSession", s.DeleteSession(ctx, sess.ID), store.ErrNotFound)

	// The id is free again, and nothing of the old session comes back.
	if err := s.CreateSession(ctx, &store.Session{ID: sess.ID, Owner: "o3"}); err != nil {
		t.Fatalf("CreateSession with a deleted id: %v", err)
	}
	files, err := s.Files(ctx, sess.ID)
	if err != nil || len(files) != 0 {
		t.Errorf("Files of the recreated session = %d, %v; want none", len(files), err)
	}
	_, err = s.State(ctx, sess.ID)
	wantErr(t, "State of the recreated session", err, store.ErrNotFound)
}

// wantGone checks that a session and everything in it are gone.
func wantGone(t *testing.T, s store.Store, sessionID, fileID string) {
	t.Helper()
	ctx := t.Context()
	_, err := s.Session(ctx, sessionID)
	wantErr(t, "Session", err, store.ErrNotFound)
	_, err = s.State(ctx, sessionID)
	wantErr(t, "State", err, store.ErrNotFound)
	_, err = s.Files(ctx, sessionID)
	wantErr(t, "Files", err, store.ErrNotFound)
	_, _, err = s.File(ctx, sessionID, fileID)
	wantErr(t, "File", err, store.ErrNotFound)
}

func testSweep(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := baseTime()
	old := newSession(t, s, "old", "e", t0)
	ttl := ttlOf(t, s, old.ID)
	young := newSession(t, s, "young", "e", t0.Add(ttl/2))
	touched := newSession(t, s, "touched", "e", t0)
	if err := s.TouchSession(ctx, touched.ID, t0.Add(ttl/2)); err != nil {
		t.Fatalf("TouchSession: %v", err)
	}
	var fileIDs []string
	for _, sess := range []*store.Session{old, young, touched} {
		putState(t, s, sess.ID, []byte("state of "+sess.Owner))
		f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "f"}
		putFile(t, s, f, []byte("file of "+sess.Owner))
		fileIDs = append(fileIDs, f.ID)
	}

	n, err := s.Sweep(ctx, t0.Add(ttl-time.Microsecond))
	if err != nil || n != 0 {
		t.Fatalf("Sweep just before expiry = %d, %v; want 0, nil", n, err)
	}
	n, err = s.Sweep(ctx, t0.Add(ttl)) // expiry is inclusive
	if err != nil || n != 1 {
		t.Fatalf("Sweep at expiry = %d, %v; want 1, nil", n, err)
	}
	wantGone(t, s, old.ID, fileIDs[0])
	_, err = s.LatestSession(ctx, "old", "e")
	wantErr(t, "LatestSession of a swept session", err, store.ErrNotFound)
	for i, sess := range []*store.Session{young, touched} {
		getSession(t, s, sess.ID)
		wantState(t, s, sess.ID, []byte("state of "+sess.Owner))
		wantFile(t, s, sess.ID, fileIDs[i+1], []byte("file of "+sess.Owner))
	}
	if n, err := s.Sweep(ctx, t0.Add(ttl)); err != nil || n != 0 {
		t.Errorf("second Sweep = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.Sweep(ctx, t0.Add(2*ttl)); err != nil || n != 2 {
		t.Errorf("Sweep after everything expired = %d, %v; want 2, nil", n, err)
	}
}

func testCloseTwice(t *testing.T, s store.Store) {
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
