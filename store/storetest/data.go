package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func testState(t *testing.T, s store.Store) {
	ctx := t.Context()
	sess := newSession(t, s, "o", "e", baseTime())
	steps := []struct {
		name string
		blob []byte // nil deletes the state
	}{
		{"put", []byte("first state")},
		{"replace", bytes.Repeat([]byte{0, 1, 2, '\n', 0xff}, 1000)},
		{"same again", bytes.Repeat([]byte{0, 1, 2, '\n', 0xff}, 1000)},
		{"empty", []byte{}},
		{"delete", nil},
		{"put after delete", []byte("back")},
	}
	for _, st := range steps {
		before := time.Now().Add(-time.Millisecond)
		if st.blob == nil {
			if err := s.DeleteState(ctx, sess.ID); err != nil {
				t.Fatalf("%s: DeleteState: %v", st.name, err)
			}
			_, err := s.State(ctx, sess.ID)
			wantErr(t, st.name+": State", err, store.ErrNotFound)
			got := getSession(t, s, sess.ID)
			if got.HasState || got.StateSize != 0 || got.StateSHA256 != "" || !got.StateCreatedAt.IsZero() {
				t.Errorf("%s: session still describes a state: %+v", st.name, got)
			}
			continue
		}
		putState(t, s, sess.ID, st.blob)
		wantState(t, s, sess.ID, st.blob)
		got := getSession(t, s, sess.ID)
		if !got.HasState || got.StateSize != int64(len(st.blob)) || got.StateSHA256 != sha(st.blob) {
			t.Errorf("%s: HasState, StateSize, StateSHA256 = %v, %d, %s; want true, %d, %s",
				st.name, got.HasState, got.StateSize, got.StateSHA256, len(st.blob), sha(st.blob))
		}
		if got.StateCreatedAt.Before(before) {
			t.Errorf("%s: StateCreatedAt = %v, want after %v", st.name, got.StateCreatedAt, before)
		}
	}
}

func testFiles(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := baseTime()
	sess := newSession(t, s, "o", "e", t0)
	other := newSession(t, s, "o", "e", t0)
	files := []struct {
		f    store.File
		data []byte
	}{ // in the order Files must list them: by CreatedAt, then Name
		{store.File{Name: "z-first.txt", ContentType: "text/plain", CreatedAt: t0}, []byte("first")},
		{store.File{Name: "a.png", ContentType: "image/png", CreatedAt: t0.Add(time.Second)}, []byte("\x89PNG")},
		{store.File{Name: "b.csv", ContentType: "text/csv", CreatedAt: t0.Add(time.Second)}, []byte("x,y\n1,2\n")},
		{store.File{Name: "empty", CreatedAt: t0.Add(time.Hour)}, []byte{}},
	}
	for _, i := range []int{2, 0, 3, 1} {
		files[i].f.ID, files[i].f.SessionID = kiln.NewID(), sess.ID
		f := files[i].f
		putFile(t, s, &f, files[i].data)
	}
	list, err := s.Files(ctx, sess.ID)
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	var gotNames, wantNames []string
	for i, f := range list {
		gotNames = append(gotNames, f.Name)
		wantNames = append(wantNames, files[i].f.Name)
	}
	if !slices.Equal(gotNames, wantNames) {
		t.Fatalf("Files = %q, want %q", gotNames, wantNames)
	}
	for i, tt := range files {
		want := tt.f
		want.Size = int64(len(tt.data))
		got := wantFile(t, s, sess.ID, want.ID, tt.data)
		for _, g := range []*store.File{got, list[i]} {
			if g.ID != want.ID || g.SessionID != want.SessionID || g.Name != want.Name ||
				g.ContentType != want.ContentType || g.Size != want.Size || !g.CreatedAt.Equal(want.CreatedAt) {
				t.Errorf("file = %+v, want %+v", g, want)
			}
		}
	}

	first := files[0].f.ID
	_, _, err = s.File(ctx, other.ID, first)
	wantErr(t, "File from another session", err, store.ErrNotFound)
	wantErr(t, "DeleteFile from another session", s.DeleteFile(ctx, other.ID, first), store.ErrNotFound)
	if err := s.DeleteFile(ctx, sess.ID, first); err != nil {
		t.Fatalf("DeleteFile: %v", err)
	}
	_, _, err = s.File(ctx, sess.ID, first)
	wantErr(t, "File after delete", err, store.ErrNotFound)
	wantErr(t, "second DeleteFile", s.DeleteFile(ctx, sess.ID, first), store.ErrNotFound)
	if list, _ := s.Files(ctx, sess.ID); len(list) != len(files)-1 {
		t.Errorf("Files after delete = %d files, want %d", len(list), len(files)-1)
	}
	if list, err := s.Files(ctx, other.ID); err != nil || list == nil || len(list) != 0 {
		t.Errorf("Files of a session without files = %#v, %v; want an empty list", list, err)
	}
}

func testFileReplace(t *testing.T, s store.Store) {
	sess := newSession(t, s, "o", "e", baseTime())
	f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "out.txt", ContentType: "text/plain"}
	putFile(t, s, f, []byte("version one, longer"))
	if f.Size != int64(len("version one, longer")) || f.CreatedAt.IsZero() {
		t.Errorf("PutFile left Size, CreatedAt = %d, %v; want them set", f.Size, f.CreatedAt)
	}
	g := &store.File{ID: f.ID, SessionID: sess.ID, Name: "out.txt", ContentType: "text/markdown"}
	putFile(t, s, g, []byte("v2"))
	got := wantFile(t, s, sess.ID, f.ID, []byte("v2"))
	if got.ContentType != "text/markdown" || got.Size != 2 {
		t.Errorf("replaced file = %+v, want text/markdown of 2 bytes", got)
	}
	if list, _ := s.Files(t.Context(), sess.ID); len(list) != 1 {
		t.Errorf("Files = %d files after a replace, want 1", len(list))
	}
}

func testBinary(t *testing.T, s store.Store) {
	owner := "key\xff\xfe\x00user"
	sess := newSession(t, s, owner, "e", baseTime())
	data := []byte("\n\r\n\x00{\"id\":1}\n")
	for i := range 256 {
		data = append(data, byte(i))
	}
	f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "na\xffme\n\"x\".txt", ContentType: "application/octet-stream"}
	putFile(t, s, f, data)
	got := wantFile(t, s, sess.ID, f.ID, data)
	if got.Name != f.Name {
		t.Errorf("Name = %q, want %q", got.Name, f.Name)
	}
	putState(t, s, sess.ID, data)
	wantState(t, s, sess.ID, data)
	if got := getSession(t, s, sess.ID); got.Owner != owner {
		t.Errorf("Owner = %q, want %q", got.Owner, owner)
	}
}

// testStreamed puts files from readers that are not bytes in memory (an upload spooled to
// disk, a stream from another store): 900 KiB of a CSV read in small pieces is kept
// whole, and content longer or shorter than its given size is refused, keeping the file
// as it was.
func testStreamed(t *testing.T, s store.Store) {
	ctx := t.Context()
	sess := newSession(t, s, "o", "e", baseTime())
	var csv bytes.Buffer
	csv.WriteString("id,price,qty\n")
	for i := 0; csv.Len() < 900<<10; i++ { // within the test stores' file limit (1 MiB)
		fmt.Fprintf(&csv, "%d,%d.%02d,%d\n", i, i%997, i%100, i%13)
	}
	data := csv.Bytes()
	f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "sales.csv", ContentType: "text/csv"}
	if err := s.PutFile(ctx, f, iotest.HalfReader(bytes.NewReader(data)), int64(len(data))); err != nil {
		t.Fatalf("PutFile of %d bytes from a reader: %v", len(data), err)
	}
	if f.Size != int64(len(data)) {
		t.Errorf("Size = %d, want %d", f.Size, len(data))
	}
	kept := func(when string) {
		t.Helper()
		_, got, err := s.File(ctx, sess.ID, f.ID)
		if err != nil || sha(got) != sha(data) {
			t.Errorf("%s: File = %d bytes (%v), want the %d bytes put", when, len(got), err, len(data))
		}
	}
	kept("put")
	for _, tt := range []struct {
		name    string
		content string
		size    int64
	}{
		{"longer", "0123456789", 4},
		{"shorter", "0123", 10},
		{"empty, said one byte", "", 1},
	} {
		g := &store.File{ID: f.ID, SessionID: sess.ID, Name: "sales.csv"}
		if err := s.PutFile(ctx, g, strings.NewReader(tt.content), tt.size); err == nil {
			t.Errorf("%s: PutFile of %d bytes said to be %d: no error", tt.name, len(tt.content), tt.size)
		}
		kept(tt.name)
		h := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "other.csv"}
		if err := s.PutFile(ctx, h, strings.NewReader(tt.content), tt.size); err == nil {
			t.Errorf("%s: PutFile of a new file of %d bytes said to be %d: no error", tt.name, len(tt.content), tt.size)
		}
		if _, _, err := s.File(ctx, sess.ID, h.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: the refused new file: %v, want ErrNotFound", tt.name, err)
		}
	}
}

// testConcurrent has writers race on one session and on sessions of their own.
func testConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	shared := newSession(t, s, "o", "e", baseTime())
	const writers, filesEach = 8, 5
	blobs := make([][]byte, writers)
	errs := make(chan error, writers*(filesEach+4))
	var wg sync.WaitGroup
	for w := range writers {
		blobs[w] = bytes.Repeat([]byte{byte('a' + w)}, 1000+w)
		wg.Go(func() {
			for i := range filesEach {
				f := &store.File{ID: kiln.NewID(), SessionID: shared.ID, Name: fmt.Sprintf("w%d-%d", w, i)}
				errs <- s.PutFile(ctx, f, strings.NewReader(f.Name), int64(len(f.Name)))
			}
			errs <- s.PutState(ctx, shared.ID, blobs[w])
			errs <- s.TouchSession(ctx, shared.ID, time.Now())
			own := &store.Session{ID: kiln.NewID(), Owner: "o", EntityID: "e"}
			errs <- s.CreateSession(ctx, own)
			errs <- s.PutState(ctx, own.ID, blobs[w])
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent write: %v", err)
		}
	}
	list, err := s.Files(ctx, shared.ID)
	if err != nil || len(list) != writers*filesEach {
		t.Fatalf("Files = %d, %v; want %d files", len(list), err, writers*filesEach)
	}
	state, err := s.State(ctx, shared.ID)
	if err != nil || !slices.ContainsFunc(blobs, func(b []byte) bool { return bytes.Equal(b, state) }) {
		t.Fatalf("State = %d bytes, %v; want one of the written blobs", len(state), err)
	}
	if got := getSession(t, s, shared.ID); got.StateSHA256 != sha(state) || got.StateSize != int64(len(state)) {
		t.Errorf("session describes state %s of %d bytes, but the state is %s of %d", got.StateSHA256, got.StateSize, sha(state), len(state))
	}
}

// testCopies checks that neither what is passed in nor what comes out aliases the store.
func testCopies(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := &store.Session{ID: kiln.NewID(), Owner: "owner", EntityID: "e"}
	if err := s.CreateSession(ctx, in); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	in.Owner = "changed"
	got := getSession(t, s, in.ID)
	got.Owner, got.HasState = "changed", true
	if again := getSession(t, s, in.ID); again.Owner != "owner" || again.HasState {
		t.Errorf("Session = %+v after changing copies, want the original", again)
	}

	blob := []byte("state")
	putState(t, s, in.ID, blob)
	blob[0] = 'X'
	wantState(t, s, in.ID, []byte("state"))
	out, _ := s.State(ctx, in.ID)
	out[0] = 'Y'
	wantState(t, s, in.ID, []byte("state"))

	data := []byte("data")
	f := &store.File{ID: kiln.NewID(), SessionID: in.ID, Name: "f"}
	putFile(t, s, f, data)
	data[0] = 'X'
	f.Name = "changed"
	gf, gd, _ := s.File(ctx, in.ID, f.ID)
	gd[0], gf.Name = 'Y', "changed"
	list, _ := s.Files(ctx, in.ID)
	list[0].Name = "changed"
	if got := wantFile(t, s, in.ID, f.ID, []byte("data")); got.Name != "f" {
		t.Errorf("Name = %q after changing copies, want %q", got.Name, "f")
	}
}
