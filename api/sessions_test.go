package api_test

import (
	"net/http"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

type sessionPage struct {
	Sessions []struct {
		SessionID string `json:"session_id"`
		HasState  bool   `json:"has_state"`
	} `json:"sessions"`
	NextOffset *int `json:"next_offset"`
}

func TestListSessions(t *testing.T) {
	h := newServer(t)
	var newest []string
	for range 3 {
		sid, _ := upload(t, h, nil, "a.txt", "a")
		newest = append([]string{sid}, newest...)
	}
	page := func(q string) sessionPage {
		t.Helper()
		return decode[sessionPage](t, serve(t, h, "GET", "/sessions"+q, "", "", nil), http.StatusOK)
	}
	got := page("?limit=2")
	if len(got.Sessions) != 2 || got.NextOffset == nil || *got.NextOffset != 2 {
		t.Fatalf("first page = %+v, want 2 sessions and next_offset 2", got)
	}
	rest := page("?limit=2&offset=2")
	if len(rest.Sessions) != 1 || rest.NextOffset != nil {
		t.Fatalf("last page = %+v, want 1 session and no next_offset", rest)
	}
	var ids []string
	for _, s := range append(got.Sessions, rest.Sessions...) {
		ids = append(ids, s.SessionID)
	}
	for i := range newest {
		if ids[i] != newest[i] {
			t.Fatalf("sessions = %v, want newest first %v", ids, newest)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?offset=-1", "?limit=201"} {
		checkError(t, serve(t, h, "GET", "/sessions"+q, "", "", nil), http.StatusBadRequest, kiln.CodeInvalid)
	}
}

func TestForkSession(t *testing.T) {
	h := newServer(t)
	sid, _ := upload(t, h, nil, "a.txt", "a")
	putState(t, h, sid, api.LZ4Frame(t, []byte("x = 1")))
	type forked struct {
		SessionID  string     `json:"session_id"`
		ForkedFrom string     `json:"forked_from"`
		HasState   bool       `json:"has_state"`
		Files      []execFile `json:"files"`
	}
	got := decode[forked](t, serve(t, h, "POST", "/sessions/"+sid+"/fork", "", "", nil), http.StatusCreated)
	if got.SessionID == sid || got.ForkedFrom != sid || !got.HasState || len(got.Files) != 1 || got.Files[0].SessionID != got.SessionID {
		t.Errorf("fork = %+v, want a new session with the state and a.txt", got)
	}
	checkError(t, serve(t, h, "POST", "/sessions/"+kiln.NewID()+"/fork", "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
}
