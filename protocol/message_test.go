package protocol

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeReady(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		wantErr bool
	}{
		{"valid", `{"type":"ready","protocol":1,"python":"3.13.1","preloaded":{"numpy":"2.2.4"},"capabilities":{"languages":["python","bash"],"state":true,"files":true}}`, false},
		{"not JSON", `ready`, true},
		{"wrong type", `{"type":"result","protocol":1}`, true},
		{"missing type", `{"protocol":1}`, true},
		{"wrong protocol version", `{"type":"ready","protocol":2}`, true},
		{"missing protocol version", `{"type":"ready"}`, true},
		{"wrong field type", `{"type":"ready","protocol":"1"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeReady([]byte(tt.payload))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("got error %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if r.Python != "3.13.1" || r.Preloaded["numpy"] != "2.2.4" {
				t.Errorf("got python %q numpy %q, want 3.13.1 and 2.2.4", r.Python, r.Preloaded["numpy"])
			}
			if !r.Capabilities.Supports("bash") || r.Capabilities.Supports("ruby") {
				t.Errorf("got capabilities %+v, want python and bash only", r.Capabilities)
			}
		})
	}
}

// response builds a response payload from a valid one, changed by edit.
func response(t *testing.T, edit func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"id": "req1", "type": "result", "status": "ok", "exit_code": 0,
		"stdout": "hi\n", "stderr": "", "error": nil, "result": "2",
		"state": nil, "state_error": nil, "files": []any{}, "truncated": false, "duration_ms": 3,
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

func TestDecodeResponse(t *testing.T) {
	lim := Limits{MaxOutputBytes: 100, MaxFileBytes: 10, MaxFiles: 2, MaxStateBytes: 20}
	tests := []struct {
		name    string
		edit    func(m map[string]any)
		lim     Limits
		wantErr bool
	}{
		{"valid", nil, lim, false},
		{"status error", func(m map[string]any) { m["status"] = "error"; m["error"] = "ValueError: x" }, lim, false},
		{"status timeout", func(m map[string]any) { m["status"] = "timeout" }, lim, false},
		{"wrong type", func(m map[string]any) { m["type"] = "pong" }, lim, true},
		{"ready instead of result", func(m map[string]any) { m["type"] = "ready" }, lim, true},
		{"id mismatch", func(m map[string]any) { m["id"] = "req2" }, lim, true},
		{"missing id", func(m map[string]any) { delete(m, "id") }, lim, true},
		{"unknown status", func(m map[string]any) { m["status"] = "oom" }, lim, true},
		{"empty status", func(m map[string]any) { m["status"] = "" }, lim, true},
		{"wrong field type", func(m map[string]any) { m["exit_code"] = "0" }, lim, true},
		{"state not base64", func(m map[string]any) { m["state"] = "!!!" }, lim, true},
		{"state at the limit", func(m map[string]any) { m["state"] = b64(20) }, lim, false},
		{"state over the limit", func(m map[string]any) { m["state"] = b64(21) }, lim, true},
		{"big state, no limit", func(m map[string]any) { m["state"] = b64(1000) }, Limits{}, false},
		{"stdout within slack", func(m map[string]any) { m["stdout"] = strings.Repeat("a", 4*100+256) }, lim, false},
		{"stdout over the limit", func(m map[string]any) { m["stdout"] = strings.Repeat("a", 4*100+257) }, lim, true},
		{"stderr over the limit", func(m map[string]any) { m["stderr"] = strings.Repeat("a", 4*100+257) }, lim, true},
		{"files at the limit", func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "a", "content": b64(10)}, map[string]any{"path": "b", "content": ""}}
		}, lim, false},
		{"too many files", func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "a"}, map[string]any{"path": "b"}, map[string]any{"path": "c"}}
		}, lim, true},
		{"file over the limit", func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "a", "content": b64(11)}}
		}, lim, true},
		{"file without a path", func(m map[string]any) {
			m["files"] = []any{map[string]any{"content": b64(1)}}
		}, lim, true},
		{"file with an empty path, no limits", func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": ""}}
		}, Limits{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeResponse(response(t, tt.edit), "req1", tt.lim)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("got error %v, want ErrMalformed", err)
				}
				if r != nil {
					t.Errorf("got response %+v with the error, want nil", r)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if r.ID != "req1" || r.Type != "result" {
				t.Errorf("got id %q type %q, want req1 and result", r.ID, r.Type)
			}
		})
	}
}

func TestDecodeResponseFields(t *testing.T) {
	payload := response(t, func(m map[string]any) {
		m["status"] = "error"
		m["exit_code"] = 1
		m["error"] = "ZeroDivisionError: division by zero"
		m["state"] = base64.StdEncoding.EncodeToString([]byte("blob"))
		m["files"] = []any{map[string]any{"path": "out.csv", "size": 3, "content": base64.StdEncoding.EncodeToString([]byte("a,b"))}}
		m["truncated"] = true
	})
	r, err := DecodeResponse(payload, "req1", Limits{})
	if err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	if r.Error == nil || *r.Error != "ZeroDivisionError: division by zero" {
		t.Errorf("got error field %v, want the exception line", r.Error)
	}
	if string(r.State) != "blob" {
		t.Errorf("got state %q, want %q", r.State, "blob")
	}
	if len(r.Files) != 1 || r.Files[0].Path != "out.csv" || string(r.Files[0].Content) != "a,b" || r.Files[0].Size != 3 {
		t.Errorf("got files %+v, want out.csv with a,b", r.Files)
	}
	if !r.Truncated || r.ExitCode != 1 || r.Result == nil || *r.Result != "2" {
		t.Errorf("got truncated %v exit %d result %v, want true, 1, 2", r.Truncated, r.ExitCode, r.Result)
	}
}

// TestRequestEncoding checks the wire names the REPL reads, and that state travels as
// base64 and as null when absent.
func TestRequestEncoding(t *testing.T) {
	req := Request{
		ID: "r", Op: OpExec, Lang: "python", Code: "1+1", Args: []string{"a"},
		State: []byte{4, 0x22}, CaptureState: true, TimeoutMS: 5000,
		Files:  []File{{Path: "in.txt", Content: []byte("hi")}},
		Limits: Limits{MaxOutputBytes: 1, MaxFileBytes: 2, MaxFiles: 3, MaxStateBytes: 4},
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	want := map[string]any{
		"id": "r", "op": "exec", "lang": "python", "code": "1+1", "state": "BCI=",
		"capture_state": true, "timeout_ms": float64(5000),
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("field %q: got %v, want %v", k, m[k], v)
		}
	}
	lim, _ := m["limits"].(map[string]any)
	for k, v := range map[string]float64{"max_output_bytes": 1, "max_file_bytes": 2, "max_files": 3, "max_state_bytes": 4} {
		if lim[k] != v {
			t.Errorf("limits.%s: got %v, want %v", k, lim[k], v)
		}
	}
	if strings.ContainsRune(string(b), '\n') {
		t.Errorf("got a newline in the payload %q, want one line", b)
	}

	b, err = json.Marshal(Request{ID: "p", Op: OpPing})
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !strings.Contains(string(b), `"state":null`) {
		t.Errorf("got %s, want state null", b)
	}
}
