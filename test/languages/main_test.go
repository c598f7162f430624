// Package languages drives a real kiln with two pools, POOLS=python:1,polyglot:1, with the
// real sandbox images on the real Docker daemon, through every language LibreChat's code
// tool sends as `lang` (js ts c cpp java php rs go d f90 r bash, and py): output and
// arguments, files in and out of /mnt/data, compile and runtime errors, the time limit
// over compile and run, the output cap, files shared across languages within a session,
// Python's state left alone by the other languages, and an unknown language refused. It
// also runs LibreChat's own code execution tool against the server
// (test/ptc/node/languages.test.mjs). One server is shared by the package; its tests run
// one after the other, as the one polyglot sandbox serves one call at a time.
package languages

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

// key is the one API key the server accepts; the helpers send it.
const key = "languages-key"

// maxOutputKB is the server's MAX_OUTPUT_KB, small so that the flood tests are fast.
const maxOutputKB = 64

func TestMain(m *testing.M) {
	os.Exit(kilntest.Main(m, kilntest.Options{Key: key, Env: []string{
		"POOLS=python:1,polyglot:1",
		// The JVM and rustc want more than the default 512 MB.
		"SANDBOX_MEMORY_MB=1024",
		"MAX_OUTPUT_KB=" + strconv.Itoa(maxOutputKB),
		"MAX_TIMEOUT_MS=600000", "TIMEOUT_GRACE_MS=1000",
		// Compiles are slow: a call may wait for another's compile and a warm-up.
		"QUEUE_TIMEOUT_SECONDS=120", "MAX_QUEUE=16",
		"API_KEYS=" + key,
	}}, &srv))
}

// execute posts body to /exec and fails the test unless kiln answers 200. It returns
// the answer and how long the call took.
func execute(t *testing.T, body map[string]any) (kilntest.ExecResponse, time.Duration) {
	t.Helper()
	var out kilntest.ExecResponse
	start := time.Now()
	resp, err := srv.PostJSON("/exec", body, &out)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("POST /exec (lang %v): %v", body["lang"], err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec (lang %v): status %d: %s", body["lang"], resp.StatusCode, out.Message)
	}
	return out, took
}

// describe is an answer in one line for failure messages, its output shortened.
func describe(r kilntest.ExecResponse) string {
	return "status " + r.Status + ", exit code " + strconv.Itoa(r.ExitCode) +
		", error " + strconv.Quote(kilntest.Str(r.Error)) +
		", stdout " + strconv.Quote(shorten(r.Stdout)) + ", stderr " + strconv.Quote(shorten(r.Stderr)) +
		", truncated " + strconv.FormatBool(r.Truncated)
}

func shorten(s string) string {
	if len(s) <= 1200 {
		return s
	}
	return s[:800] + "…[" + strconv.Itoa(len(s)) + " bytes]…" + s[len(s)-300:]
}

// uploaded is a file of an upload: the session it went into, its id and its name.
type uploaded struct {
	SessionID, ID, Name string
}

// ref is the file as /exec's files array names it.
func (u uploaded) ref() map[string]string {
	return map[string]string{"id": u.ID, "session_id": u.SessionID, "name": u.Name}
}

// upload sends one file as LibreChat does (multipart, field "file") into a new session.
func upload(t *testing.T, name string, data []byte) uploaded {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, err := mw.CreateFormFile("file", name)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	mw.Close()
	resp, b, err := srv.Request(http.MethodPost, "/v1/upload", &body, http.Header{"Content-Type": {mw.FormDataContentType()}})
	if err != nil {
		t.Fatalf("POST /v1/upload: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/upload: status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Message   string `json:"message"`
		SessionID string `json:"session_id"`
		Files     []struct {
			FileID   string `json:"fileId"`
			Filename string `json:"filename"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("POST /v1/upload: %v: %s", err, b)
	}
	if out.Message != "success" || out.SessionID == "" || len(out.Files) != 1 || out.Files[0].Filename != name {
		t.Fatalf("POST /v1/upload: answer %s", b)
	}
	return uploaded{SessionID: out.SessionID, ID: out.Files[0].FileID, Name: name}
}

// The CSV every language reads: the sum of its amount column is 60.
const (
	csvName = "data.csv"
	csvData = "region,amount,units\nnorth,10,1\nsouth,30,2\neast,20,3\n"
	csvSum  = 60
)

var (
	csvMu   sync.Mutex
	csvFile *uploaded
)

// csvInput uploads the CSV on first use and returns it; it is uploaded once per run.
func csvInput(t *testing.T) uploaded {
	t.Helper()
	csvMu.Lock()
	defer csvMu.Unlock()
	if csvFile == nil {
		f := upload(t, csvName, []byte(csvData))
		csvFile = &f
	}
	return *csvFile
}

// download fetches a file of a session and fails the test unless kiln answers 200.
func download(t *testing.T, sessionID, fileID string) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := srv.Request(http.MethodGet, "/v1/download/"+sessionID+"/"+fileID, nil, nil)
	if err != nil {
		t.Fatalf("GET /v1/download/%s/%s: %v", sessionID, fileID, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/download/%s/%s: status %d: %s", sessionID, fileID, resp.StatusCode, b)
	}
	return resp, b
}

// oneLine reports whether s is a non-empty single line.
func oneLine(s *string) bool {
	return s != nil && strings.TrimSpace(*s) != "" && !strings.ContainsAny(*s, "\r\n")
}
