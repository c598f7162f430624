package api_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

// uploadTo uploads one file, name with data, under the multipart fields before it, and
// returns the session and the file ids.
func uploadTo(t *testing.T, h http.Handler, name, data string, fields ...part) (string, string) {
	t.Helper()
	ct, body := multipartBody(t, append(fields, part{"file", name, data})...)
	up := decode[uploaded](t, serve(t, h, "POST", "/upload", ct, body, nil), http.StatusOK)
	return up.SessionID, up.Files[0].FileID
}

// TestExecScopedFileRefs: a file reference names whose session it is in (kind,
// resource_id, version, as LibreChat sends them); only the scope the file was uploaded
// to places it.
func TestExecScopedFileRefs(t *testing.T) {
	h := newServer(t)
	sid, fid := uploadTo(t, h, "slides.md", "# deck", part{"kind", "", "skill"}, part{"id", "", "pptx"}, part{"version", "", "2"})
	ref := func(extra string) string {
		return `{"code":"1","files":[{"id":"` + fid + `","storage_session_id":"` + sid + `"` + extra + `}]}`
	}
	tests := []struct {
		name   string
		body   string
		status int
		code   kiln.Code
	}{
		{"version as a number", ref(`,"kind":"skill","resource_id":"pptx","version":2`), 200, ""},
		{"version as a string", ref(`,"kind":"skill","resource_id":"pptx","version":"2"`), 200, ""},
		{"another version", ref(`,"kind":"skill","resource_id":"pptx","version":3`), 403, kiln.CodeForbidden},
		{"another skill", ref(`,"kind":"skill","resource_id":"docx","version":2`), 403, kiln.CodeForbidden},
		{"a skill with a null version", ref(`,"kind":"skill","resource_id":"pptx","version":null`), 400, kiln.CodeInvalid},
		{"an unknown kind", ref(`,"kind":"team","resource_id":"pptx"`), 400, kiln.CodeInvalid},
		{"an agent with a version", ref(`,"kind":"agent","resource_id":"pptx","version":2`), 400, kiln.CodeInvalid},
		{"a resource id with a slash", ref(`,"kind":"agent","resource_id":"a/b"`), 400, kiln.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(h.Requests())
			rec := serve(t, h, "POST", "/exec", jsonCT, tt.body, nil)
			if tt.code != "" {
				env := checkError(t, rec, tt.status, tt.code)
				if tt.status == 400 && !strings.HasPrefix(env.Message, "files[]: ") {
					t.Errorf("got message %q, want it to say the files[] field is wrong", env.Message)
				}
				if n := len(h.Requests()); n != before {
					t.Errorf("got %d runs, want none more", n-before)
				}
				return
			}
			decode[execBody](t, rec, tt.status)
			reqs := h.Requests()
			if len(reqs) != before+1 || len(reqs[before].Files) != 1 || reqs[before].Files[0].Path != "slides.md" || string(reqs[before].Files[0].Content) != "# deck" {
				t.Errorf("got runs %d (files %+v), want one more with slides.md", len(reqs)-before, reqs[len(reqs)-1].Files)
			}
		})
	}
}

// TestExecChangedInputs: a run that changes its inputs gets back, for a file it may
// change, a new file that names the one it came from, and, for a read-only one (a
// skill's), the input as it was, marked inherited.
func TestExecChangedInputs(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Run: outputsRun("notes.txt", "changed", "slides.md", "changed too")})
	sid, notes := uploadTo(t, h, "notes.txt", "hi")
	skillSID, slides := uploadTo(t, h, "slides.md", "# deck", part{"kind", "", "skill"}, part{"id", "", "pptx"}, part{"version", "", "1"})
	body := `{"code":"1","session_id":"` + sid + `","files":[{"id":"` + notes + `","session_id":"` + sid + `"},` +
		`{"id":"` + slides + `","storage_session_id":"` + skillSID + `","kind":"skill","resource_id":"pptx","version":1}]}`
	type file struct {
		ID               string `json:"id"`
		Name             string `json:"name"`
		StorageSessionID string `json:"storage_session_id"`
		Inherited        bool   `json:"inherited"`
		ModifiedFrom     *struct {
			ID               string `json:"id"`
			StorageSessionID string `json:"storage_session_id"`
		} `json:"modified_from"`
	}
	got := decode[struct {
		SessionID string `json:"session_id"`
		Files     []file `json:"files"`
	}](t, serve(t, h, "POST", "/exec", jsonCT, body, nil), http.StatusOK)
	if got.SessionID != sid || len(got.Files) != 2 {
		t.Fatalf("got %+v, want two files in session %s", got, sid)
	}
	changed, kept := got.Files[0], got.Files[1]
	if changed.Name != "notes.txt" || changed.ID == notes || !kiln.ValidID(changed.ID) || changed.StorageSessionID != sid || changed.Inherited ||
		changed.ModifiedFrom == nil || changed.ModifiedFrom.ID != notes || changed.ModifiedFrom.StorageSessionID != sid {
		t.Errorf("got %+v (modified_from %+v), want a new notes.txt in %s, modified from %s", changed, changed.ModifiedFrom, sid, notes)
	}
	if kept.Name != "slides.md" || kept.ID != slides || kept.StorageSessionID != skillSID || !kept.Inherited || kept.ModifiedFrom != nil {
		t.Errorf("got %+v, want slides.md as it was (%s in %s), inherited", kept, slides, skillSID)
	}
	dl := serve(t, h, "GET", "/download/"+skillSID+"/"+slides+"?kind=skill&id=pptx&version=1", "", "", nil)
	if dl.Body.String() != "# deck" {
		t.Errorf("the skill's file reads %q, want it unchanged", dl.Body)
	}
}

// TestExecRefusedFields: fields the API checks itself, before the session layer.
func TestExecRefusedFields(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
		code   kiln.Code
	}{
		{"a language name no sandbox could have", `{"code":"1","lang":"c++"}`, 400, kiln.CodeLanguage},
		{"a language name with a slash", `{"code":"1","lang":"../py"}`, 400, kiln.CodeLanguage},
		{"a runtime hint with a space", `{"code":"1","runtime_session_hint":"conv 1"}`, 400, kiln.CodeInvalid},
		{"a runtime hint too long", `{"code":"1","runtime_session_hint":"` + strings.Repeat("h", 129) + `"}`, 400, kiln.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			checkError(t, serve(t, h, "POST", "/exec", jsonCT, tt.body, nil), tt.status, tt.code)
			if n := len(h.Requests()); n != 0 {
				t.Errorf("got %d runs, want none", n)
			}
		})
	}
}

// TestExecBodyCutShort: a body that breaks off while it is read is the client's 400.
func TestExecBodyCutShort(t *testing.T) {
	h := newServer(t)
	req := httptest.NewRequest("POST", "/exec", iotest.ErrReader(errors.New("connection reset by peer")))
	req.Header.Set("Content-Type", jsonCT)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	env := checkError(t, rec, http.StatusBadRequest, kiln.CodeInvalid)
	if !strings.Contains(env.Message, "reading the body") {
		t.Errorf("got message %q, want it to say the body could not be read", env.Message)
	}
}
