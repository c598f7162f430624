package librechat

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// user is a LibreChat user as its tokens name it: a MongoDB id and a tenant.
type user struct {
	name, id, tenant string
}

// The Go tests' users; the Node tests have their own, so that neither half sees the
// other's sessions.
var (
	alice = user{"alice", "66a0c0ffee00000000000a11", "acme"}
	bob   = user{"bob", "66a0c0ffee00000000000b0b", "acme"}
	carol = user{"carol", "66a0c0ffee00000000000ca1", "globex"}
)

// claims are the claims LibreChat's codeapi.ts mints for u at now: every one it always
// sends, none of the optional ones.
func claims(u user, now time.Time) map[string]any {
	t := now.Unix()
	return map[string]any{
		"iss": "librechat", "aud": "codeapi", "sub": u.id, "iat": t, "nbf": t, "exp": t + 300,
		"jti": randomUUID(), "tenant_id": u.tenant, "role": "USER", "principal_source": "librechat_jwt",
		"auth_context_hash": contextHash(u, "USER", "librechat_jwt"),
	}
}

// randomUUID is a version 4 UUID, as crypto.randomUUID() makes LibreChat's jti.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// contextHash is codeapi.ts's auth_context_hash: the SHA-256 of the identity's JSON,
// its keys in the order LibreChat writes them (which is sorted order, as Go writes a map).
func contextHash(u user, role, source string) string {
	b, _ := json.Marshal(map[string]string{"chc_user_id": "", "org_id": "", "principal_source": source,
		"role": role, "service_id": "", "sub": u.id, "tenant_id": u.tenant})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sign signs claims with key as alg, with the header LibreChat writes: alg, typ JWT, kid.
func sign(t testing.TB, alg jose.SignatureAlgorithm, kid string, key any, c map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), kid)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatalf("signer: %v", err)
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return tok
}

// token is a fresh EdDSA token of u's, under LibreChat's default kid.
func (u user) token(t testing.TB) string {
	t.Helper()
	return sign(t, jose.EdDSA, edKid, keys.ed, claims(u, time.Now()))
}

// auth is how u authenticates a request: a fresh token, as LibreChat mints one per call
// (or reuses one for up to 30 s).
func (u user) auth(t testing.TB) http.Header {
	t.Helper()
	return bearer(u.token(t))
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// platform authenticates as the API key holder, without naming a user.
func platform() http.Header { return http.Header{"X-Api-Key": {apiKey}} }

// with returns h with more headers added.
func with(h http.Header, kv ...string) http.Header {
	h = h.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// answer is a response with its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into v, failing t when it is not JSON.
func (a answer) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d is not JSON: %v: %s", a.status, err, a.body)
	}
}

// errorCode is the error envelope's error field, or "" when the body has none.
func (a answer) errorCode() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error
}

// send makes a request to the shared server under /v1 (LibreChat's base URL ends in
// /v1) with exactly the headers given: no credential is added.
func send(t testing.TB, method, path string, h http.Header, body io.Reader) answer {
	t.Helper()
	return sendTo(t, srv.URL, method, path, h, body)
}

// sendTo is send to the kiln at base.
func sendTo(t testing.TB, base, method, path string, h http.Header, body io.Reader) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+"/v1"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "LibreChat/1.0")
	maps.Copy(req.Header, h)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// postJSON posts v as JSON.
func postJSON(t testing.TB, path string, h http.Header, v any) answer {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return send(t, http.MethodPost, path, with(h, "Content-Type", "application/json"), bytes.NewReader(b))
}

// execAnswer is what the tests read of a 200 from POST /exec.
type execAnswer struct {
	SessionID        string    `json:"session_id"`
	Status           string    `json:"status"`
	Stdout           string    `json:"stdout"`
	Stderr           string    `json:"stderr"`
	Files            []fileOut `json:"files"`
	RuntimeStatus    string    `json:"runtime_status"`
	RuntimeSessionID *string   `json:"runtime_session_id"`
}

type fileOut struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	StorageSessionID string `json:"storage_session_id"`
	Inherited        bool   `json:"inherited"`
}

// exec runs Python and fails t unless the request is answered 200.
func exec(t testing.TB, h http.Header, body map[string]any) execAnswer {
	t.Helper()
	body["lang"] = "py"
	a := postJSON(t, "/exec", h, body)
	if a.status != http.StatusOK {
		t.Fatalf("POST /exec: %d %s", a.status, a.body)
	}
	var out execAnswer
	a.json(t, &out)
	return out
}

// fileRef is a file reference of /exec, as LibreChat's agents send it.
type fileRef struct {
	ID               string `json:"id"`
	StorageSessionID string `json:"storage_session_id"`
	Name             string `json:"name"`
	Kind             string `json:"kind"`
	ResourceID       string `json:"resource_id"`
	Version          *int   `json:"version,omitempty"`
}

// query is the identity query that names the ref's scope, as LibreChat sends it with reads
// and deletes.
func (r fileRef) query() string {
	v := ""
	if r.Version != nil {
		v = strconv.Itoa(*r.Version)
	}
	return scopeQuery(r.Kind, r.ResourceID, v)
}

// namedFile is one file of an upload; its name may hold directories.
type namedFile struct {
	name string
	data []byte
}

// uploaded is the answer to an upload, single or batch.
type uploaded struct {
	Message          string `json:"message"`
	StorageSessionID string `json:"storage_session_id"`
	Files            []struct {
		Status   string `json:"status"`
		Filename string `json:"filename"`
		FileID   string `json:"fileId"`
		Error    string `json:"error"`
	} `json:"files"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
}

// uploadAt posts files to the kiln at base as LibreChat's crud.js does: the fields kind,
// id, version (a skill's) and read_only first, then one part "file" per file, its name
// (with any directories) as the part's filename. route is /upload or /upload/batch.
func uploadAt(t testing.TB, base, route string, h http.Header, fields [][2]string, files ...namedFile) (answer, uploaded) {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for _, f := range fields {
		if err := w.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		ph := textproto.MIMEHeader{}
		ph.Set("Content-Disposition", `form-data; name="file"; filename="`+f.name+`"`)
		ph.Set("Content-Type", "application/octet-stream")
		p, err := w.CreatePart(ph)
		if err == nil {
			_, err = p.Write(f.data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	a := sendTo(t, base, http.MethodPost, route, with(h, "Content-Type", w.FormDataContentType()), &body)
	var out uploaded
	if a.status == http.StatusOK {
		a.json(t, &out)
	}
	return a, out
}

// mustUpload uploads files and returns where they went, failing t unless all were kept.
func mustUpload(t testing.TB, route string, h http.Header, fields [][2]string, files ...namedFile) uploaded {
	t.Helper()
	return uploadTo(t, srv.URL, route, h, fields, files...)
}

// uploadTo is mustUpload to the kiln at base.
func uploadTo(t testing.TB, base, route string, h http.Header, fields [][2]string, files ...namedFile) uploaded {
	t.Helper()
	a, out := uploadAt(t, base, route, h, fields, files...)
	if a.status != http.StatusOK || out.Message != "success" || len(out.Files) != len(files) {
		t.Fatalf("POST %s: %d %s", route, a.status, a.body)
	}
	return out
}

// scopeQuery is LibreChat's identity query: ?kind=&id=[&version=].
func scopeQuery(kind, id string, version string) string {
	q := "?kind=" + kind + "&id=" + id
	if version != "" {
		q += "&version=" + version
	}
	return q
}

// salesCSV is a realistic table: rows of orders across regions, with known totals.
func salesCSV(rows int) (data []byte, totals map[string]int) {
	regions := []string{"north", "south", "east", "west"}
	totals = map[string]int{}
	var b strings.Builder
	b.WriteString("order_id,region,units,unit_price_cents\n")
	for i := range rows {
		r := regions[i%len(regions)]
		units := 1 + i%7
		price := 250 + (i*37)%900
		totals[r] += units * price
		b.WriteString(strings.Join([]string{strconv.Itoa(100000 + i), r, strconv.Itoa(units), strconv.Itoa(price)}, ","))
		b.WriteByte('\n')
	}
	return []byte(b.String()), totals
}
