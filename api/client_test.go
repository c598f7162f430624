package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

const jsonCT = "application/json"

// newServer returns a Harness with auth on for keys (off when there are none).
func newServer(t *testing.T, keys ...string) *api.Harness {
	t.Helper()
	return api.NewHarness(t, api.HarnessConfig{Keys: keys})
}

// serve sends one request to h and returns the recorded response.
func serve(t *testing.T, h http.Handler, method, path, contentType, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

type errorEnvelope struct {
	Error     string `json:"error"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

// checkRequestID checks that the response carries a well-formed X-Request-Id.
func checkRequestID(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if id := rec.Header().Get("X-Request-Id"); !kiln.ValidID(id) {
		t.Errorf("got X-Request-Id %q, want a kiln id", id)
	}
}

// checkError checks an error response: its status, its envelope with exactly the
// fields error, message and request_id, and the request id matching the header.
func checkError(t *testing.T, rec *httptest.ResponseRecorder, status int, code kiln.Code) errorEnvelope {
	t.Helper()
	checkRequestID(t, rec)
	if rec.Code != status {
		t.Errorf("got status %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("got Content-Type %q, want application/json", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("got body %q, want a JSON error envelope: %v", rec.Body, err)
	}
	for _, k := range []string{"error", "message", "request_id"} {
		if _, ok := raw[k].(string); !ok {
			t.Errorf("got envelope %v, want string field %q", raw, k)
		}
	}
	if len(raw) != 3 {
		t.Errorf("got envelope %v, want only error, message and request_id", raw)
	}
	var env errorEnvelope
	_ = json.Unmarshal(rec.Body.Bytes(), &env)
	if env.Error != string(code) {
		t.Errorf("got error code %q (%s), want %q", env.Error, env.Message, code)
	}
	if env.Message == "" {
		t.Errorf("got an empty message, want a sentence")
	}
	if env.RequestID != rec.Header().Get("X-Request-Id") {
		t.Errorf("got request_id %q, want the X-Request-Id header %q", env.RequestID, rec.Header().Get("X-Request-Id"))
	}
	return env
}

// drain reads and closes a client response body.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// withKey returns the header that authenticates as key, or none for "".
func withKey(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"X-Api-Key": {key}}
}

// decode checks a 2xx JSON answer with status and decodes its body into a T.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder, status int) T {
	t.Helper()
	var v T
	if rec.Code != status {
		t.Fatalf("got status %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != jsonCT {
		t.Errorf("got Content-Type %q, want %s", ct, jsonCT)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("got body %q, want JSON: %v", rec.Body, err)
	}
	return v
}

// execFile is a file in an /exec answer.
type execFile struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	SessionID   string `json:"session_id"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
}

// execBody is the answer to POST /exec.
type execBody struct {
	SessionID string          `json:"session_id"`
	Status    string          `json:"status"`
	Stdout    string          `json:"stdout"`
	Stderr    string          `json:"stderr"`
	Files     []execFile      `json:"files"`
	Truncated bool            `json:"truncated"`
	State     json.RawMessage `json:"state"`
	HasState  bool            `json:"has_state"`
	StateSize int             `json:"state_size"`
}

// execOK runs body through POST /exec, which must answer 200.
func execOK(t *testing.T, h http.Handler, body string, header http.Header) execBody {
	t.Helper()
	return decode[execBody](t, serve(t, h, "POST", "/exec", jsonCT, body, header), http.StatusOK)
}

// mustJSON encodes v; the tests' bodies always encode.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// part is one field of a multipart body: a file when name is set.
type part struct {
	field, name, data string
}

// multipartBody encodes parts and returns the Content-Type and the body.
func multipartBody(t *testing.T, parts ...part) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p.name != "" {
			w, err = mw.CreateFormFile(p.field, p.name)
		} else {
			w, err = mw.CreateFormField(p.field)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, p.data)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.String()
}

// uploaded is the answer to POST /upload.
type uploaded struct {
	Message          string `json:"message"`
	SessionID        string `json:"session_id"`
	StorageSessionID string `json:"storage_session_id"`
	Files            []struct {
		FileID   string `json:"fileId"`
		Filename string `json:"filename"`
	} `json:"files"`
}

// upload stores files (name, then content, repeated) in a new session as the caller
// with header, and returns the session id and the file ids.
func upload(t *testing.T, h http.Handler, header http.Header, nameData ...string) (string, []string) {
	t.Helper()
	var parts []part
	for i := 0; i+1 < len(nameData); i += 2 {
		parts = append(parts, part{field: "files", name: nameData[i], data: nameData[i+1]})
	}
	ct, body := multipartBody(t, parts...)
	up := decode[uploaded](t, serve(t, h, "POST", "/upload", ct, body, header), http.StatusOK)
	var ids []string
	for _, f := range up.Files {
		ids = append(ids, f.FileID)
	}
	if len(ids) != len(parts) {
		t.Fatalf("got %d files uploaded, want %d", len(ids), len(parts))
	}
	return up.SessionID, ids
}
