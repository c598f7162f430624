package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/store"
)

// testTTL is how long sessions live in the tests' stores.
const testTTL = time.Hour

// Callers of the tests: two keys, and two users of the first key.
var (
	alice   = Caller{Key: "key-a"}
	aliceU1 = Caller{Key: "key-a", User: "u1"}
	aliceU2 = Caller{Key: "key-a", User: "u2"}
	bob     = Caller{Key: "key-b"}
	anon    = Caller{} // authentication off
)

var testLimits = Limits{MaxFileBytes: 1 << 10, MaxFilesPerSession: 5}

// fakeRunner records the requests it gets and answers each with a copy of result.
type fakeRunner struct {
	mu     sync.Mutex
	reqs   []executor.Request
	result executor.Result
	err    error
}

func (f *fakeRunner) Run(_ context.Context, req executor.Request) (*executor.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	res := f.result
	res.Files = slices.Clone(f.result.Files)
	return &res, nil
}

// calls returns the requests the runner got.
func (f *fakeRunner) calls() []executor.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// only returns the one request the runner got, failing the test otherwise.
func (f *fakeRunner) only(t *testing.T) executor.Request {
	t.Helper()
	reqs := f.calls()
	if len(reqs) != 1 {
		t.Fatalf("runner called %d times, want 1", len(reqs))
	}
	return reqs[0]
}

// spyStore is the real disk store, counting state writes and, like the Redis store,
// refusing files over maxFile bytes when maxFile is set.
type spyStore struct {
	store.Store
	maxFile int64

	mu        sync.Mutex
	statePuts int
}

func (s *spyStore) PutState(ctx context.Context, id string, blob []byte) error {
	s.mu.Lock()
	s.statePuts++
	s.mu.Unlock()
	return s.Store.PutState(ctx, id, blob)
}

func (s *spyStore) PutFile(ctx context.Context, f *store.File, content io.Reader, size int64) error {
	if s.maxFile > 0 && size > s.maxFile {
		return fmt.Errorf("put file: %d bytes: %w", size, store.ErrTooLarge)
	}
	return s.Store.PutFile(ctx, f, content, size)
}

func (s *spyStore) puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statePuts
}

// validateCode is the tests' Config.Validate: it refuses empty code but a flush's, as the executor does.
func validateCode(req *executor.Request) error {
	if strings.TrimSpace(req.Code) == "" && !req.Flush {
		return kiln.Errorf(kiln.CodeInvalid, "code is empty")
	}
	return nil
}

type testEnv struct {
	svc *Service
	st  *spyStore
	run *fakeRunner
	dir string
	// checkState is what the Service checks a put state blob with; it accepts any.
	checkState func(blob []byte) error
}

// newEnv returns a Service over a fresh disk store and a fake runner that succeeds.
func newEnv(t *testing.T, limits Limits) *testEnv {
	t.Helper()
	dir := t.TempDir()
	d, err := store.OpenDisk(dir, testTTL)
	if err != nil {
		t.Fatalf("OpenDisk: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	st := &spyStore{Store: d}
	run := &fakeRunner{result: executor.Result{Status: execution.StatusOK, Stdout: "out\n"}}
	e := &testEnv{st: st, run: run, dir: dir, checkState: func([]byte) error { return nil }}
	e.svc = New(Config{
		Store: st, Runner: run, Validate: validateCode, Limits: limits, Log: slog.New(slog.DiscardHandler),
		CheckState: func(blob []byte) error { return e.checkState(blob) },
	})
	return e
}

// session creates a live session for c.
func (e *testEnv) session(t *testing.T, c Caller, entity string) *store.Session {
	t.Helper()
	sess, err := e.svc.newSession(t.Context(), c, kiln.NewID(), entity)
	if err != nil {
		t.Fatalf("newSession: %v", err)
	}
	return sess
}

// expiredSession creates a session for c whose last use is two TTLs ago.
func (e *testEnv) expiredSession(t *testing.T, c Caller, entity string) *store.Session {
	t.Helper()
	past := time.Now().Add(-2 * testTTL)
	sess := &store.Session{ID: kiln.NewID(), Owner: c.owner(), EntityID: entity, CreatedAt: past, LastUsedAt: past}
	if err := e.st.CreateSession(t.Context(), sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess
}

// touch moves a session's last use forward by d.
func (e *testEnv) touch(t *testing.T, sid string, d time.Duration) {
	t.Helper()
	if err := e.st.TouchSession(t.Context(), sid, time.Now().Add(d)); err != nil {
		t.Fatalf("TouchSession: %v", err)
	}
}

// file stores a file in a session.
func (e *testEnv) file(t *testing.T, sid, name, data string) *store.File {
	t.Helper()
	f := &store.File{ID: kiln.NewID(), SessionID: sid, Name: name, ContentType: ContentType(name)}
	if err := e.st.Store.PutFile(t.Context(), f, strings.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	return f
}

// putState sets a session's state blob in the store.
func (e *testEnv) putState(t *testing.T, sid, blob string) {
	t.Helper()
	if err := e.st.Store.PutState(t.Context(), sid, []byte(blob)); err != nil {
		t.Fatalf("PutState: %v", err)
	}
}

// state returns a session's stored state, or nil when it has none.
func (e *testEnv) state(t *testing.T, sid string) []byte {
	t.Helper()
	blob, err := e.st.State(t.Context(), sid)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return blob
}

// storedNames returns the names of a session's files, in the store's order.
func (e *testEnv) storedNames(t *testing.T, sid string) []string {
	t.Helper()
	list, err := e.st.Files(t.Context(), sid)
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	return names
}

// sessionIDs lists the sessions on disk, whoever owns them: the disk store keeps one
// directory per session under sessions/, and hides work in progress behind a dot.
func (e *testEnv) sessionIDs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.dir, "sessions"))
	if err != nil {
		t.Fatalf("reading the store's directory: %v", err)
	}
	var ids []string
	for _, ent := range entries {
		if !strings.HasPrefix(ent.Name(), ".") {
			ids = append(ids, ent.Name())
		}
	}
	return ids
}

// wantCode fails the test unless err is a *kiln.Error with the given code.
func wantCode(t *testing.T, err error, want kiln.Code) {
	t.Helper()
	var ke *kiln.Error
	if !errors.As(err, &ke) {
		t.Fatalf("error = %v, want a *kiln.Error with code %s", err, want)
	}
	if ke.Code != want {
		t.Fatalf("error code = %s (%v), want %s", ke.Code, err, want)
	}
}

// execReq returns a valid request that captures state.
func execReq() ExecRequest {
	return ExecRequest{Request: execution.Request{Lang: execution.LangPython, Code: "x = 1", CaptureState: true}}
}
