package store

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
)

// idPattern is the documented shape of every kiln id (docs/api.md).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{21}$`)

// FuzzValidIDs checks validIDs against the documented pattern, and a disk store
// against it: an id the pattern refuses is ErrNotFound and touches nothing, and one it
// accepts names a directory or file right under the store's root.
func FuzzValidIDs(f *testing.F) {
	for _, s := range []string{
		kiln.NewID(), "aaaaaaaaaaaaaaaaaaaaa", "A-Z_a-z0-9__________", "A-Z_a-z0-9___________", "",
		"..", "../aaaaaaaaaaaaaaaaaa", "aaaaaaaaaa/aaaaaaaaaa", "aaaaaaaaaa%2faaaaaaaa", "kiln:*aaaaaaaaaaaaaaa",
		"aaaaaaaaaaaaaaaaaaaa\x00", "aaaaaaaaaaaaaaaaaaaa\n", "aaaaaaaaaaaaaaaaaaaé", "ａaaaaaaaaaaaaaaaaaaa",
		"aaaaaaaaaaaaaaaaaaaa.", "aaaaaaaaaaaaaaaaaaa?*",
	} {
		f.Add(s, kiln.NewID())
	}
	dir := f.TempDir()
	st, err := OpenDisk(dir, time.Hour)
	if err != nil {
		f.Fatalf("open disk store: %v", err)
	}
	f.Cleanup(func() { _ = st.Close() })
	f.Fuzz(func(t *testing.T, sid, fid string) {
		okS, okF := idPattern.MatchString(sid), idPattern.MatchString(fid)
		if validIDs(sid) != okS || validIDs(fid) != okF || validIDs(sid, fid) != (okS && okF) || !validIDs() {
			t.Fatalf("validIDs(%q)=%v validIDs(%q)=%v, want %v and %v", sid, validIDs(sid), fid, validIDs(fid), okS, okF)
		}
		for _, id := range []string{sid, fid} {
			if validIDs(id) && (!filepath.IsLocal(id) || filepath.Base(id) != id || strings.ContainsAny(id, `./\:*?[]{}`)) {
				t.Fatalf("validIDs accepted %q, which is not a plain name", id)
			}
		}
		checkDiskIDs(t, st, sid, fid)
	})
}

// checkDiskIDs creates a session sid with a file fid, then removes the session; the
// store's root must hold what the ids name and nothing else.
func checkDiskIDs(t *testing.T, st *Disk, sid, fid string) {
	t.Helper()
	ctx := t.Context()
	err := st.CreateSession(ctx, &Session{ID: sid})
	if !validIDs(sid) {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("CreateSession(%q) = %v, want ErrNotFound", sid, err)
		}
		if _, err := st.State(ctx, sid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("State(%q) = %v, want ErrNotFound", sid, err)
		}
		checkRoot(t, st)
		return
	}
	if err != nil {
		t.Fatalf("CreateSession(%q): %v", sid, err)
	}
	defer func() {
		if err := st.DeleteSession(ctx, sid); err != nil {
			t.Fatalf("DeleteSession(%q): %v", sid, err)
		}
		checkRoot(t, st)
	}()
	checkRoot(t, st, sid)
	err = st.PutFile(ctx, &File{ID: fid, SessionID: sid, Name: fid}, strings.NewReader("data"), 4)
	if !validIDs(fid) {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("PutFile(%q) = %v, want ErrNotFound", fid, err)
		}
		if _, _, err := st.File(ctx, sid, fid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("File(%q) = %v, want ErrNotFound", fid, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("PutFile(%q): %v", fid, err)
	}
	if _, data, err := st.File(ctx, sid, fid); err != nil || string(data) != "data" {
		t.Fatalf("File(%q) = %q, %v; want data", fid, data, err)
	}
}

// checkRoot checks that the store's root holds exactly the session directories names.
func checkRoot(t *testing.T, st *Disk, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(st.root)
	if err != nil {
		t.Fatalf("read the store's root: %v", err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, "/") != strings.Join(names, "/") {
		t.Fatalf("the store's root holds %q, want %q", got, names)
	}
}
