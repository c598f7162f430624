package api_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

// stateInfo is the answer to GET /state/{id}/info.
type stateInfo struct {
	Exists    bool    `json:"exists"`
	Size      int64   `json:"size"`
	SHA256    *string `json:"sha256"`
	CreatedAt *string `json:"created_at"`
	ExpiresAt string  `json:"expires_at"`
}

// putState posts blob as the state of session sid, which must answer 201.
func putState(t *testing.T, h http.Handler, sid string, blob []byte) {
	t.Helper()
	rec := serve(t, h, "POST", "/state/"+sid, "application/octet-stream", string(blob), nil)
	if got := decode[map[string]int](t, rec, http.StatusCreated); got["size"] != len(blob) || len(got) != 1 {
		t.Errorf("got %v, want {size: %d}", got, len(blob))
	}
}

func TestStateRoutes(t *testing.T) {
	h := newServer(t)
	sid, _ := upload(t, h, nil, "a.txt", "a")
	base := "/state/" + sid

	t.Run("none yet", func(t *testing.T) {
		checkError(t, serve(t, h, "GET", base, "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
		info := decode[stateInfo](t, serve(t, h, "GET", base+"/info", "", "", nil), http.StatusOK)
		if info.Exists || info.Size != 0 || info.SHA256 != nil || info.CreatedAt != nil || !apiTime.MatchString(info.ExpiresAt) {
			t.Errorf("got %+v, want no state, null sha256 and created_at, and an expiry", info)
		}
	})

	blob := api.LZ4Frame(t, []byte(strings.Repeat("namespace ", 50)))
	sum := sha256.Sum256(blob)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	putState(t, h, sid, blob)

	t.Run("GET", func(t *testing.T) {
		rec := serve(t, h, "GET", base, "", "", nil)
		if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), blob) {
			t.Fatalf("got %d with %d bytes, want 200 with the %d put", rec.Code, rec.Body.Len(), len(blob))
		}
		want := map[string]string{"ETag": etag, "Content-Type": "application/octet-stream", "Content-Length": strconv.Itoa(len(blob))}
		for k, v := range want {
			if got := rec.Header().Get(k); got != v {
				t.Errorf("%s: got %q, want %q", k, got, v)
			}
		}
	})

	for _, tt := range []struct {
		name, match string
		status      int
	}{
		{"If-None-Match the tag", etag, http.StatusNotModified},
		{"If-None-Match a list with the tag", `"other", ` + etag, http.StatusNotModified},
		{"If-None-Match *", "*", http.StatusNotModified},
		{"If-None-Match another tag", `"0123"`, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, h, "GET", base, "", "", http.Header{"If-None-Match": {tt.match}})
			if rec.Code != tt.status {
				t.Errorf("got status %d, want %d", rec.Code, tt.status)
			}
			if got := rec.Header().Get("ETag"); got != etag {
				t.Errorf("got ETag %q, want %q", got, etag)
			}
			if tt.status == http.StatusNotModified && rec.Body.Len() != 0 {
				t.Errorf("got a body of %d bytes with a 304, want none", rec.Body.Len())
			}
		})
	}

	t.Run("info", func(t *testing.T) {
		info := decode[stateInfo](t, serve(t, h, "GET", base+"/info", "", "", nil), http.StatusOK)
		if !info.Exists || info.Size != int64(len(blob)) || info.SHA256 == nil || `"`+*info.SHA256+`"` != etag {
			t.Errorf("got %+v, want exists, size %d, sha256 %s", info, len(blob), etag)
		}
		if info.CreatedAt == nil || !apiTime.MatchString(*info.CreatedAt) || !apiTime.MatchString(info.ExpiresAt) {
			t.Errorf("got created_at %v, expires_at %q, want both in the API's time format", info.CreatedAt, info.ExpiresAt)
		}
	})

	t.Run("restored in the session's next run", func(t *testing.T) {
		execOK(t, h, `{"code":"1","session_id":"`+sid+`"}`, nil)
		reqs := h.Requests()
		if got := reqs[len(reqs)-1].State; !bytes.Equal(got, blob) {
			t.Errorf("got state of %d bytes, want the %d put", len(got), len(blob))
		}
	})

	t.Run("DELETE", func(t *testing.T) {
		for range 2 { // deleting what does not exist is a 204 too
			if rec := serve(t, h, "DELETE", base, "", "", nil); rec.Code != http.StatusNoContent {
				t.Errorf("got status %d, want 204 (body %s)", rec.Code, rec.Body)
			}
		}
		checkError(t, serve(t, h, "GET", base, "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
		if info := decode[stateInfo](t, serve(t, h, "GET", base+"/info", "", "", nil), http.StatusOK); info.Exists {
			t.Errorf("got %+v, want no state", info)
		}
		if rec := serve(t, h, "GET", "/download/"+sid+"/x", "", "", nil); rec.Code != http.StatusNotFound {
			t.Errorf("got %d, want 404", rec.Code)
		}
	})
}

func TestPutStateRefused(t *testing.T) {
	h := newServer(t)
	sid, _ := upload(t, h, nil, "a.txt", "a")
	noisy := make([]byte, api.TestLimits.MaxStateBytes) // random: it does not compress
	_, _ = rand.Read(noisy)
	tests := []struct {
		name   string
		sid    string
		body   []byte
		status int
		code   kiln.Code
	}{
		{"not an LZ4 frame", sid, []byte("pickle"), 400, kiln.CodeInvalid},
		{"empty", sid, nil, 400, kiln.CodeInvalid},
		{"a cut frame", sid, api.LZ4Frame(t, noisy)[:100], 400, kiln.CodeInvalid},
		{"over the blob limit", sid, api.LZ4Frame(t, noisy), 413, kiln.CodeTooLarge},
		{"decompressing past the limit", sid, api.LZ4Frame(t, make([]byte, api.TestLimits.MaxStateRaw+1)), 413, kiln.CodeTooLarge},
		{"unknown session", "aaaaaaaaaaaaaaaaaaaaa", api.LZ4Frame(t, []byte("x")), 404, kiln.CodeNotFound},
		{"malformed session", "..", api.LZ4Frame(t, []byte("x")), 404, kiln.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, h, "POST", "/state/"+tt.sid, "application/octet-stream", string(tt.body), nil)
			checkError(t, rec, tt.status, tt.code)
		})
	}
	if info := decode[stateInfo](t, serve(t, h, "GET", "/state/"+sid+"/info", "", "", nil), http.StatusOK); info.Exists {
		t.Errorf("got %+v after refused puts, want no state", info)
	}
	for _, path := range []string{"/state/x", "/state/x/info"} {
		checkError(t, serve(t, h, "GET", path, "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
	}
	checkError(t, serve(t, h, "DELETE", "/state/x", "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
}

// sessionBody is the answer to GET /sessions/{id}.
type sessionBody struct {
	SessionID  string     `json:"session_id"`
	CreatedAt  string     `json:"created_at"`
	LastUsedAt string     `json:"last_used_at"`
	ExpiresAt  string     `json:"expires_at"`
	HasState   bool       `json:"has_state"`
	StateSize  int64      `json:"state_size"`
	Files      []execFile `json:"files"`
}

func TestSessionRoutes(t *testing.T) {
	h := newServer(t)
	sid, ids := upload(t, h, nil, "a.txt", "a")
	blob := api.LZ4Frame(t, []byte("x = 1"))
	putState(t, h, sid, blob)

	got := decode[sessionBody](t, serve(t, h, "GET", "/sessions/"+sid, "", "", nil), http.StatusOK)
	if got.SessionID != sid || !got.HasState || got.StateSize != int64(len(blob)) {
		t.Errorf("got %+v, want session %s with a state of %d bytes", got, sid, len(blob))
	}
	for name, ts := range map[string]string{"created_at": got.CreatedAt, "last_used_at": got.LastUsedAt, "expires_at": got.ExpiresAt} {
		if !apiTime.MatchString(ts) {
			t.Errorf("%s: got %q, want the API's time format", name, ts)
		}
	}
	want := execFile{ID: ids[0], Name: "a.txt", SessionID: sid, Size: 1, ContentType: "text/plain; charset=utf-8"}
	if len(got.Files) != 1 || got.Files[0] != want {
		t.Errorf("got files %+v, want %+v", got.Files, want)
	}

	steps := []struct {
		name, method, path string
		status             int
	}{
		{"delete", "DELETE", "/sessions/" + sid, http.StatusNoContent},
		{"gone", "GET", "/sessions/" + sid, http.StatusNotFound},
		{"delete again", "DELETE", "/sessions/" + sid, http.StatusNotFound},
		{"its state gone", "GET", "/state/" + sid, http.StatusNotFound},
		{"its files gone", "GET", "/download/" + sid + "/" + ids[0], http.StatusNotFound},
		{"malformed id", "GET", "/sessions/x", http.StatusNotFound},
		{"delete malformed id", "DELETE", "/sessions/x", http.StatusNotFound},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			rec := serve(t, h, st.method, st.path, "", "", nil)
			if st.status == http.StatusNotFound {
				checkError(t, rec, st.status, kiln.CodeNotFound)
			} else if rec.Code != st.status {
				t.Errorf("got status %d, want %d (body %s)", rec.Code, st.status, rec.Body)
			}
		})
	}
}
