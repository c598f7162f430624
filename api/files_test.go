package api_test

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

// apiTime is how the API writes timestamps.
var apiTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

func TestUpload(t *testing.T) {
	tests := []struct {
		name  string
		parts []part
		want  []string // the stored names
	}{
		{"one file field", []part{{"file", "data.csv", "a,b"}}, []string{"data.csv"}},
		{"files fields", []part{{"files", "a.txt", "a"}, {"files", "b.txt", "b"}}, []string{"a.txt", "b.txt"}},
		{"one name twice", []part{{"files", "a.txt", "1"}, {"files", "a.txt", "2"}}, []string{"a.txt", "2_a.txt"}},
		{"directories dropped", []part{{"file", `C:\Users\x\report.pdf`, "%PDF"}}, []string{"report.pdf"}},
		{"other fields ignored", []part{{"note", "", "hello"}, {"file", "a.txt", "a"}}, []string{"a.txt"}},
		{"with an entity", []part{{"entity_id", "", "agent-9"}, {"file", "a.txt", "a"}}, []string{"a.txt"}},
		{"at the file size limit", []part{{"file", "big.bin", strings.Repeat("x", int(api.TestLimits.MaxFileBytes))}}, []string{"big.bin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			ct, body := multipartBody(t, tt.parts...)
			up := decode[uploaded](t, serve(t, h, "POST", "/upload", ct, body, nil), http.StatusOK)
			if up.Message != "success" || !kiln.ValidID(up.SessionID) || up.StorageSessionID != up.SessionID {
				t.Errorf("got %+v, want success with a session id twice", up)
			}
			var names []string
			for _, f := range up.Files {
				names = append(names, f.Filename)
				if !kiln.ValidID(f.FileID) {
					t.Errorf("got fileId %q, want a kiln id", f.FileID)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("got files %q, want %q", names, tt.want)
			}
		})
	}
}

// TestUploadEntity: an upload for an entity is the session that entity's next run
// continues.
func TestUploadEntity(t *testing.T) {
	h := newServer(t)
	ct, body := multipartBody(t, part{"entity_id", "", " agent-9 "}, part{"file", "a.txt", "a"})
	up := decode[uploaded](t, serve(t, h, "POST", "/upload", ct, body, nil), http.StatusOK)
	if got := execOK(t, h, `{"code":"1","entity_id":"agent-9"}`, nil); got.SessionID != up.SessionID {
		t.Errorf("got session %s, want the upload's %s", got.SessionID, up.SessionID)
	}
}

func TestUploadRefused(t *testing.T) {
	big := strings.Repeat("x", int(api.TestLimits.MaxFileBytes)+1)
	ct, whole := multipartBody(t, part{"file", "a.txt", strings.Repeat("a", 100)})
	tests := []struct {
		name   string
		ct     string
		body   string
		status int
		code   kiln.Code
	}{
		{"JSON", jsonCT, `{}`, 415, kiln.CodeMediaType},
		{"no content type", "", "x", 415, kiln.CodeMediaType},
		{"no boundary", "multipart/form-data", "x", 400, kiln.CodeInvalid},
		{"no file", "", "", 400, kiln.CodeInvalid},
		{"more files than allowed", "", "", 413, kiln.CodeTooLarge},
		{"file over the limit", "", "", 413, kiln.CodeTooLarge},
		{"body over the limit", "", "", 413, kiln.CodeTooLarge},
		{"bad entity_id", "", "", 400, kiln.CodeInvalid},
		{"cut in a file", ct, whole[:len(whole)/2], 400, kiln.CodeInvalid},
		{"cut between parts", ct, whole[:len(whole)-8], 400, kiln.CodeInvalid},
	}
	parts := map[string][]part{
		"no file":                 {{"note", "", "x"}},
		"more files than allowed": slices.Repeat([]part{{"files", "a.txt", "a"}}, api.TestMaxFiles+1),
		"file over the limit":     {{"file", "big.bin", big}},
		"body over the limit":     {{"note", "", strings.Repeat("x", api.TestMaxUpload)}, {"file", "a.txt", "a"}},
		"bad entity_id":           {{"entity_id", "", "a/b"}, {"file", "a.txt", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, ok := parts[tt.name]; ok {
				tt.ct, tt.body = multipartBody(t, p...)
			}
			checkError(t, serve(t, newServer(t), "POST", "/upload", tt.ct, tt.body, nil), tt.status, tt.code)
		})
	}
}

func TestListFiles(t *testing.T) {
	h := newServer(t)
	sid, ids := upload(t, h, nil, "data.csv", "a,b\n", "notes.txt", "hi")
	tests := []struct {
		name  string
		query string
		check func(t *testing.T, i int, f map[string]any)
	}{
		{"full", "", func(t *testing.T, i int, f map[string]any) {
			name := []string{"data.csv", "notes.txt"}[i]
			ctype := []string{"text/csv; charset=utf-8", "text/plain; charset=utf-8"}[i]
			want := map[string]any{
				"name": sid + "/" + ids[i], "id": ids[i], "session_id": sid, "storage_session_id": sid,
				"size": float64([]int{4, 2}[i]), "etag": `"` + ids[i] + `"`, "contentType": ctype,
			}
			for k, v := range want {
				if f[k] != v {
					t.Errorf("%s: got %v, want %v", k, f[k], v)
				}
			}
			meta, _ := f["metadata"].(map[string]any)
			if meta["content-type"] != ctype || meta["original-filename"] != name {
				t.Errorf("got metadata %v, want %s and %s", meta, ctype, name)
			}
			if s, _ := f["lastModified"].(string); !apiTime.MatchString(s) {
				t.Errorf("got lastModified %q, want the API's time format", s)
			}
		}},
		{"summary", "?detail=summary", func(t *testing.T, i int, f map[string]any) {
			if f["name"] != sid+"/"+ids[i] || len(f) != 2 {
				t.Errorf("got %v, want name %s/%s and lastModified", f, sid, ids[i])
			}
		}},
		{"simple", "?detail=simple", func(t *testing.T, i int, f map[string]any) {
			name := []string{"data.csv", "notes.txt"}[i]
			if f["id"] != ids[i] || f["name"] != name || f["path"] != "/mnt/data/"+name || len(f) != 3 {
				t.Errorf("got %v, want id %s, name and path of %s", f, ids[i], name)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list := decode[[]map[string]any](t, serve(t, h, "GET", "/files/"+sid+tt.query, "", "", nil), http.StatusOK)
			if len(list) != 2 {
				t.Fatalf("got %d files, want 2: %v", len(list), list)
			}
			for i, f := range list {
				tt.check(t, i, f)
			}
		})
	}
	// A session that does not exist, or a malformed id, lists as empty.
	for _, id := range []string{"aaaaaaaaaaaaaaaaaaaaa", "not-an-id"} {
		t.Run("empty "+id, func(t *testing.T) {
			rec := serve(t, h, "GET", "/files/"+id, "", "", nil)
			if list := decode[[]any](t, rec, http.StatusOK); len(list) != 0 {
				t.Errorf("got %v, want []", list)
			}
		})
	}
}

func TestDownload(t *testing.T) {
	tests := []struct {
		name        string
		upload      string // the file's name as uploaded
		disposition string
		ctype       string
	}{
		{"plain", "report.csv", `attachment; filename="report.csv"; filename*=UTF-8''report.csv`, "text/csv; charset=utf-8"},
		{"space", "my report.txt", `attachment; filename="my report.txt"; filename*=UTF-8''my%20report.txt`, "text/plain; charset=utf-8"},
		{"accents", "résumé.pdf", `attachment; filename="r_sum_.pdf"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf`, "application/pdf"},
		{"CJK", "数据.csv", `attachment; filename="__.csv"; filename*=UTF-8''%E6%95%B0%E6%8D%AE.csv`, "text/csv; charset=utf-8"},
		{"quotes", `say "hi"`, `attachment; filename="say _hi_"; filename*=UTF-8''say%20%22hi%22`, "application/octet-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			sid, ids := upload(t, h, nil, tt.upload, "data")
			rec := serve(t, h, "GET", "/download/"+sid+"/"+ids[0], "", "", nil)
			if rec.Code != http.StatusOK || rec.Body.String() != "data" {
				t.Fatalf("got %d %q, want 200 data", rec.Code, rec.Body)
			}
			want := map[string]string{
				"Content-Disposition": tt.disposition,
				"Content-Type":        tt.ctype,
				"Content-Length":      strconv.Itoa(len("data")),
				"ETag":                `"` + ids[0] + `"`,
			}
			for k, v := range want {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: got %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestDownloadBaseName: a file a run wrote in a directory downloads under its base name.
func TestDownloadBaseName(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Run: outputsRun("out/sub/report.csv", "x")})
	got := execOK(t, h, `{"code":"1"}`, nil)
	rec := serve(t, h, "GET", "/download/"+got.SessionID+"/"+got.Files[0].ID, "", "", nil)
	want := `attachment; filename="report.csv"; filename*=UTF-8''report.csv`
	if cd := rec.Header().Get("Content-Disposition"); cd != want {
		t.Errorf("got Content-Disposition %q, want %q", cd, want)
	}
}

func TestDeleteFile(t *testing.T) {
	h := newServer(t)
	sid, ids := upload(t, h, nil, "a.txt", "a", "b.txt", "b")
	steps := []struct {
		name, method, path string
		status             int
	}{
		{"delete", "DELETE", "/files/" + sid + "/" + ids[0], http.StatusNoContent},
		{"gone from downloads", "GET", "/download/" + sid + "/" + ids[0], http.StatusNotFound},
		{"delete again", "DELETE", "/files/" + sid + "/" + ids[0], http.StatusNotFound},
		{"the other stays", "GET", "/download/" + sid + "/" + ids[1], http.StatusOK},
		{"unknown session", "DELETE", "/files/aaaaaaaaaaaaaaaaaaaaa/" + ids[1], http.StatusNotFound},
		{"malformed session", "DELETE", "/files/x/" + ids[1], http.StatusNotFound},
		{"malformed file", "DELETE", "/files/" + sid + "/x", http.StatusNotFound},
		{"download malformed file", "GET", "/download/" + sid + "/..", http.StatusNotFound},
		{"download malformed session", "GET", "/download/x/" + ids[1], http.StatusNotFound},
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
	// The deleted file is no longer placed in the session's runs.
	execOK(t, h, `{"code":"1","session_id":"`+sid+`"}`, nil)
	reqs := h.Requests()
	if files := reqs[len(reqs)-1].Files; len(files) != 1 || files[0].Path != "b.txt" {
		t.Errorf("got files %+v placed, want b.txt only", files)
	}
}
