package store_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// The disk store killed mid-write. A child process (this test binary again, running
// TestHelperWriter) writes sessions, states and files in a tight loop, noting in a
// journal each call before it makes it and once it returned; the parent SIGKILLs it
// at a random moment, opens the store and reads everything back. Each blob says where
// it belongs and ends with its own SHA-256, so a torn one shows; and the store as a
// whole must be what the journal's finished calls made, with the call under way at
// the kill either wholly done or not at all.

const (
	writerDirEnv     = "KILN_TEST_WRITER_DIR"
	writerJournalEnv = "KILN_TEST_WRITER_JOURNAL"
	writerSeedEnv    = "KILN_TEST_WRITER_SEED"
	writerOwner      = "torn-writer"
	maxWriterSess    = 6
	maxWriterFiles   = 4
)

func TestDiskSurvivesKillMidWrite(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	dir := t.TempDir()
	model := snapshot{} // what the store held after the last kill
	var pending, leftovers int
	for round := range rounds {
		journal := filepath.Join(t.TempDir(), "journal")
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), writerDirEnv+"="+dir, writerJournalEnv+"="+journal,
			writerSeedEnv+"="+strconv.Itoa(round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it once it is writing, after a random part of a few dozen calls.
		waitForJournal(t, journal, cmd)
		time.Sleep(time.Duration(rand.IntN(40_000)) * time.Microsecond)
		_ = cmd.Process.Kill()
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: the writer ended by itself (%v) before the kill:\n%s", round, err, stderr.String())
		}

		done, inFlight := readJournal(t, journal)
		want := model.clone()
		for _, c := range done {
			want.apply(c)
		}
		leftovers += countLeftovers(t, dir)
		got := readBack(t, dir)
		if inFlight != nil {
			pending++
			alt := want.clone()
			alt.apply(*inFlight)
			if !got.equal(want) && !got.equal(alt) {
				t.Fatalf("round %d: after %d finished calls and %s under way, the store holds\n%s\nwant\n%s\nor\n%s",
					round, len(done), inFlight, got, want, alt)
			}
		} else if !got.equal(want) {
			t.Fatalf("round %d: after %d finished calls the store holds\n%s\nwant\n%s", round, len(done), got, want)
		}
		if n := countLeftovers(t, dir); n != 0 {
			t.Fatalf("round %d: %d temporary entries left after OpenDisk", round, n)
		}
		model = got
	}
	t.Logf("%d kills, %d during a call, %d temporary entries swept at reopen; %d sessions at the end", rounds, pending, leftovers, len(model.sessions()))
	if pending == 0 {
		t.Errorf("no kill landed during a call: the test did not test anything")
	}
}

// TestHelperWriter is the child of TestDiskSurvivesKillMidWrite; run alone, it does nothing.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(writerDirEnv)
	if dir == "" {
		return
	}
	seed, _ := strconv.ParseUint(os.Getenv(writerSeedEnv), 10, 64)
	journal, err := os.OpenFile(os.Getenv(writerJournalEnv), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	d, err := store.OpenDisk(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{t: t, d: d, journal: journal, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), files: map[string][]string{}}
	w.load()
	for seq := 0; ; seq++ {
		w.step(seq)
	}
}

// call is one store call the writer made: op on session (and file), with the SHA-256
// of what it wrote.
type call struct {
	op, session, file, sha string
}

func (c call) String() string { return fmt.Sprintf("%s %s %s %.12s", c.op, c.session, c.file, c.sha) }

type writer struct {
	t       *testing.T
	d       *store.Disk
	journal *os.File
	rng     *rand.Rand
	ids     []string            // sessions
	files   map[string][]string // session → its files
}

// load learns what an earlier writer left.
func (w *writer) load() {
	ctx := context.Background()
	sessions, err := w.d.OwnerSessions(ctx, writerOwner, 0, 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range sessions {
		w.ids = append(w.ids, s.ID)
		files, err := w.d.Files(ctx, s.ID)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, f := range files {
			w.files[s.ID] = append(w.files[s.ID], f.ID)
		}
	}
}

// step makes one call, noted before and after in the journal.
func (w *writer) step(seq int) {
	ctx := context.Background()
	c := w.next()
	var data []byte
	switch c.op {
	case "put-state":
		data = blob(w.rng, c.session+"/state", seq)
	case "put-file":
		data = blob(w.rng, c.session+"/"+c.file, seq)
	}
	if data != nil {
		c.sha = sha256Hex(data)
	}
	w.note("call %s %s %s %s\n", c.op, c.session, orDash(c.file), orDash(c.sha))
	var err error
	switch c.op {
	case "create":
		err = w.d.CreateSession(ctx, &store.Session{ID: c.session, Owner: writerOwner})
		w.ids = append(w.ids, c.session)
	case "touch":
		err = w.d.TouchSession(ctx, c.session, time.Now())
	case "delete-session":
		err = w.d.DeleteSession(ctx, c.session)
		w.ids = slices.DeleteFunc(w.ids, func(id string) bool { return id == c.session })
		delete(w.files, c.session)
	case "put-state":
		err = w.d.PutState(ctx, c.session, data)
	case "delete-state":
		if err = w.d.DeleteState(ctx, c.session); errors.Is(err, store.ErrNotFound) {
			err = nil
		}
	case "put-file":
		err = w.d.PutFile(ctx, &store.File{ID: c.file, SessionID: c.session, Name: "f.bin"}, bytes.NewReader(data), int64(len(data)))
		if !slices.Contains(w.files[c.session], c.file) {
			w.files[c.session] = append(w.files[c.session], c.file)
		}
	case "delete-file":
		err = w.d.DeleteFile(ctx, c.session, c.file)
		w.files[c.session] = slices.DeleteFunc(w.files[c.session], func(id string) bool { return id == c.file })
	}
	if err != nil {
		w.t.Fatalf("%s: %v", c, err)
	}
	w.note("done\n")
}

// next picks a call: mostly writes of states and files, some sessions made and
// removed, their number bounded.
func (w *writer) next() call {
	if len(w.ids) == 0 || len(w.ids) < maxWriterSess && w.rng.IntN(8) == 0 {
		return call{op: "create", session: kiln.NewID()}
	}
	sid := w.ids[w.rng.IntN(len(w.ids))]
	files := w.files[sid]
	switch r := w.rng.IntN(20); {
	case r == 0:
		return call{op: "delete-session", session: sid}
	case r <= 2:
		return call{op: "touch", session: sid}
	case r <= 3:
		return call{op: "delete-state", session: sid}
	case r <= 10:
		return call{op: "put-state", session: sid}
	case r <= 12 && len(files) > 0:
		return call{op: "delete-file", session: sid, file: files[w.rng.IntN(len(files))]}
	default:
		fid := kiln.NewID()
		if len(files) >= maxWriterFiles || len(files) > 0 && w.rng.IntN(2) == 0 {
			fid = files[w.rng.IntN(len(files))] // replaced in place
		}
		return call{op: "put-file", session: sid, file: fid}
	}
}

func (w *writer) note(format string, args ...any) {
	if _, err := fmt.Fprintf(w.journal, format, args...); err != nil {
		w.t.Fatal(err)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fromDash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// blob is what the writer stores at key: a header naming the key and the sequence
// number, up to 1 MiB of random bytes, and the SHA-256 of all that.
func blob(rng *rand.Rand, key string, seq int) []byte {
	n := rng.IntN(1 << 20)
	if rng.IntN(4) == 0 {
		n = rng.IntN(256) // many small ones too
	}
	b := fmt.Appendf(nil, "kiln-torn %s %d %d\n", key, seq, n)
	body := make([]byte, n)
	for i := 0; i < n; i += 8 {
		var word [8]byte
		binary.LittleEndian.PutUint64(word[:], rng.Uint64())
		copy(body[i:], word[:])
	}
	b = append(b, body...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// checkBlob tells whether b is a whole blob written for key.
func checkBlob(b []byte, key string) error {
	if len(b) < sha256.Size {
		return fmt.Errorf("%d bytes: shorter than its checksum", len(b))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return fmt.Errorf("%d bytes: torn, its checksum does not match", len(b))
	}
	head, _, _ := bytes.Cut(body, []byte{'\n'})
	if f := strings.Fields(string(head)); len(f) != 4 || f[1] != key {
		return fmt.Errorf("written for %q, found at %s", head, key)
	}
	return nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// snapshot is the store's content: "S" for a session, "S/state" and "S/<file>" for
// its blobs, each with the SHA-256 of its bytes ("" for a session).
type snapshot map[string]string

func (s snapshot) clone() snapshot { return maps.Clone(s) }

func (s snapshot) equal(o snapshot) bool { return maps.Equal(s, o) }

func (s snapshot) sessions() []string {
	var ids []string
	for k := range s {
		if !strings.Contains(k, "/") {
			ids = append(ids, k)
		}
	}
	return ids
}

func (s snapshot) String() string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		lines = append(lines, fmt.Sprintf("  %s %.12s", k, s[k]))
	}
	return strings.Join(lines, "\n")
}

// apply does to s what c did to the store.
func (s snapshot) apply(c call) {
	switch c.op {
	case "create":
		s[c.session] = ""
	case "delete-session":
		for k := range s {
			if k == c.session || strings.HasPrefix(k, c.session+"/") {
				delete(s, k)
			}
		}
	case "put-state":
		s[c.session+"/state"] = c.sha
	case "delete-state":
		delete(s, c.session+"/state")
	case "put-file":
		s[c.session+"/"+c.file] = c.sha
	case "delete-file":
		delete(s, c.session+"/"+c.file)
	}
}

// readBack opens the store as kiln would after a crash and reads every session, state
// and file, checking each blob is whole and where it belongs.
func readBack(t *testing.T, dir string) snapshot {
	t.Helper()
	ctx := context.Background()
	d, err := store.OpenDisk(dir, time.Hour)
	if err != nil {
		t.Fatalf("OpenDisk after the kill: %v", err)
	}
	defer d.Close()
	sessions, err := d.OwnerSessions(ctx, writerOwner, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := snapshot{}
	for _, s := range sessions {
		got[s.ID] = ""
		state, err := d.State(ctx, s.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if s.HasState {
				t.Fatalf("session %s says it has state, State says none", s.ID)
			}
		case err != nil:
			t.Fatalf("State(%s): %v", s.ID, err)
		default:
			if err := checkBlob(state, s.ID+"/state"); err != nil {
				t.Fatalf("state of %s: %v", s.ID, err)
			}
			got[s.ID+"/state"] = sha256Hex(state)
		}
		files, err := d.Files(ctx, s.ID)
		if err != nil {
			t.Fatalf("Files(%s): %v", s.ID, err)
		}
		for _, f := range files {
			_, data, err := d.File(ctx, s.ID, f.ID)
			if err != nil {
				t.Fatalf("File(%s, %s): %v", s.ID, f.ID, err)
			}
			if err := checkBlob(data, s.ID+"/"+f.ID); err != nil {
				t.Fatalf("file %s of %s: %v", f.ID, s.ID, err)
			}
			got[s.ID+"/"+f.ID] = sha256Hex(data)
		}
	}
	return got
}

// readJournal returns the calls that finished and the one under way at the kill, if
// any. A line cut by the kill is not a call noted.
func readJournal(t *testing.T, path string) (done []call, inFlight *call) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	complete := bytes.HasSuffix(b, []byte{'\n'})
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if !complete && len(lines) > 0 {
		lines = lines[:len(lines)-1]
	}
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 5 && f[0] == "call" && inFlight == nil:
			c := call{op: f[1], session: f[2], file: fromDash(f[3]), sha: fromDash(f[4])}
			inFlight = &c
		case len(f) == 1 && f[0] == "done" && inFlight != nil:
			done = append(done, *inFlight)
			inFlight = nil
		default:
			t.Fatalf("journal line %q out of order", line)
		}
	}
	return done, inFlight
}

// waitForJournal waits until the writer has noted its first call.
func waitForJournal(t *testing.T, path string, cmd *exec.Cmd) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	_ = cmd.Process.Kill()
	t.Fatal("the writer did not start writing within 30s")
}

// countLeftovers counts what writes cut short leave in the store's directory: names
// starting with ".".
func countLeftovers(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), ".") && path != dir {
			n++
			if e.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
