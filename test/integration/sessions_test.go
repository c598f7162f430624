package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

type uploadAnswer struct {
	Message   string `json:"message"`
	SessionID string `json:"session_id"`
	Files     []struct {
		FileID   string `json:"fileId"`
		Filename string `json:"filename"`
	} `json:"files"`
}

// upload sends files as LibreChat does: multipart, field "file" for one, "files" for more.
func upload(t *testing.T, s *kilntest.Server, header http.Header, files map[string][]byte) uploadAnswer {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	field := "file"
	if len(files) > 1 {
		field = "files"
	}
	for name, data := range files {
		w, err := mw.CreateFormFile(field, name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	mw.Close()
	h := http.Header{"Content-Type": {mw.FormDataContentType()}}
	for k, v := range header {
		h[k] = v
	}
	resp, b, err := s.Request("POST", "/v1/upload", &body, h)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("upload: %v %d %s", err, statusOf(resp), b)
	}
	var out uploadAnswer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func statusOf(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

func get(t *testing.T, s *kilntest.Server, path string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := s.Request("GET", path, nil, header)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp, b
}

// The flow LibreChat's code tool drives: upload a CSV, run code that reads it and
// writes a chart, list the session's files, download the chart, reuse it in a later
// run, delete it.
func TestLibreChatFlow(t *testing.T) {
	up := upload(t, srv, http.Header{"User-Id": {"user-1"}}, map[string][]byte{"sales data.csv": []byte("month,amount\n1,10\n2,30\n3,20\n")})
	if up.Message != "success" || len(up.Files) != 1 || up.Files[0].Filename != "sales data.csv" {
		t.Fatalf("upload answer %+v", up)
	}
	sid, csvID := up.SessionID, up.Files[0].FileID

	chart := run(t, map[string]any{
		"lang": "py", "user_id": "user-1", "entity_id": "agent_1",
		"files": []map[string]string{{"id": csvID, "session_id": sid, "name": "sales data.csv"}},
		"code": "df = pd.read_csv('sales data.csv')\nprint(df.amount.sum())\n" +
			"plt.plot(df.month, df.amount)\nplt.savefig('/mnt/data/plot.png')",
	})
	if chart.Status != "ok" || chart.Stdout != "60\n" || chart.SessionID != sid {
		t.Fatalf("chart run: status %q stdout %q session %q (want %q) stderr %q", chart.Status, chart.Stdout, chart.SessionID, sid, chart.Stderr)
	}
	if len(chart.Files) != 1 || chart.Files[0].Name != "plot.png" || chart.Files[0].ContentType != "image/png" {
		t.Fatalf("files %+v, want only the new plot.png (never the unchanged input)", chart.Files)
	}
	plot := chart.Files[0]

	resp, b := get(t, srv, "/v1/files/"+sid+"?detail=summary", nil)
	var summary []struct {
		Name         string `json:"name"`
		LastModified string `json:"lastModified"`
	}
	if err := json.Unmarshal(b, &summary); err != nil || resp.StatusCode != 200 {
		t.Fatalf("summary: %v %s", err, b)
	}
	names := map[string]bool{}
	for _, f := range summary {
		names[f.Name] = true
		if _, err := time.Parse("2006-01-02T15:04:05.000Z", f.LastModified); err != nil {
			t.Errorf("lastModified %q: %v", f.LastModified, err)
		}
	}
	if !names[sid+"/"+plot.ID] || !names[sid+"/"+csvID] || len(names) != 2 {
		t.Errorf("summary %v, want the csv and the chart as session/file", summary)
	}

	resp, png := get(t, srv, "/v1/download/"+sid+"/"+plot.ID, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("download: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(png))
	}
	if int64(len(png)) != plot.Size {
		t.Errorf("downloaded %d bytes, exec said %d", len(png), plot.Size)
	}
	if cd := resp.Header.Get("Content-Disposition"); !strings.Contains(cd, `filename="plot.png"`) || !strings.Contains(cd, "filename*=UTF-8''plot.png") {
		t.Errorf("Content-Disposition %q", cd)
	}
	sum := sha256.Sum256(png)

	// A later run gets the chart back, byte for byte.
	reuse := run(t, map[string]any{
		"session_id": sid, "user_id": "user-1",
		"files": []map[string]string{{"id": plot.ID, "session_id": sid, "name": "plot.png"}},
		"code":  "import hashlib\nprint(hashlib.sha256(open('plot.png','rb').read()).hexdigest())",
	})
	if strings.TrimSpace(reuse.Stdout) != hex.EncodeToString(sum[:]) {
		t.Errorf("the chart in the later run hashes to %q, the download to %x (stderr %q)", reuse.Stdout, sum, reuse.Stderr)
	}

	resp, b, err := srv.Request("DELETE", "/v1/files/"+sid+"/"+plot.ID, nil, nil)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("delete: %v %d %s", err, statusOf(resp), b)
	}
	if resp, _ := get(t, srv, "/v1/download/"+sid+"/"+plot.ID, nil); resp.StatusCode != 404 {
		t.Errorf("download after delete: %d, want 404", resp.StatusCode)
	}
	after := run(t, map[string]any{"session_id": sid, "code": "import os\nsorted(os.listdir('.'))"})
	if kilntest.Str(after.Result) != "['sales data.csv']" {
		t.Errorf("files in a run after the delete: %s", kilntest.Str(after.Result))
	}
}

func TestVariablesPersistInSession(t *testing.T) {
	first := run(t, map[string]any{"code": "import numpy as np\n" +
		"arr = np.arange(5)\ndf = pd.DataFrame({'x': [1, 2]})\n" +
		"def f(v):\n    return v + 1\n" +
		"class Point:\n    def __init__(self, x):\n        self.x = x\n" +
		"p = Point(7)\nn = 41"})
	if first.Status != "ok" || !first.HasState {
		t.Fatalf("first: %q has_state %v stderr %q", first.Status, first.HasState, first.Stderr)
	}
	if first.State != nil {
		t.Errorf("session mode returned the state blob in the body")
	}
	second := run(t, map[string]any{"session_id": first.SessionID, "code": "f(n) + int(arr.sum()) + int(df.x.sum()) + p.x"})
	if second.SessionID != first.SessionID || kilntest.Str(second.Result) != "62" {
		t.Errorf("second: session %q result %s stderr %q, want %q 62", second.SessionID, kilntest.Str(second.Result), second.Stderr, first.SessionID)
	}
	// A failed run keeps what it bound before the error, as a notebook does.
	run(t, map[string]any{"session_id": first.SessionID, "code": "n = 0\nraise ValueError('boom')"})
	third := run(t, map[string]any{"session_id": first.SessionID, "code": "n"})
	if kilntest.Str(third.Result) != "0" {
		t.Errorf("after a failed run n = %s, want 0", kilntest.Str(third.Result))
	}
}

func TestSessionChosenByEntity(t *testing.T) {
	entity := fmt.Sprintf("agent_%d", time.Now().UnixNano())
	first := run(t, map[string]any{"entity_id": entity, "code": "token = 'abc'"})
	second := run(t, map[string]any{"entity_id": entity, "code": "token"})
	if second.SessionID != first.SessionID || kilntest.Str(second.Result) != "'abc'" {
		t.Errorf("entity reuse: sessions %q/%q result %s", first.SessionID, second.SessionID, kilntest.Str(second.Result))
	}
	unknown := run(t, map[string]any{"session_id": "AAAAAAAAAAAAAAAAAAAAA", "code": "1"})
	if unknown.SessionID == "AAAAAAAAAAAAAAAAAAAAA" || unknown.SessionID == "" {
		t.Errorf("an unknown session_id must start a new session, got %q", unknown.SessionID)
	}
}

func TestKeysCannotSeeEachOther(t *testing.T) {
	up := upload(t, srv, nil, map[string][]byte{"secret.txt": []byte("key a's data")})
	sid, fid := up.SessionID, up.Files[0].FileID
	run(t, map[string]any{"session_id": sid, "code": "secret = 'a'"})
	other := http.Header{"X-Api-Key": {keyB}}
	for _, path := range []string{"/download/" + sid + "/" + fid, "/state/" + sid, "/state/" + sid + "/info", "/sessions/" + sid} {
		if resp, b := get(t, srv, path, other); resp.StatusCode != 404 {
			t.Errorf("key B GET %s: %d %s, want 404", path, resp.StatusCode, b)
		}
	}
	if resp, b := get(t, srv, "/files/"+sid, other); resp.StatusCode != 200 || strings.TrimSpace(string(b)) != "[]" {
		t.Errorf("key B lists files: %d %s, want 200 []", resp.StatusCode, b)
	}
	if resp, _, _ := srv.Request("DELETE", "/sessions/"+sid, nil, other); statusOf(resp) != 404 {
		t.Errorf("key B deletes the session: %d, want 404", statusOf(resp))
	}
	var got kilntest.ExecResponse
	b, _ := json.Marshal(map[string]any{"session_id": sid, "code": "print(globals().get('secret'))\nimport os\nprint(os.listdir('.'))"})
	resp, body, err := srv.Request("POST", "/exec", bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {keyB}})
	if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
		t.Fatalf("key B exec: %v %d %s", err, statusOf(resp), body)
	}
	if got.SessionID == sid || got.Stdout != "None\n[]\n" {
		t.Errorf("key B ran in session %q (A's is %q) and saw %q", got.SessionID, sid, got.Stdout)
	}
	// The same key acting for another user is another owner too.
	if resp, _ := get(t, srv, "/sessions/"+run(t, map[string]any{"user_id": "u1", "code": "1"}).SessionID, http.Header{"User-Id": {"u2"}}); resp.StatusCode != 404 {
		t.Errorf("user u2 reads u1's session: %d, want 404", resp.StatusCode)
	}
	if resp, _, _ := srv.Request("GET", "/sessions/"+sid, nil, http.Header{"X-Api-Key": {"wrong"}}); statusOf(resp) != 401 {
		t.Errorf("wrong key: %d, want 401", statusOf(resp))
	}
}

func TestStateRoutes(t *testing.T) {
	res := run(t, map[string]any{"code": "v = list(range(10))"})
	sid := res.SessionID
	resp, blob := get(t, srv, "/state/"+sid, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/octet-stream" || len(blob) != res.StateSize {
		t.Fatalf("GET state: %d %q %d bytes (state_size %d)", resp.StatusCode, resp.Header.Get("Content-Type"), len(blob), res.StateSize)
	}
	sum := sha256.Sum256(blob)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	if resp.Header.Get("ETag") != etag {
		t.Errorf("ETag %q, want %q", resp.Header.Get("ETag"), etag)
	}
	if resp, _ := get(t, srv, "/state/"+sid, http.Header{"If-None-Match": {etag}}); resp.StatusCode != 304 {
		t.Errorf("If-None-Match: %d, want 304", resp.StatusCode)
	}
	var infoBody map[string]any
	_, b := get(t, srv, "/state/"+sid+"/info", nil)
	if json.Unmarshal(b, &infoBody) != nil || infoBody["exists"] != true || infoBody["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("info %s", b)
	}

	// A blob saved elsewhere becomes another session's state.
	other := run(t, map[string]any{"code": "w = 1"}).SessionID
	resp, b, _ = srv.Request("POST", "/state/"+other, bytes.NewReader(blob), http.Header{"Content-Type": {"application/octet-stream"}})
	if statusOf(resp) != 201 || !strings.Contains(string(b), fmt.Sprintf(`"size":%d`, len(blob))) {
		t.Fatalf("POST state: %d %s", statusOf(resp), b)
	}
	if got := run(t, map[string]any{"session_id": other, "code": "sum(v)"}); kilntest.Str(got.Result) != "45" {
		t.Errorf("after POST state: result %s stderr %q", kilntest.Str(got.Result), got.Stderr)
	}
	if resp, b, _ := srv.Request("POST", "/state/"+other, strings.NewReader("not lz4"), nil); statusOf(resp) != 400 {
		t.Errorf("junk state: %d %s, want 400", statusOf(resp), b)
	}
	if resp, _, _ := srv.Request("DELETE", "/state/"+other, nil, nil); statusOf(resp) != 204 {
		t.Errorf("DELETE state: %d", statusOf(resp))
	}
	if resp, _ := get(t, srv, "/state/"+other, nil); resp.StatusCode != 404 {
		t.Errorf("GET deleted state: %d, want 404", resp.StatusCode)
	}
	var sess map[string]any
	_, b = get(t, srv, "/sessions/"+sid, nil)
	if json.Unmarshal(b, &sess) != nil || sess["session_id"] != sid || sess["has_state"] != true {
		t.Errorf("GET session: %s", b)
	}
	if resp, _, _ := srv.Request("DELETE", "/sessions/"+sid, nil, nil); statusOf(resp) != 204 {
		t.Errorf("DELETE session: %d", statusOf(resp))
	}
	if resp, _ := get(t, srv, "/sessions/"+sid, nil); resp.StatusCode != 404 {
		t.Errorf("GET deleted session: %d", resp.StatusCode)
	}
}

// A kiln restarted on the same DATA_DIR still serves an earlier session's state and files.
func TestRestartKeepsSessions(t *testing.T) {
	dir := t.TempDir()
	env := []string{"POOL_SIZE=1", "DATA_DIR=" + dir}
	first, err := kilntest.Start(kilntest.Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	res := runOn(t, first, map[string]any{"code": "kept = 'yes'\nopen('note.txt', 'w').write('hello')"})
	if len(res.Files) != 1 {
		t.Fatalf("files %+v", res.Files)
	}
	if err := first.Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	second, err := kilntest.Start(kilntest.Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop(60 * time.Second)
	again := runOn(t, second, map[string]any{"session_id": res.SessionID, "code": "kept + open('note.txt').read()"})
	if again.SessionID != res.SessionID || kilntest.Str(again.Result) != "'yeshello'" {
		t.Errorf("after restart: session %q result %s stderr %q", again.SessionID, kilntest.Str(again.Result), again.Stderr)
	}
	if resp, b := get(t, second, "/download/"+res.SessionID+"/"+res.Files[0].ID, nil); resp.StatusCode != 200 || string(b) != "hello" {
		t.Errorf("download after restart: %d %q", resp.StatusCode, b)
	}
}

// Two kiln processes on one Redis serve one session alternately.
func TestTwoInstancesShareRedis(t *testing.T) {
	url := kilntest.StartRedis(t)
	var servers []*kilntest.Server
	for i := 0; i < 2; i++ {
		// Each instance's one sandbox is refilled while the other serves: under gVisor a
		// warm-up can outlast the default 10s queue timeout on a busy machine.
		s, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "REDIS_URL=" + url, "QUEUE_TIMEOUT_SECONDS=90"}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop(60 * time.Second)
		servers = append(servers, s)
	}
	up := upload(t, servers[0], nil, map[string][]byte{"n.txt": []byte("0")})
	sid := up.SessionID
	for i := 1; i <= 4; i++ {
		s := servers[i%2]
		res := runOn(t, s, map[string]any{"session_id": sid, "code": "count = globals().get('count', 0) + 1\nopen('n.txt', 'w').write(str(count))\ncount"})
		if res.SessionID != sid || kilntest.Str(res.Result) != fmt.Sprint(i) {
			t.Fatalf("call %d on instance %d: session %q result %s stderr %q", i, i%2, res.SessionID, kilntest.Str(res.Result), res.Stderr)
		}
	}
	_, b := get(t, servers[1], "/files/"+sid+"?detail=simple", nil)
	var files []struct{ ID, Name string }
	if json.Unmarshal(b, &files) != nil || len(files) != 1 || files[0].Name != "n.txt" {
		t.Fatalf("files on instance 1: %s", b)
	}
	if resp, data := get(t, servers[0], "/download/"+sid+"/"+files[0].ID, nil); resp.StatusCode != 200 || string(data) != "4" {
		t.Errorf("download on instance 0: %d %q, want 4", resp.StatusCode, data)
	}
}

// REPL_ENABLED=false: a fresh python3 per request through docker exec; state and
// files still work, nothing is pre-imported. On Kubernetes, where sandbox Pods always run
// the warm REPL, kiln refuses the setting at start and says so.
func TestWithoutWarmREPL(t *testing.T) {
	s, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "REPL_ENABLED=false", "DATA_DIR=" + t.TempDir()}})
	if kilntest.OnKubernetes() {
		if err == nil || !strings.Contains(err.Error(), "REPL_ENABLED=false is not supported with RUNTIME=kubernetes") {
			t.Errorf("REPL_ENABLED=false on Kubernetes: err %v, want kiln to refuse it at start", err)
		}
		if err == nil {
			s.Stop(60 * time.Second)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(60 * time.Second)
	first := runOn(t, s, map[string]any{"code": "print('np' in globals())\nimport numpy as np\nx = np.arange(3)\nopen('out.txt','w').write('ok')"})
	if first.Status != "ok" || first.Stdout != "False\n" || len(first.Files) != 1 {
		t.Fatalf("first: %q %q files %d stderr %q", first.Status, first.Stdout, len(first.Files), first.Stderr)
	}
	second := runOn(t, s, map[string]any{"session_id": first.SessionID, "code": "int(x.sum()), open('out.txt').read()"})
	if kilntest.Str(second.Result) != "(3, 'ok')" {
		t.Errorf("second: %s stderr %q", kilntest.Str(second.Result), second.Stderr)
	}
	died := runOn(t, s, map[string]any{"code": "import os\nos._exit(5)"})
	if died.Status != "sandbox_died" || died.ExitCode != 5 {
		t.Errorf("os._exit(5): %q %d", died.Status, died.ExitCode)
	}
}
