package api_test

import (
	"net/http"
	"testing"

	"github.com/kilnsh/kiln"
)

// objectInfo is the answer to GET /sessions/{session_id}/objects/{file_id}.
type objectInfo struct {
	Name             string `json:"name"`
	OriginalFilename string `json:"originalFilename"`
	Size             int64  `json:"size"`
	ContentType      string `json:"contentType"`
	LastModified     string `json:"lastModified"`
	ETag             string `json:"etag"`
	ReadOnly         bool   `json:"readOnly"`
}

// TestObjectRoutes checks a file's metadata and its deletion through the objects
// routes, in order.
func TestObjectRoutes(t *testing.T) {
	h := newServer(t)
	sid, ids := upload(t, h, nil, "report.csv", "a,b\n1,2\n", "notes.txt", "hi")
	obj := "/sessions/" + sid + "/objects/" + ids[0]

	got := decode[objectInfo](t, serve(t, h, "GET", obj, "", "", nil), http.StatusOK)
	want := objectInfo{Name: sid + "/" + ids[0], OriginalFilename: "report.csv", Size: 8, ContentType: "text/csv; charset=utf-8",
		LastModified: got.LastModified, ETag: `"` + ids[0] + `"`}
	if got != want || !apiTime.MatchString(got.LastModified) {
		t.Errorf("got %+v, want %+v with lastModified in the API's time format", got, want)
	}

	del := decode[map[string]string](t, serve(t, h, "DELETE", obj, "", "", nil), http.StatusOK)
	if del["message"] != "File deleted successfully" || del["session_id"] != sid || del["fileId"] != ids[0] || len(del) != 3 {
		t.Errorf("got %v, want the deletion's message, session and file", del)
	}
	steps := []struct {
		name, method, path string
		status             int
		code               kiln.Code
	}{
		{"info once deleted", "GET", obj, 404, kiln.CodeNotFound},
		{"deleted twice", "DELETE", obj, 404, kiln.CodeNotFound},
		{"gone from downloads", "GET", "/download/" + sid + "/" + ids[0], 404, kiln.CodeNotFound},
		{"info of a malformed file id", "GET", "/sessions/" + sid + "/objects/x", 404, kiln.CodeNotFound},
		{"info of a malformed session id", "GET", "/sessions/x/objects/" + ids[1], 404, kiln.CodeNotFound},
		{"delete of a malformed file id", "DELETE", "/sessions/" + sid + "/objects/..", 404, kiln.CodeNotFound},
		{"info of an unknown session", "GET", "/sessions/aaaaaaaaaaaaaaaaaaaaa/objects/" + ids[1], 404, kiln.CodeNotFound},
		{"info with a malformed scope", "GET", "/sessions/" + sid + "/objects/" + ids[1] + "?kind=team", 400, kiln.CodeInvalid},
		{"delete with a malformed scope", "DELETE", "/sessions/" + sid + "/objects/" + ids[1] + "?kind=skill&id=s", 400, kiln.CodeInvalid},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			checkError(t, serve(t, h, st.method, st.path, "", "", nil), st.status, st.code)
		})
	}
	if got := decode[objectInfo](t, serve(t, h, "GET", "/v1/sessions/"+sid+"/objects/"+ids[1], "", "", nil), http.StatusOK); got.OriginalFilename != "notes.txt" {
		t.Errorf("got %+v, want the other file, still there", got)
	}
}

// TestObjectsOfOtherUsers: a user's files are not another user's to see or delete.
func TestObjectsOfOtherUsers(t *testing.T) {
	h := newServer(t, "k1")
	alice := http.Header{"X-Api-Key": {"k1"}, "User-Id": {"alice"}}
	bob := http.Header{"X-Api-Key": {"k1"}, "User-Id": {"bob"}}
	sid, ids := upload(t, h, alice, "a.txt", "a")
	obj := "/sessions/" + sid + "/objects/" + ids[0]
	checkError(t, serve(t, h, "GET", obj, "", "", bob), http.StatusNotFound, kiln.CodeNotFound)
	checkError(t, serve(t, h, "DELETE", obj, "", "", bob), http.StatusNotFound, kiln.CodeNotFound)
	if got := decode[objectInfo](t, serve(t, h, "GET", obj, "", "", alice), http.StatusOK); got.OriginalFilename != "a.txt" {
		t.Errorf("got %+v, want alice's file, which bob could not delete", got)
	}
}

// TestScopedFiles: files uploaded for a resource (an agent, a skill at a version) are
// read through the scope that names it, are read-only, and are no user's own.
func TestScopedFiles(t *testing.T) {
	h := newServer(t, "k1")
	user := http.Header{"X-Api-Key": {"k1"}, "User-Id": {"alice"}}
	tests := []struct {
		name   string
		fields []part
		scope  string // the query that names the scope
		wrong  string // a query that names another
	}{
		{"agent", []part{{"kind", "", "agent"}, {"id", "", "agent-1"}}, "kind=agent&id=agent-1", "kind=agent&id=agent-2"},
		{"skill", []part{{"kind", "", "skill"}, {"id", "", "skill:pptx"}, {"version", "", "4"}}, "kind=skill&id=skill:pptx&version=4", "kind=skill&id=skill:pptx&version=5"},
		{"the user's own, read-only", []part{{"read_only", "", "TRUE"}}, "kind=user", "kind=agent&id=agent-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := multipartBody(t, append(tt.fields, part{"file", "slides.md", "# hi"})...)
			up := decode[uploaded](t, serve(t, h, "POST", "/upload", ct, body, user), http.StatusOK)
			sid, fid := up.SessionID, up.Files[0].FileID

			info := decode[objectInfo](t, serve(t, h, "GET", "/sessions/"+sid+"/objects/"+fid+"?"+tt.scope, "", "", user), http.StatusOK)
			if !info.ReadOnly || info.OriginalFilename != "slides.md" {
				t.Errorf("got %+v, want slides.md, read-only", info)
			}
			dl := serve(t, h, "GET", "/download/"+sid+"/"+fid+"?"+tt.scope, "", "", user)
			if dl.Code != http.StatusOK || dl.Body.String() != "# hi" {
				t.Errorf("download through the scope: %d %q, want 200 and the file", dl.Code, dl.Body)
			}
			list := decode[[]map[string]any](t, serve(t, h, "GET", "/files/"+sid+"?detail=normalized&"+tt.scope, "", "", user), http.StatusOK)
			if len(list) != 1 || list[0]["id"] != fid || list[0]["read_only"] != true || list[0]["storage_session_id"] != sid ||
				list[0]["size"] != float64(4) || list[0]["contentType"] != "text/markdown; charset=utf-8" || !apiTime.MatchString(list[0]["lastModified"].(string)) {
				t.Errorf("got normalized listing %v, want slides.md, read-only, with its size and type", list)
			}
			if list := decode[[]any](t, serve(t, h, "GET", "/files/"+sid+"?"+tt.wrong, "", "", user), http.StatusOK); len(list) != 0 {
				t.Errorf("got %v through another scope, want nothing", list)
			}
			checkError(t, serve(t, h, "GET", "/download/"+sid+"/"+fid+"?"+tt.wrong, "", "", user), http.StatusNotFound, kiln.CodeNotFound)
		})
	}
	t.Run("a malformed scope", func(t *testing.T) {
		checkError(t, serve(t, h, "GET", "/files/aaaaaaaaaaaaaaaaaaaaa?kind=agent", "", "", user), http.StatusBadRequest, kiln.CodeInvalid)
	})
}

// TestNormalizedListingOfWritableFiles: a file code may change carries no read_only.
func TestNormalizedListingOfWritableFiles(t *testing.T) {
	h := newServer(t)
	sid, ids := upload(t, h, nil, "a.txt", "a")
	list := decode[[]map[string]any](t, serve(t, h, "GET", "/files/"+sid+"?detail=normalized", "", "", nil), http.StatusOK)
	if len(list) != 1 || list[0]["id"] != ids[0] || list[0]["name"] != "a.txt" {
		t.Fatalf("got %v, want a.txt", list)
	}
	if _, ok := list[0]["read_only"]; ok {
		t.Errorf("got %v, want no read_only for a writable file", list[0])
	}
}

// TestUserIDControlCharacters: control characters in User-Id are dropped, so that no
// client-named user can pass for a resource or split an owner apart.
func TestUserIDControlCharacters(t *testing.T) {
	h := newServer(t, "k1")
	sid, _ := upload(t, h, http.Header{"X-Api-Key": {"k1"}, "User-Id": {"al\tice"}}, "a.txt", "a")
	tests := []struct {
		user string
		want int // files listed
	}{
		{"alice", 1},
		{"al\tice", 1},
		{"\tal\tice\t", 1},
		{"bob", 0},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			rec := serve(t, h, "GET", "/files/"+sid, "", "", http.Header{"X-Api-Key": {"k1"}, "User-Id": {tt.user}})
			if got := decode[[]any](t, rec, http.StatusOK); len(got) != tt.want {
				t.Errorf("got %d files for user %q, want %d", len(got), tt.user, tt.want)
			}
		})
	}
}
