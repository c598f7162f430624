package api_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

// TestAuth runs over a real HTTP connection so that header names reach the server in
// the case the client wrote them.
func TestAuth(t *testing.T) {
	const key = "k1-secret"
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name   string
		header map[string]string // written verbatim, without canonicalising the name
		ok     bool
	}{
		{"no key", nil, false},
		{"X-API-Key", map[string]string{"X-API-Key": key}, true},
		{"x-api-key lower case", map[string]string{"x-api-key": key}, true},
		{"X-API-KEY upper case", map[string]string{"X-API-KEY": key}, true},
		{"second configured key", map[string]string{"X-Api-Key": "k2-other"}, true},
		{"Bearer", map[string]string{"Authorization": "Bearer " + key}, true},
		{"bearer lower case", map[string]string{"authorization": "bearer " + key}, true},
		{"Basic KEY:", map[string]string{"Authorization": basic(key + ":")}, true},
		{"wrong X-API-Key", map[string]string{"X-API-Key": "nope"}, false},
		{"key with a suffix", map[string]string{"X-API-Key": key + "x"}, false},
		{"key prefix", map[string]string{"X-API-Key": key[:3]}, false},
		{"wrong Bearer", map[string]string{"Authorization": "Bearer nope"}, false},
		{"Bearer without a key", map[string]string{"Authorization": "Bearer "}, false},
		{"wrong Basic", map[string]string{"Authorization": basic("nope:")}, false},
		{"Basic not base64", map[string]string{"Authorization": "Basic %%%"}, false},
		{"unknown scheme", map[string]string{"Authorization": "Digest " + key}, false},
		{"Jupyter's token scheme", map[string]string{"Authorization": "token " + key}, true},
		{"key without a scheme", map[string]string{"Authorization": key}, false},
	}
	srv := httptest.NewServer(newServer(t, key, " k2-other ", ""))
	defer srv.Close()
	for _, tt := range tests {
		for _, path := range []string{"/exec", "/v1/exec"} {
			t.Run(tt.name+" "+path, func(t *testing.T) {
				req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"code":"1"}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				for k, v := range tt.header {
					req.Header[k] = []string{v}
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatalf("request: %v", err)
				}
				defer drain(resp)
				if resp.Header.Get("X-Request-Id") == "" {
					t.Errorf("got no X-Request-Id, want one")
				}
				want := http.StatusOK
				if !tt.ok {
					want = http.StatusUnauthorized
				}
				if resp.StatusCode != want {
					t.Errorf("got status %d, want %d", resp.StatusCode, want)
				}
				if !tt.ok && resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("got no WWW-Authenticate on a 401, want one")
				}
			})
		}
	}
}

func TestAuthEnvelopeAndOpenRoutes(t *testing.T) {
	h := newServer(t, "secret")
	t.Run("401 envelope", func(t *testing.T) {
		rec := serve(t, h, "POST", "/exec", "application/json", `{"code":"1"}`, nil)
		checkError(t, rec, 401, kiln.CodeUnauthorized)
	})
	t.Run("401 before the body is judged", func(t *testing.T) {
		rec := serve(t, h, "POST", "/exec", "text/plain", `junk`, nil)
		checkError(t, rec, 401, kiln.CodeUnauthorized)
	})
	for _, path := range []string{"/health", "/health/live", "/health/ready", "/v1/health", "/v1/health/live", "/v1/health/ready"} {
		t.Run("open "+path, func(t *testing.T) {
			rec := serve(t, h, "GET", path, "", "", nil)
			checkRequestID(t, rec)
			if rec.Code != 200 {
				t.Errorf("got status %d without a key, want 200", rec.Code)
			}
		})
	}
	for _, path := range []string{"/health/detailed", "/v1/health/detailed"} {
		t.Run("closed "+path, func(t *testing.T) {
			checkError(t, serve(t, h, "GET", path, "", "", nil), 401, kiln.CodeUnauthorized)
			rec := serve(t, h, "GET", path, "", "", http.Header{"X-Api-Key": {"secret"}})
			if rec.Code != 200 {
				t.Errorf("got status %d with the key, want 200", rec.Code)
			}
		})
	}
	t.Run("auth off without keys", func(t *testing.T) {
		open := newServer(t)
		rec := serve(t, open, "POST", "/exec", "application/json", `{"code":"1"}`, nil)
		if rec.Code != 200 {
			t.Errorf("got status %d with auth off, want 200", rec.Code)
		}
	})
}

// TestOwnership: what one key created, another key cannot see, change or run in: every
// route answers as if it did not exist. The same holds between two users of one key.
func TestOwnership(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"key-a", "key-b"}})
	type caller struct {
		name   string
		header http.Header
	}
	tests := []struct {
		owner, other caller
	}{
		{caller{"key-a", withKey("key-a")}, caller{"key-b", withKey("key-b")}},
		{caller{"user u1", http.Header{"X-Api-Key": {"key-a"}, "User-Id": {"u1"}}},
			caller{"user u2", http.Header{"X-Api-Key": {"key-a"}, "User-Id": {"u2"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.other.name+" on "+tt.owner.name+"'s", func(t *testing.T) {
			sid, ids := upload(t, h, tt.owner.header, "secret.txt", "s3cret")
			blob := api.LZ4Frame(t, []byte("token = 's3cret'"))
			if rec := serve(t, h, "POST", "/state/"+sid, "", string(blob), tt.owner.header); rec.Code != http.StatusCreated {
				t.Fatalf("put state: got %d, want 201 (body %s)", rec.Code, rec.Body)
			}
			file := "/" + sid + "/" + ids[0]
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/sessions/" + sid, ""},
				{"DELETE", "/sessions/" + sid, ""},
				{"GET", "/state/" + sid, ""},
				{"GET", "/state/" + sid + "/info", ""},
				{"POST", "/state/" + sid, string(blob)},
				{"DELETE", "/state/" + sid, ""},
				{"GET", "/download" + file, ""},
				{"DELETE", "/files" + file, ""},
				{"POST", "/exec", `{"code":"1","files":[{"id":"` + ids[0] + `","session_id":"` + sid + `"}]}`},
			} {
				ct := ""
				if r.path == "/exec" {
					ct = jsonCT
				}
				// A run's file reference to another's file is refused as LibreChat's client
				// expects (403); everything else answers as if nothing were there.
				status, code := http.StatusNotFound, kiln.CodeNotFound
				if r.path == "/exec" {
					status, code = http.StatusForbidden, kiln.CodeForbidden
				}
				checkError(t, serve(t, h, r.method, r.path, ct, r.body, tt.other.header), status, code)
			}
			if list := decode[[]any](t, serve(t, h, "GET", "/files/"+sid, "", "", tt.other.header), http.StatusOK); len(list) != 0 {
				t.Errorf("listing the files: got %v, want []", list)
			}
			runs := len(h.Requests())
			if got := execOK(t, h, `{"code":"1","session_id":"`+sid+`"}`, tt.other.header); got.SessionID == sid {
				t.Errorf("exec with the session_id: got the owner's session, want a new one")
			}
			if req := h.Requests()[runs]; req.State != nil || len(req.Files) != 0 {
				t.Errorf("exec with the session_id: run given state %q and files %+v, want neither", req.State, req.Files)
			}
			// The owner still has it all.
			if rec := serve(t, h, "GET", "/download"+file, "", "", tt.owner.header); rec.Body.String() != "s3cret" {
				t.Errorf("owner's download: got %d %q, want the file", rec.Code, rec.Body)
			}
			if info := decode[map[string]any](t, serve(t, h, "GET", "/state/"+sid+"/info", "", "", tt.owner.header), http.StatusOK); info["exists"] != true {
				t.Errorf("owner's state: got %v, want it kept", info)
			}
		})
	}
}
