package api_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

// TestWrongMethod: a route asked with a method it does not serve answers as a route
// that does not exist, in the envelope, under / and /v1 alike.
func TestWrongMethod(t *testing.T) {
	h := newServer(t)
	for _, r := range []struct{ method, path string }{
		{"DELETE", "/health"},
		{"PUT", "/exec"},
		{"GET", "/v1/exec"},
		{"POST", "/download/aaaaaaaaaaaaaaaaaaaaa/bbbbbbbbbbbbbbbbbbbbb"},
		{"PATCH", "/v1/sessions/aaaaaaaaaaaaaaaaaaaaa"},
	} {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			env := checkError(t, serve(t, h, r.method, r.path, "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
			if want := "no route " + r.method + " " + r.path; env.Message != want {
				t.Errorf("got message %q, want %q", env.Message, want)
			}
		})
	}
}

// TestNewWithoutKeys: a Config without Keys is a server with auth off.
func TestNewWithoutKeys(t *testing.T) {
	s := api.New(api.Config{Health: api.FakeHealth{}, Log: slog.New(slog.DiscardHandler)})
	rec := serve(t, s, "GET", "/health/detailed", "", "", nil)
	if got := decode[map[string]string](t, rec, http.StatusOK); got["status"] != "ok" {
		t.Errorf("got %v, want the detailed health, unauthenticated", got)
	}
	if rec := serve(t, s, "GET", "/stats", "", "", nil); rec.Code != http.StatusOK {
		t.Errorf("GET /stats: got %d, want 200 with auth off", rec.Code)
	}
}
