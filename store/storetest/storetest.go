package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// Run runs every behaviour against a new, empty store from open. The store must use
// a TTL of a minute or more (the suite reads it from Session.ExpiresAt and moves
// time with explicit arguments, never by waiting). Run closes each store when its
// behaviour ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	behaviours := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"create and get", testCreateGet},
		{"create fills times", testCreateFillsTimes},
		{"create twice", testCreateTwice},
		{"unknown ids", testUnknownIDs},
		{"invalid ids", testInvalidIDs},
		{"touch extends expiry", testTouch},
		{"latest session", testLatest},
		{"latest session keeps owners apart", testLatestOwners},
		{"owner sessions", testOwnerSessions},
		{"state", testState},
		{"files", testFiles},
		{"file replace", testFileReplace},
		{"binary data", testBinary},
		{"streamed content", testStreamed},
		{"delete session", testDeleteSession},
		{"sweep", testSweep},
		{"concurrent writers", testConcurrent},
		{"copies not aliases", testCopies},
		{"close twice", testCloseTwice},
	}
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			b.run(t, s)
		})
	}
}

// baseTime is a time in the store's precision (microseconds, UTC).
func baseTime() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// newSession creates a session of owner for entity, last used at used.
func newSession(t *testing.T, s store.Store, owner, entity string, used time.Time) *store.Session {
	t.Helper()
	sess := &store.Session{ID: kiln.NewID(), Owner: owner, EntityID: entity, CreatedAt: used, LastUsedAt: used}
	if err := s.CreateSession(t.Context(), sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess
}

// ttlOf returns the store's TTL, as seen in a session it returned.
func ttlOf(t *testing.T, s store.Store, id string) time.Duration {
	t.Helper()
	got := getSession(t, s, id)
	ttl := got.ExpiresAt.Sub(got.LastUsedAt)
	if ttl < time.Minute {
		t.Fatalf("store TTL is %v; the suite needs a minute or more", ttl)
	}
	return ttl
}

func getSession(t *testing.T, s store.Store, id string) *store.Session {
	t.Helper()
	got, err := s.Session(t.Context(), id)
	if err != nil {
		t.Fatalf("Session(%s): %v", id, err)
	}
	return got
}

func putFile(t *testing.T, s store.Store, f *store.File, data []byte) {
	t.Helper()
	if err := s.PutFile(t.Context(), f, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("PutFile(%s): %v", f.Name, err)
	}
}

func putState(t *testing.T, s store.Store, id string, blob []byte) {
	t.Helper()
	if err := s.PutState(t.Context(), id, blob); err != nil {
		t.Fatalf("PutState: %v", err)
	}
}

func wantState(t *testing.T, s store.Store, id string, want []byte) {
	t.Helper()
	got, err := s.State(t.Context(), id)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("State = %q, want %q", got, want)
	}
}

func wantFile(t *testing.T, s store.Store, sessionID, fileID string, want []byte) *store.File {
	t.Helper()
	f, got, err := s.File(t.Context(), sessionID, fileID)
	if err != nil {
		t.Fatalf("File(%s): %v", fileID, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("File(%s) data = %q, want %q", fileID, got, want)
	}
	return f
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Errorf("%s: error %v, want %v", what, got, want)
	}
}

// op is one store call on a session id (and a file id where it takes one).
type op struct {
	name string
	call func(ctx context.Context, s store.Store, sessionID, fileID string) error
}

// sessionOps calls every method that takes ids.
var sessionOps = []op{
	{"Session", func(ctx context.Context, s store.Store, id, _ string) error {
		_, err := s.Session(ctx, id)
		return err
	}},
	{"TouchSession", func(ctx context.Context, s store.Store, id, _ string) error {
		return s.TouchSession(ctx, id, time.Now())
	}},
	{"DeleteSession", func(ctx context.Context, s store.Store, id, _ string) error {
		return s.DeleteSession(ctx, id)
	}},
	{"State", func(ctx context.Context, s store.Store, id, _ string) error {
		_, err := s.State(ctx, id)
		return err
	}},
	{"PutState", func(ctx context.Context, s store.Store, id, _ string) error {
		return s.PutState(ctx, id, []byte("blob"))
	}},
	{"DeleteState", func(ctx context.Context, s store.Store, id, _ string) error {
		return s.DeleteState(ctx, id)
	}},
	{"Files", func(ctx context.Context, s store.Store, id, _ string) error {
		_, err := s.Files(ctx, id)
		return err
	}},
	{"PutFile", func(ctx context.Context, s store.Store, id, fid string) error {
		return s.PutFile(ctx, &store.File{ID: fid, SessionID: id, Name: "a.txt"}, strings.NewReader("data"), 4)
	}},
	{"File", func(ctx context.Context, s store.Store, id, fid string) error {
		_, _, err := s.File(ctx, id, fid)
		return err
	}},
	{"DeleteFile", func(ctx context.Context, s store.Store, id, fid string) error {
		return s.DeleteFile(ctx, id, fid)
	}},
}

// fileOps are the calls that take a file id.
var fileOps = sessionOps[len(sessionOps)-3:]
