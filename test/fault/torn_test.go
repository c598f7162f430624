package fault

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln/test/kilntest"
)

// kiln killed (SIGKILL) while clients replace session states, then started again on
// the same DATA_DIR, a few times over: every session's state is the last one a call
// was answered 201 for, or the one whose call had no answer yet at the kill; never a
// torn blob, an older one, or nothing. The files uploaded at the start are all there.
// test/soak kills kiln under a mixed load; this is the disk store's part of it, from
// the outside (store/disk_kill_test.go kills the store's own writer).
func TestStateWritesSurviveKill(t *testing.T) {
	const (
		sessions = 4
		rounds   = 3
	)
	dir, instance := t.TempDir(), fmt.Sprintf("test-torn-%08x", rand.Uint32())
	t.Cleanup(func() {
		if left, err := kilntest.Containers(instance); err != nil || len(left) > 0 {
			t.Errorf("containers of %s left: %v (err %v)", instance, left, err)
		}
	})
	s := startOn(t, dir, instance)

	type session struct {
		id, file string
		acked    string // sha256 of the state last answered 201, or "" for none
		inFlight string // sha256 of a state sent and not answered at the kill
	}
	all := make([]*session, sessions)
	for i := range all {
		id, file := uploadOne(t, s, fmt.Sprintf("input-%d.txt", i))
		all[i] = &session{id: id, file: file}
	}
	for round := range rounds {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		acks := make([]int, sessions)
		for i, sess := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					blob, err := stateBlob(fmt.Sprintf("%s round %d call %d", sess.id, round, n))
					if err != nil {
						t.Error(err)
						return
					}
					sum := sha(blob)
					sess.inFlight = sum
					resp, body, err := s.Request(http.MethodPost, "/state/"+sess.id, bytes.NewReader(blob),
						http.Header{"Content-Type": {"application/octet-stream"}})
					if err != nil {
						return // the kill: this call may or may not have landed
					}
					if resp.StatusCode != http.StatusCreated {
						t.Errorf("POST /state/%s: %d %s", sess.id, resp.StatusCode, body)
						return
					}
					sess.acked, sess.inFlight = sum, ""
					acks[i]++
				}
			}()
		}
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		s.Kill()
		close(stop)
		wg.Wait()
		unanswered := 0
		for _, sess := range all {
			if sess.inFlight != "" {
				unanswered++
			}
		}
		t.Logf("round %d: killed after %v states answered 201, with %d calls unanswered", round, acks, unanswered)

		s = startOn(t, dir, instance)
		for _, sess := range all {
			resp, blob, err := s.Request(http.MethodGet, "/state/"+sess.id, nil, nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("round %d: GET /state/%s after the restart: %v %d %s", round, sess.id, err, statusOf(resp), blob)
			}
			got := sha(blob)
			if got != sess.acked && got != sess.inFlight {
				t.Errorf("round %d: session %s holds state %.12s (%d bytes), want the last answered %.12s or the unanswered %.12s",
					round, sess.id, got, len(blob), sess.acked, sess.inFlight)
			}
			if _, err := lz4.NewReader(bytes.NewReader(blob)).WriteTo(discard{}); err != nil {
				t.Errorf("round %d: the state of %s does not decompress: %v", round, sess.id, err)
			}
			sess.acked, sess.inFlight = got, ""
			if files := listFiles(t, s, sess.id); len(files) != 1 || files[0] != sess.file {
				t.Errorf("round %d: session %s lists files %v, want [%s]", round, sess.id, files, sess.file)
			}
		}
	}
}

// startOn starts a kiln on dir as instance, without waiting for its pool (the state
// routes need no sandbox), and stops it when the test ends unless it died before.
func startOn(t *testing.T, dir, instance string) *kilntest.Server {
	t.Helper()
	s, err := kilntest.Start(kilntest.Options{Key: key, NoWait: true, Env: []string{
		"API_KEYS=" + key, "DATA_DIR=" + dir, "INSTANCE_ID=" + instance, "POOL_SIZE=1",
		"SANDBOX_MEMORY_MB=256", "SANDBOX_DATA_MB=64",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-s.Exited():
		default:
			if err := s.Stop(60 * time.Second); err != nil {
				t.Errorf("kiln did not stop cleanly: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("--- kiln log (tail) ---\n%s", tail(s.Logs(), 6000))
		}
	})
	return s
}

// stateBlob is a state the API accepts: one LZ4 frame, here of 1 to 3 MiB that do not
// compress, so that each write takes a while, led by a line naming the call.
func stateBlob(name string) ([]byte, error) {
	raw := make([]byte, 1<<20+rand.IntN(2<<20))
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
	_, _ = rand.NewChaCha8(seed).Read(raw) // never fails
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	_, err := zw.Write(append([]byte(name+"\n"), raw...))
	if err == nil {
		err = zw.Close()
	}
	return buf.Bytes(), err
}

// uploadOne uploads one small file into a new session; it returns the session and file.
func uploadOne(t *testing.T, s *kilntest.Server, name string) (string, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, err := mw.CreateFormFile("file", name)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(w, "the contents of %s\n", name)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	resp, b, err := s.Request(http.MethodPost, "/upload", &body, http.Header{"Content-Type": {mw.FormDataContentType()}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /upload: %v %d %s", err, statusOf(resp), b)
	}
	var out struct {
		SessionID string `json:"session_id"`
		Files     []struct {
			FileID string `json:"fileId"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Files) != 1 {
		t.Fatalf("POST /upload answered %s (%v)", b, err)
	}
	return out.SessionID, out.Files[0].FileID
}

// listFiles returns the ids of a session's files.
func listFiles(t *testing.T, s *kilntest.Server, sid string) []string {
	t.Helper()
	resp, b, err := s.Request(http.MethodGet, "/files/"+sid+"?detail=full", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /files/%s: %v %d %s", sid, err, statusOf(resp), b)
	}
	var files []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &files); err != nil {
		t.Fatalf("GET /files/%s answered %s (%v)", sid, b, err)
	}
	ids := make([]string, len(files))
	for i, f := range files {
		ids[i] = f.ID
	}
	return ids
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
