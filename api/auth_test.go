package api_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
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
		{"unknown scheme", map[string]string{"Authorization": "Token " + key}, false},
		{"key without a scheme", map[string]string{"Authorization": key}, false},
	}
	srv := httptest.NewServer(newServer(t, []string{key, " k2-other ", ""}, &fakeRunner{}, nil))
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
	h := newServer(t, []string{"secret"}, &fakeRunner{}, nil)
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
		open := newServer(t, nil, &fakeRunner{}, nil)
		rec := serve(t, open, "POST", "/exec", "application/json", `{"code":"1"}`, nil)
		if rec.Code != 200 {
			t.Errorf("got status %d with auth off, want 200", rec.Code)
		}
	})
}
