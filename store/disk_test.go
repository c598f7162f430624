package store_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
	"github.com/kilnsh/kiln/store/storetest"
)

func openDisk(t *testing.T, dir string) *store.Disk {
	t.Helper()
	d, err := store.OpenDisk(dir, time.Hour)
	if err != nil {
		t.Fatalf("OpenDisk: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDisk(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openDisk(t, t.TempDir()) })
}

func TestOpenDiskErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		ttl  time.Duration
	}{
		{"zero ttl", t.TempDir(), 0},
		{"negative ttl", t.TempDir(), -time.Hour},
		{"dir is a file", file, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d, err := store.OpenDisk(tt.dir, tt.ttl); err == nil {
				d.Close()
				t.Errorf("OpenDisk(%q, %v) succeeded, want an error", tt.dir, tt.ttl)
			}
		})
	}
}

// fill stores a session with state and two files, and returns the session and file ids.
func fill(t *testing.T, s store.Store) (string, []string) {
	t.Helper()
	ctx := t.Context()
	sess := &store.Session{ID: kiln.NewID(), Owner: "owner\xff", EntityID: "asst"}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if err := s.PutState(ctx, sess.ID, []byte("state blob")); err != nil {
		t.Fatalf("PutState: %v", err)
	}
	var ids []string
	for _, name := range []string{"a.txt", "b.txt"} {
		f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: name}
		if err := s.PutFile(ctx, f, strings.NewReader("data of "+name), int64(len("data of "+name))); err != nil {
			t.Fatalf("PutFile: %v", err)
		}
		ids = append(ids, f.ID)
	}
	return sess.ID, ids
}

// check verifies what fill stored.
func check(t *testing.T, s store.Store, sessionID string, fileIDs []string) {
	t.Helper()
	ctx := t.Context()
	latest, err := s.LatestSession(ctx, "owner\xff", "asst")
	if err != nil || latest.ID != sessionID || !latest.HasState {
		t.Fatalf("LatestSession = %+v, %v; want session %s with state", latest, err, sessionID)
	}
	if state, err := s.State(ctx, sessionID); err != nil || string(state) != "state blob" {
		t.Errorf("State = %q, %v; want %q", state, err, "state blob")
	}
	files, err := s.Files(ctx, sessionID)
	if err != nil || len(files) != len(fileIDs) {
		t.Fatalf("Files = %d files, %v; want %d", len(files), err, len(fileIDs))
	}
	for i, f := range files {
		_, data, err := s.File(ctx, sessionID, f.ID)
		if err != nil || f.ID != fileIDs[i] || string(data) != "data of "+f.Name {
			t.Errorf("file %d = %s %q, %q, %v; want %s", i, f.ID, f.Name, data, err, fileIDs[i])
		}
	}
}

func TestDiskReopen(t *testing.T) {
	dir := t.TempDir()
	first := openDisk(t, dir)
	id, fileIDs := fill(t, first)
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	second := openDisk(t, dir)
	check(t, second, id, fileIDs)
	if n, err := second.Sweep(t.Context(), time.Now().Add(2*time.Hour)); err != nil || n != 1 {
		t.Errorf("Sweep after reopen = %d, %v; want 1, nil", n, err)
	}
}

func TestDiskIgnoresCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := openDisk(t, dir)
	id, fileIDs := fill(t, s)

	// What a crash can leave behind: a half-built session, a half-deleted one, torn
	// temporary writes, and a new state blob that session.json never pointed to.
	sessions := filepath.Join(dir, "sessions")
	leftovers := map[string]string{
		filepath.Join(sessions, ".tmp-123", "session.json"):                  `{"id":"` + kiln.NewID() + `"}`,
		filepath.Join(sessions, ".del-456", "session.json"):                  `{"id":"` + kiln.NewID() + `"}`,
		filepath.Join(sessions, id, ".tmp-789"):                              `{"id":"torn`,
		filepath.Join(sessions, id, "state-"+strings.Repeat("0", 64)+".bin"): "new state",
		filepath.Join(sessions, id, "files", ".tmp-abc"):                     "torn file, no header",
	}
	for path, content := range leftovers {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check(t, s, id, fileIDs) // the running store ignores them

	s.Close()
	reopened := openDisk(t, dir)
	check(t, reopened, id, fileIDs)
	for path := range leftovers {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("leftover %s still there after reopen (%v)", path, err)
		}
	}
}

// tree lists every path under root.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		paths = append(paths, path)
		return err
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return paths
}

func TestDiskPathTraversal(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openDisk(t, filepath.Join(root, "data"))
	real, _ := fill(t, s)
	before := tree(t, root)

	ids := []string{"../../victim", "../../../victim", "../victim", "..", "/etc/passwd", "../../etc/passwd", "sessions/../../victim"}
	for _, id := range ids {
		calls := map[string]error{
			"CreateSession": s.CreateSession(ctx, &store.Session{ID: id}),
			"TouchSession":  s.TouchSession(ctx, id, time.Now()),
			"PutState":      s.PutState(ctx, id, []byte("x")),
			"DeleteState":   s.DeleteState(ctx, id),
			"PutFile":       s.PutFile(ctx, &store.File{ID: id, SessionID: real, Name: "x"}, strings.NewReader("x"), 1),
			"PutFile in":    s.PutFile(ctx, &store.File{ID: kiln.NewID(), SessionID: id, Name: "x"}, strings.NewReader("x"), 1),
			"DeleteFile":    s.DeleteFile(ctx, real, id),
			"DeleteFile in": s.DeleteFile(ctx, id, kiln.NewID()),
			"DeleteSession": s.DeleteSession(ctx, id),
		}
		_, calls["Session"] = s.Session(ctx, id)
		_, calls["State"] = s.State(ctx, id)
		_, calls["Files"] = s.Files(ctx, id)
		_, _, calls["File"] = s.File(ctx, real, id)
		for name, err := range calls {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s(%q): error %v, want ErrNotFound", name, id, err)
			}
		}
	}
	if after := tree(t, root); !slices.Equal(before, after) {
		t.Errorf("files changed:\nbefore %q\nafter  %q", before, after)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
		t.Errorf("victim = %q, %v", b, err)
	}

	// A file's name is only data: it never becomes a path.
	f := &store.File{ID: kiln.NewID(), SessionID: real, Name: "../../../../victim"}
	if err := s.PutFile(ctx, f, strings.NewReader("overwritten"), 11); err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me" {
		t.Errorf("victim = %q after storing a file named %q", b, f.Name)
	}
	for _, p := range tree(t, root) {
		if p != root && p != victim && !strings.HasPrefix(p, filepath.Join(root, "data")) {
			t.Errorf("unexpected path %s outside the store", p)
		}
	}
}

// A state blob that no longer has its size (cut short under kiln, not by a write of
// kiln's, which are atomic) is an error, never bytes to restore. Its hash is not
// computed again on a read: what kiln stored after checking it is trusted.
func TestDiskStateDamaged(t *testing.T) {
	for _, tt := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"cut short", func(b []byte) []byte { return b[:len(b)-3] }},
		{"grown", func(b []byte) []byte { return append(b, 0) }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openDisk(t, dir)
			id, _ := fill(t, s)
			sess, err := s.Session(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "sessions", id, "state-"+sess.StateSHA256+".bin")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tt.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := s.State(t.Context(), id)
			if err == nil || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "damaged") {
				t.Errorf("State = %q, %v; want an error saying the blob is damaged", got, err)
			}
		})
	}
}
