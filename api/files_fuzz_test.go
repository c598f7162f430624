package api_test

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/kilnsh/kiln/api"
)

// entityPattern is what an accepted entity_id may be (docs/api.md).
var entityPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// FuzzUploadName uploads a file under any name, raw in the part's header, with any
// entity_id, through the real handler and a disk store. The answer is a 200 or a
// client error, never a 5xx. An accepted name is a relative path of plain names that
// lists under /mnt/data and downloads with a Content-Disposition that names its last
// part exactly; an accepted entity_id has the documented shape.
func FuzzUploadName(f *testing.F) {
	for _, s := range []struct{ name, entity string }{
		{"data.csv", ""}, {"../../etc/passwd", "agent-9"}, {`C:\Users\me\report.pdf`, " agent-9 "},
		{`say "hi".txt`, ""}, {"a\\\"b", ""}, {"résumé.pdf", ""}, {"数据.csv", "x"}, {"a\x00b", ""},
		{"line\r\nX-Evil: 1", ""}, {"; filename*=UTF-8''evil", ""}, {"%2e%2e%2fx", ""}, {"..", ""},
		{strings.Repeat("a", 254) + " b", ""}, {"\u202egnp.exe", ""}, {"x", "../x"}, {"x", strings.Repeat("e", 41)},
	} {
		f.Add(s.name, s.entity)
	}
	f.Fuzz(func(t *testing.T, name, entity string) {
		h := api.NewHarness(t, api.HarnessConfig{})
		ct, body := rawUpload(name, entity)
		rec := serve(t, h, "POST", "/upload", ct, body, nil)
		if rec.Code >= 500 || rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("upload of %q (entity %q): got status %d (%s), want 200 or 400", name, entity, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			return
		}
		if e := strings.TrimSpace(entity); e != "" && !entityPattern.MatchString(e) {
			t.Fatalf("entity_id %q accepted", entity)
		}
		up := decode[uploaded](t, rec, http.StatusOK)
		if len(up.Files) != 1 {
			t.Fatalf("got %d files uploaded, want 1", len(up.Files))
		}
		got := up.Files[0].Filename
		for _, part := range strings.Split(got, "/") {
			checkPlainName(t, part)
		}

		rec = serve(t, h, "GET", "/files/"+up.SessionID+"?detail=simple", "", "", nil)
		listed := decode[[]struct{ Name, Path string }](t, rec, http.StatusOK)
		if len(listed) != 1 || listed[0].Name != got || path.Clean(listed[0].Path) != "/mnt/data/"+got {
			t.Fatalf("got list %+v, want %q under /mnt/data", listed, got)
		}

		rec = serve(t, h, "GET", "/download/"+up.SessionID+"/"+up.Files[0].FileID, "", "", nil)
		if rec.Code != http.StatusOK || rec.Body.String() != "data" {
			t.Fatalf("download: got %d %q, want 200 data", rec.Code, rec.Body)
		}
		cd := rec.Header().Get("Content-Disposition")
		kind, params, err := mime.ParseMediaType(cd)
		if err != nil || kind != "attachment" || params["filename"] != path.Base(got) {
			t.Fatalf("got Content-Disposition %q (%s %q, %v), want an attachment named %q", cd, kind, params["filename"], err, got)
		}
	})
}

// rawUpload builds a multipart body by hand, so that the name reaches the server as
// the fuzzer wrote it, quotes and all; mime/multipart would escape it.
func rawUpload(name, entity string) (string, string) {
	const boundary = "kiln-fuzz-boundary-0123456789"
	var b bytes.Buffer
	fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"entity_id\"\r\n\r\n%s\r\n", boundary, entity)
	fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n", boundary, name)
	fmt.Fprintf(&b, "Content-Type: application/octet-stream\r\n\r\ndata\r\n--%s--\r\n", boundary)
	return "multipart/form-data; boundary=" + boundary, b.String()
}

// checkPlainName fails the test unless name is a file name that cannot leave its
// directory or confuse a reader of it.
func checkPlainName(t *testing.T, name string) {
	t.Helper()
	switch {
	case !utf8.ValidString(name) || len(name) == 0 || len(name) > 255:
		t.Fatalf("got name %q, want 1 to 255 bytes of UTF-8", name)
	case name == "." || name == ".." || strings.ContainsAny(name, `/\`):
		t.Fatalf("got name %q, which is or holds a path part", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		t.Fatalf("got name %q, which holds a control character", name)
	case strings.TrimSpace(name) != name:
		t.Fatalf("got name %q, with spaces around it", name)
	}
}
