package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/kilnsh/kiln/api"
)

// fakeE2B stands for package e2b: it records which of its two entries each request
// reached, and whether the writer it was given can stream.
type fakeE2B struct {
	mu      sync.Mutex
	control []string
	boxes   []string
	flusher []bool
}

func (f *fakeE2B) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.control = append(f.control, r.URL.Path)
	f.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (f *fakeE2B) Sandbox(w http.ResponseWriter, r *http.Request) {
	_, ok := w.(http.Flusher)
	f.mu.Lock()
	f.boxes = append(f.boxes, r.URL.Path)
	f.flusher = append(f.flusher, ok)
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// TestE2BRoutes: the control plane sits behind the key and answers refusals in E2B's
// shape; a request naming a sandbox reaches the sandbox's handler whatever its path,
// without a key, on a writer that streams (Connect's handlers assert http.Flusher).
func TestE2BRoutes(t *testing.T) {
	f := &fakeE2B{}
	s := api.New(api.Config{
		Keys: api.NewKeys([]string{"k1"}), Log: slog.New(slog.DiscardHandler),
		MaxBodyBytes: api.TestMaxBody, E2B: f,
	})
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/i1/timeout", "/v2/sandboxes/i1/connect"} {
		if rec := serve(t, s, "POST", path, jsonCT, `{}`, withKey("k1")); rec.Code != http.StatusCreated {
			t.Errorf("POST %s with the key: got %d, want the control plane's 201", path, rec.Code)
		}
		rec := serve(t, s, "POST", path, jsonCT, `{}`, nil)
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusUnauthorized || body.Code != http.StatusUnauthorized || body.Message == "" {
			t.Errorf("POST %s without a key: got %d %s, want 401 with E2B's {code: 401, message}", path, rec.Code, rec.Body)
		}
	}
	box := http.Header{"E2b-Sandbox-Id": {"i1"}, "E2b-Sandbox-Port": {"49983"}}
	for _, path := range []string{"/process.Process/Start", "/files", "/health", "/v1/exec"} {
		if rec := serve(t, s, "POST", path, "application/connect+json", `{}`, box); rec.Code != http.StatusOK {
			t.Errorf("POST %s for a sandbox: got %d, want the sandbox handler's 200", path, rec.Code)
		}
	}
	// A signed URL from downloadUrl, opened by a browser: no header, its signature names its sandbox.
	if rec := serve(t, s, "GET", "/files?path=a.txt&signature=v1_x", "", "", nil); rec.Code != http.StatusOK {
		t.Errorf("GET of a signed /files URL: got %d, want the sandbox handler's 200", rec.Code)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.control) != 4 || len(f.boxes) != 5 {
		t.Fatalf("control plane heard %v, sandboxes %v; want 4 and 5", f.control, f.boxes)
	}
	for i, ok := range f.flusher {
		if !ok {
			t.Errorf("the sandbox handler's writer for %s is no http.Flusher", f.boxes[i])
		}
	}
}
