package abuse

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Cases 17 to 20 of security.md: what an API client can do. Serial: the checks that no
// sandbox was used count the pool's sandboxes, which parallel runs would disturb.

// apiCase is one request and the error answer it must get.
type apiCase struct {
	name   string
	method string
	path   string
	header http.Header
	body   []byte
	status int
	code   string // the envelope's error code
}

func (c apiCase) check(t *testing.T, key string) {
	t.Helper()
	r := do(t, c.method, c.path, key, bytes.NewReader(c.body), c.header)
	if r.status != c.status {
		t.Fatalf("%s %s: status %d, want %d: %.300s", c.method, c.path, r.status, c.status, r.body)
	}
	if got := r.errBody(t).Error; got != c.code {
		t.Errorf("%s %s: error code %q, want %q", c.method, c.path, got, c.code)
	}
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// part is one file of a hand-made multipart body.
type part struct {
	field, disposition string // disposition: the parameters after form-data; name=...
	data               []byte
}

// multipartBody builds a multipart/form-data body byte for byte, so that file names
// reach kiln exactly as a hostile client writes them.
func multipartBody(parts ...part) ([]byte, http.Header) {
	const boundary = "kiln-abuse-boundary-4b1d"
	var b bytes.Buffer
	for _, p := range parts {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q%s\r\nContent-Type: application/octet-stream\r\n\r\n", boundary, p.field, p.disposition)
		b.Write(p.data)
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.Bytes(), http.Header{"Content-Type": {"multipart/form-data; boundary=" + boundary}}
}

func filePart(name string, data []byte) part {
	return part{field: "file", disposition: fmt.Sprintf("; filename=\"%s\"", name), data: data}
}

// uploadResult is the answer of POST /upload.
type uploadResult struct {
	SessionID string `json:"session_id"`
	Files     []struct {
		FileID   string `json:"fileId"`
		Filename string `json:"filename"`
	} `json:"files"`
}

func upload(t *testing.T, key string, header http.Header, parts ...part) uploadResult {
	t.Helper()
	body, h := multipartBody(parts...)
	for k, v := range header {
		h[k] = v
	}
	r := do(t, http.MethodPost, "/upload", key, bytes.NewReader(body), h)
	if r.status != http.StatusOK {
		t.Fatalf("POST /upload: status %d, want 200: %s", r.status, r.body)
	}
	var u uploadResult
	if err := json.Unmarshal(r.body, &u); err != nil {
		t.Fatalf("POST /upload: %v: %s", err, r.body)
	}
	return u
}

// lz4Frame compresses raw into one standard LZ4 frame with its content size.
func lz4Frame(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(lz4.SizeOption(uint64(len(raw)))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Case 17: oversized body, code, upload or state → 413 before a sandbox is used;
// malformed JSON → 400; wrong content type → 415.
func TestCase17BodyLimits(t *testing.T) {
	sess := upload(t, keyA, nil, filePart("a.txt", []byte("a"))).SessionID
	big := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	fileOver := make([]byte, maxFileBytes+1)
	uploadBody := func(parts ...part) ([]byte, http.Header) { return multipartBody(parts...) }
	overFile, overFileH := uploadBody(filePart("big.bin", fileOver))
	tooMany := []part{}
	for i := range maxFiles + 1 {
		tooMany = append(tooMany, filePart(fmt.Sprintf("f%d.txt", i), []byte("x")))
	}
	overCount, overCountH := uploadBody(tooMany...)
	nearLimit := make([]byte, maxFileBytes*9/10)
	overBody, overBodyH := uploadBody(filePart("a", nearLimit), filePart("b", nearLimit), filePart("c", nearLimit))
	stateOver := base64.StdEncoding.EncodeToString(make([]byte, maxStateBytes+1))

	before := settle(t)
	cases := []apiCase{
		{"body over the limit", "POST", "/exec", jsonHeader,
			mustJSON(t, map[string]any{"code": "print(1)", "padding": string(big(4 << 20))}), 413, "too_large"},
		{"code over the limit", "POST", "/exec", jsonHeader,
			mustJSON(t, map[string]any{"code": "#" + string(big(maxCodeBytes))}), 413, "too_large"},
		{"state over the limit, in /exec", "POST", "/exec", jsonHeader,
			mustJSON(t, map[string]any{"code": "print(1)", "state": stateOver}), 413, "too_large"},
		{"state over the limit, in POST /state", "POST", "/state/" + sess, http.Header{"Content-Type": {"application/octet-stream"}},
			make([]byte, maxStateBytes+1), 413, "too_large"},
		{"upload: a file over the limit", "POST", "/upload", overFileH, overFile, 413, "too_large"},
		{"upload: more files than the limit", "POST", "/upload", overCountH, overCount, 413, "too_large"},
		{"upload: body over the limit", "POST", "/upload", overBodyH, overBody, 413, "too_large"},
		{"malformed JSON", "POST", "/exec", jsonHeader, []byte(`{"code": "print(1)"`), 400, "invalid_request"},
		{"two JSON values", "POST", "/exec", jsonHeader, []byte(`{"code": "print(1)"} {}`), 400, "invalid_request"},
		{"not an object", "POST", "/exec", jsonHeader, []byte(`["print(1)"]`), 400, "invalid_request"},
		{"code of the wrong type", "POST", "/exec", jsonHeader, []byte(`{"code": 5}`), 400, "invalid_request"},
		{"empty code", "POST", "/exec", jsonHeader, []byte(`{"code": "  "}`), 400, "invalid_request"},
		{"text/plain to /exec", "POST", "/exec", http.Header{"Content-Type": {"text/plain"}}, []byte(`{"code": "print(1)"}`), 415, "unsupported_media_type"},
		{"a form to /exec", "POST", "/exec", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, []byte(`code=print(1)`), 415, "unsupported_media_type"},
		{"JSON to /upload", "POST", "/upload", jsonHeader, []byte(`{"file": "x"}`), 415, "unsupported_media_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, keyA) })
	}
	checkNoSandboxUsed(t, before)
}

// Case 18: a state blob that is not base64, not an LZ4 frame, or decompresses past
// STATE_MAX_RAW_MB → 400/413, and no sandbox is used, in /exec as in POST /state.
func TestCase18BadState(t *testing.T) {
	sess := upload(t, keyA, nil, filePart("a.txt", []byte("a"))).SessionID
	good := lz4Frame(t, []byte("not a pickle, but a well-formed frame"))
	bomb := lz4Frame(t, make([]byte, maxStateRaw+1))
	if len(bomb) > maxStateBytes/10 {
		t.Fatalf("the bomb is %d bytes compressed; it must be far under the blob limit", len(bomb))
	}
	blobs := []struct {
		name   string
		b64    string // for /exec
		raw    []byte // for POST /state; nil: not applicable
		status int
		code   string
	}{
		{"not base64", "!!not*base64!!", nil, 400, "invalid_request"},
		{"not an LZ4 frame", base64.StdEncoding.EncodeToString([]byte("plain bytes, no frame")), []byte("plain bytes, no frame"), 400, "invalid_request"},
		{"a truncated LZ4 frame", base64.StdEncoding.EncodeToString(good[:len(good)-6]), good[:len(good)-6], 400, "invalid_request"},
		{"an LZ4 bomb", base64.StdEncoding.EncodeToString(bomb), bomb, 413, "too_large"},
		{"state of the wrong JSON type", "", nil, 400, "invalid_request"},
	}
	before := settle(t)
	for _, b := range blobs {
		t.Run(b.name+" in /exec", func(t *testing.T) {
			var state any = b.b64
			if b.b64 == "" {
				state = 12345
			}
			c := apiCase{method: "POST", path: "/exec", header: jsonHeader,
				body: mustJSON(t, map[string]any{"code": "print(1)", "state": state}), status: b.status, code: b.code}
			c.check(t, keyA)
		})
		if b.raw == nil {
			continue
		}
		t.Run(b.name+" in POST /state", func(t *testing.T) {
			c := apiCase{method: "POST", path: "/state/" + sess, header: http.Header{"Content-Type": {"application/octet-stream"}},
				body: b.raw, status: b.status, code: b.code}
			c.check(t, keyA)
		})
	}
	checkNoSandboxUsed(t, before)
	// A refused blob left the session without state.
	if r := do(t, "GET", "/state/"+sess, keyA, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("GET /state after refused blobs: status %d, want 404 (no state)", r.status)
	}
}

// Case 19: another key's, or another user's, session, files and state are 404 on
// every route (and /files lists nothing); the owner still has everything.
func TestCase19Ownership(t *testing.T) {
	// Key A's session with state and a file, made by a run.
	own := execAs(t, keyA, map[string]any{"code": "secret = 41\nopen('out.txt', 'w').write('secret file')\n"})
	checkOutcome(t, own, outcome{status: "ok"})
	if len(own.Files) != 1 || !own.HasState {
		t.Fatalf("setup: files %+v, has_state %v; want one file and state", own.Files, own.HasState)
	}
	sid, fid := own.SessionID, own.Files[0].ID
	// Alice's upload under key A.
	alice := http.Header{"User-Id": {"alice"}}
	up := upload(t, keyA, alice, filePart("alice.txt", []byte("alice's")))
	usid, ufid := up.SessionID, up.Files[0].FileID
	blob := lz4Frame(t, []byte("x"))

	type intruder struct {
		name   string
		key    string
		header http.Header
		sid    string
		fid    string
	}
	intruders := []intruder{
		{"another key", keyB, nil, sid, fid},
		{"another key, as the same user", keyB, alice, usid, ufid},
		{"another user of the same key", keyA, http.Header{"User-Id": {"bob"}}, usid, ufid},
	}
	for _, in := range intruders {
		t.Run(in.name, func(t *testing.T) {
			routes := []struct{ method, path string }{
				{"GET", "/download/" + in.sid + "/" + in.fid},
				{"GET", "/v1/download/" + in.sid + "/" + in.fid},
				{"DELETE", "/files/" + in.sid + "/" + in.fid},
				{"GET", "/state/" + in.sid},
				{"GET", "/state/" + in.sid + "/info"},
				{"POST", "/state/" + in.sid},
				{"DELETE", "/state/" + in.sid},
				{"GET", "/sessions/" + in.sid},
				{"GET", "/v1/sessions/" + in.sid},
				{"DELETE", "/sessions/" + in.sid},
			}
			for _, rt := range routes {
				h := http.Header{"Content-Type": {"application/octet-stream"}}
				for k, v := range in.header {
					h[k] = v
				}
				apiCase{method: rt.method, path: rt.path, header: h, body: blob, status: 404, code: "not_found"}.check(t, in.key)
			}
			for _, detail := range []string{"", "?detail=summary", "?detail=simple", "?detail=full"} {
				r := do(t, "GET", "/files/"+in.sid+detail, in.key, nil, in.header)
				if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
					t.Errorf("GET /files/%s%s: %d %s, want 200 []", in.sid, detail, r.status, r.body)
				}
			}
			// A run naming the session gets a new one, without the owner's state.
			user := in.header.Get("User-Id")
			res := execAs(t, in.key, map[string]any{"code": "print(secret)", "session_id": in.sid, "user_id": user})
			if res.SessionID == in.sid {
				t.Errorf("exec with another's session_id ran in it")
			}
			if res.Status != "error" || !strings.HasPrefix(kilntest.Str(res.Error), "NameError") {
				t.Errorf("exec in another's session: (%s, %q), want a NameError: no state of theirs", res.Status, kilntest.Str(res.Error))
			}
			// A run naming the file is refused (403, as LibreChat's client expects), not a silent copy.
			apiCase{method: "POST", path: "/exec", header: jsonHeader, status: 403, code: "forbidden",
				body: mustJSON(t, map[string]any{"code": "print(1)", "user_id": user,
					"files": []map[string]string{{"id": in.fid, "session_id": in.sid, "name": "x.txt"}}})}.check(t, in.key)
		})
	}
	t.Run("no key or a wrong key", func(t *testing.T) {
		for _, key := range []string{"", "wrong-" + keyA} {
			apiCase{method: "GET", path: "/sessions/" + sid, status: 401, code: "unauthorized"}.check(t, key)
		}
	})
	t.Run("the owners still have everything", func(t *testing.T) {
		if r := do(t, "GET", "/download/"+sid+"/"+fid, keyA, nil, nil); r.status != 200 || string(r.body) != "secret file" {
			t.Errorf("owner's download: %d %q, want 200 %q", r.status, r.body, "secret file")
		}
		if r := do(t, "GET", "/state/"+sid, keyA, nil, nil); r.status != 200 || len(r.body) == 0 {
			t.Errorf("owner's state: %d, %d bytes; want 200 with the blob", r.status, len(r.body))
		}
		if r := do(t, "GET", "/download/"+usid+"/"+ufid, keyA, nil, alice); r.status != 200 || string(r.body) != "alice's" {
			t.Errorf("alice's download: %d %q, want 200 %q", r.status, r.body, "alice's")
		}
		res := execAs(t, keyA, map[string]any{"code": "print(secret + 1)", "session_id": sid})
		if res.SessionID != sid || res.Stdout != "42\n" {
			t.Errorf("owner's next run: session %s stdout %q, want %s and %q", res.SessionID, res.Stdout, sid, "42\n")
		}
	})
}

// Case 20: path traversal in upload names is sanitised (a relative path keeps its
// directories under /mnt/data, without its "..": docs/api.md), in ids it is a 404, and
// nothing is ever written outside the store.
func TestCase20PathTraversal(t *testing.T) {
	names := []struct {
		disposition string // what follows the field name in Content-Disposition
		want        string
	}{
		{`; filename="../../etc/passwd"`, "etc/passwd"},
		{`; filename="..\\..\\windows\\win.ini"`, "win.ini"},
		{"; filename=\"tab\there.txt\"", "tabhere.txt"},
		{`; filename*=UTF-8''ctl%01%1B%7F%0A%0Dname.txt`, "ctlname.txt"},
		{`; filename*=UTF-8''..%2F..%2Fetc%2Fcron.d%2Fevil`, "etc/cron.d/evil"},
	}
	var parts []part
	for _, n := range names {
		parts = append(parts, part{field: "file", disposition: n.disposition, data: []byte(n.want)})
	}
	up := upload(t, keyA, nil, parts...)
	var got []string
	for _, f := range up.Files {
		got = append(got, f.Filename)
	}
	var want []string
	for _, n := range names {
		want = append(want, n.want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("sanitised names = %q, want %q", got, want)
	}
	t.Run("one file each", func(t *testing.T) {
		for _, n := range []struct{ name, want string }{
			{"/etc/shadow", "shadow"}, {"..", "file"}, {".", "file"}, {"/", "file"}, {"\t", "file"},
		} {
			u := upload(t, keyA, nil, filePart(n.name, []byte("x")))
			if len(u.Files) != 1 || u.Files[0].Filename != n.want {
				t.Errorf("upload named %q: files %+v, want one named %q", n.name, u.Files, n.want)
			}
		}
	})
	t.Run("in the sandbox", func(t *testing.T) {
		// The files land under /mnt/data by their sanitised names; a run's own name
		// for a file is kept under /mnt/data too.
		res := execAs(t, keyA, map[string]any{"session_id": up.SessionID, "code": `
import json, os
found = sorted(os.path.relpath(os.path.join(r, f), "/mnt/data") for r, _, fs in os.walk("/mnt/data") for f in fs)
print(json.dumps({"found": found, "escaped": os.path.exists("/tmp/evil.txt")}))
`, "files": []map[string]string{{"id": up.Files[0].FileID, "session_id": up.SessionID, "name": "../../../tmp/evil.txt"}}})
		checkOutcome(t, res, outcome{status: "ok"})
		var seen struct {
			Found   []string `json:"found"`
			Escaped bool     `json:"escaped"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &seen); err != nil {
			t.Fatalf("%v: %q", err, res.Stdout)
		}
		if !slices.Equal(seen.Found, []string{"tmp/evil.txt"}) || seen.Escaped {
			t.Errorf("files in the sandbox = %v (escaped to /tmp: %v), want [tmp/evil.txt] only", seen.Found, seen.Escaped)
		}
	})
	t.Run("ids", func(t *testing.T) {
		sid, fid := up.SessionID, up.Files[0].FileID
		paths := []string{
			"/download/../../x",
			"/download/" + sid + "/../../../etc/passwd",
			"/download/%2e%2e/%2e%2e%2fetc%2fpasswd",
			"/download/" + sid + "/..%2f..%2f" + sid + "%2fsession.json",
			"/download/" + sid + "/" + fid + "%2f..",
			"/download/..%2F..%2F..%2Fetc/passwd",
			"/state/..%2f..%2fsessions",
			"/state/%2e%2e/info",
			"/sessions/%2e%2e",
			"/sessions/..%2f" + sid,
			"/v1/sessions/.%2e%2f.%2e%2fetc",
		}
		for _, p := range paths {
			apiCase{method: "GET", path: p, status: 404, code: "not_found"}.check(t, keyA)
		}
		apiCase{method: "DELETE", path: "/sessions/..%2f..%2f" + sid, status: 404, code: "not_found"}.check(t, keyA)
		for _, p := range []string{"/files/%2e%2e", "/files/..%2f..%2fetc", "/files/" + sid + "%2f.."} {
			if r := do(t, "GET", p, keyA, nil, nil); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
				t.Errorf("GET %s: %d %s, want 200 []", p, r.status, r.body)
			}
		}
		// The session is intact.
		if r := do(t, "GET", "/sessions/"+sid, keyA, nil, nil); r.status != 200 {
			t.Errorf("GET /sessions/%s after the attempts: %d, want 200", sid, r.status)
		}
	})
	t.Run("nothing outside the store", func(t *testing.T) {
		entries, err := os.ReadDir(tmpRoot)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != filepath.Base(dataDir) {
			t.Errorf("DATA_DIR's parent holds %v, want only %s", entries, filepath.Base(dataDir))
		}
		// Inside the store, files are named by kiln's ids, never by a client's name.
		err = filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if slices.ContainsFunc(want, func(w string) bool { return path.Base(w) == d.Name() }) {
				t.Errorf("%s in the store is named by a client", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
