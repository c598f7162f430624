package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeReady(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		wantErr bool
	}{
		{"valid", `{"binary":0,"type":"ready","protocol":2,"python":"3.13.1","preloaded":{"numpy":"2.2.4"},"capabilities":{"languages":["python","bash"],"state":true,"files":true}}`, false},
		{"not JSON", `ready`, true},
		{"wrong type", `{"type":"result","protocol":2}`, true},
		{"missing type", `{"protocol":2}`, true},
		{"wrong protocol version", `{"type":"ready","protocol":1}`, true},
		{"missing protocol version", `{"type":"ready"}`, true},
		{"wrong field type", `{"type":"ready","protocol":"2"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeReady(Frame{Header: []byte(tt.payload)})
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

// response builds a response frame from a valid one, changed by edit: the header as
// a map, and the payloads after it.
func response(t *testing.T, edit func(m map[string]any, bin *string)) Frame {
	t.Helper()
	m := map[string]any{
		"id": "req1", "type": "result", "status": "ok", "exit_code": 0,
		"stdout": "hi\n", "stderr": "", "error": nil, "result": "2",
		"state": nil, "state_unchanged": false, "state_error": nil, "files": []any{}, "truncated": false, "duration_ms": 3,
	}
	bin := ""
	if edit != nil {
		edit(m, &bin)
	}
	if _, set := m["binary"]; !set {
		m["binary"] = len(bin)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return Frame{Header: b, Binary: []byte(bin)}
}

func size(n int) map[string]any { return map[string]any{"size": n} }

func file(path string, n int) map[string]any { return map[string]any{"path": path, "size": n} }

func TestDecodeResponse(t *testing.T) {
	lim := Limits{MaxOutputBytes: 100, MaxFileBytes: 10, MaxFiles: 2, MaxStateBytes: 20}
	tests := []struct {
		name    string
		edit    func(m map[string]any, bin *string)
		lim     Limits
		wantErr bool
	}{
		{"valid", nil, lim, false},
		{"status error", func(m map[string]any, _ *string) { m["status"] = "error"; m["error"] = "ValueError: x" }, lim, false},
		{"status timeout", func(m map[string]any, _ *string) { m["status"] = "timeout" }, lim, false},
		{"wrong type", func(m map[string]any, _ *string) { m["type"] = "pong" }, lim, true},
		{"ready instead of result", func(m map[string]any, _ *string) { m["type"] = "ready" }, lim, true},
		{"id mismatch", func(m map[string]any, _ *string) { m["id"] = "req2" }, lim, true},
		{"missing id", func(m map[string]any, _ *string) { delete(m, "id") }, lim, true},
		{"unknown status", func(m map[string]any, _ *string) { m["status"] = "oom" }, lim, true},
		{"empty status", func(m map[string]any, _ *string) { m["status"] = "" }, lim, true},
		{"wrong field type", func(m map[string]any, _ *string) { m["exit_code"] = "0" }, lim, true},
		{"state at the limit", func(m map[string]any, b *string) { m["state"] = size(20); *b = strings.Repeat("s", 20) }, lim, false},
		{"state over the limit", func(m map[string]any, b *string) { m["state"] = size(21); *b = strings.Repeat("s", 21) }, lim, true},
		{"big state, no limit", func(m map[string]any, b *string) { m["state"] = size(1000); *b = strings.Repeat("s", 1000) }, Limits{}, false},
		{"state unchanged", func(m map[string]any, _ *string) { m["state_unchanged"] = true }, lim, false},
		{"state sent back as unchanged", func(m map[string]any, b *string) { m["state_unchanged"] = true; m["state"] = size(1); *b = "s" }, lim, true},
		{"state past the payloads", func(m map[string]any, b *string) { m["state"] = size(5); *b = "sss" }, lim, true},
		{"payloads named by nothing", func(m map[string]any, b *string) { *b = "extra" }, lim, true},
		{"a count that disagrees with the payloads", func(m map[string]any, b *string) { m["binary"] = 4; m["state"] = size(3); *b = "sss" }, lim, true},
		{"a negative size", func(m map[string]any, b *string) { m["state"] = size(-1) }, lim, true},
		{"stdout within slack", func(m map[string]any, _ *string) { m["stdout"] = strings.Repeat("a", 4*100+256) }, lim, false},
		{"stdout over the limit", func(m map[string]any, _ *string) { m["stdout"] = strings.Repeat("a", 4*100+257) }, lim, true},
		{"stderr over the limit", func(m map[string]any, _ *string) { m["stderr"] = strings.Repeat("a", 4*100+257) }, lim, true},
		{"files at the limit", func(m map[string]any, b *string) {
			m["files"] = []any{file("a", 10), file("b", 0)}
			*b = strings.Repeat("f", 10)
		}, lim, false},
		{"too many files", func(m map[string]any, _ *string) {
			m["files"] = []any{file("a", 0), file("b", 0), file("c", 0)}
		}, lim, true},
		{"file over the limit", func(m map[string]any, b *string) { m["files"] = []any{file("a", 11)}; *b = strings.Repeat("f", 11) }, lim, true},
		{"file without a path", func(m map[string]any, b *string) { m["files"] = []any{map[string]any{"size": 1}}; *b = "f" }, lim, true},
		{"file with an empty path, no limits", func(m map[string]any, _ *string) { m["files"] = []any{file("", 0)} }, Limits{}, true},
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
			if r.ID != "req1" {
				t.Errorf("got id %q, want req1", r.ID)
			}
		})
	}
}

// TestResponseRoundTrip encodes a response as a REPL would, parses the frame as the
// host does, and checks every field, the payloads cut out of the one buffer.
func TestResponseRoundTrip(t *testing.T) {
	errLine, result := "ZeroDivisionError: division by zero", "2"
	in := &Response{
		ID: "req1", Status: StatusError, ExitCode: 1, Stdout: "out \u2603\n", Stderr: "err", Error: &errLine, Result: &result,
		State: []byte("blob"), Files: []File{{Path: "out.csv", Content: []byte("a,b")}, {Path: "dir/x", Content: []byte{0, 1, 2}}},
		Truncated: true, DurationMS: 12,
	}
	bufs, err := EncodeResponse(in)
	if err != nil {
		t.Fatal(err)
	}
	var frames []Frame
	p := NewParser(1<<20, 1<<20)
	for _, b := range bufs {
		p.Feed(b, func(f Frame, err error) {
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			frames = append(frames, f)
		})
	}
	if len(frames) != 1 {
		t.Fatalf("got %d frames, want 1", len(frames))
	}
	r, err := DecodeResponse(frames[0], "req1", Limits{})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(r, in) {
		t.Errorf("got  %+v\nwant %+v", r, in)
	}
	if &r.State[0] != &frames[0].Binary[0] {
		t.Errorf("the state was copied out of the frame; want a slice of it")
	}
	if cap(r.State) != len(r.State) {
		t.Errorf("got a state slice with capacity %d past its length %d: an append would write into the next payload", cap(r.State), len(r.State))
	}
}

// TestRequestRoundTrip checks what a REPL stand-in reads back of an encoded request.
func TestRequestRoundTrip(t *testing.T) {
	in := &Request{
		ID: "r", Op: OpExec, Lang: "bash", Code: "echo", Args: []string{"a"}, State: []byte{4, 0x22}, CaptureState: true,
		TimeoutMS: 5000, Files: []File{{Path: "in.txt", Content: []byte("hi")}},
		Limits: Limits{MaxOutputBytes: 1, MaxFileBytes: 2, MaxFiles: 3, MaxStateBytes: 4, MaxToolCallBytes: 5},
		Tools:  []Tool{{Name: "get-weather", Function: "get_weather"}},
	}
	bufs, err := EncodeRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	var got *Request
	p := NewRequestParser(1<<20, 1<<20)
	p.Feed(bytes.Join(bufs, nil), func(f Frame, err error) {
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if got, err = DecodeRequest(f); err != nil {
			t.Fatalf("decode: %v", err)
		}
	})
	if !reflect.DeepEqual(got, in) {
		t.Errorf("got  %+v\nwant %+v", got, in)
	}
}

func TestToolCallsAndResultsRoundTrip(t *testing.T) {
	lim := Limits{MaxToolCallBytes: 100}
	calls := []ToolCall{{ID: "call_001", Name: "get-weather", Input: json.RawMessage(`{"city":"Oslo"}`)}, {ID: "call_002", Name: "add", Input: json.RawMessage(`{}`)}}
	frame, err := EncodeEvent("r1", &Event{Type: EventToolCalls, Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	ev, resp, err := Decode(parseOne(t, frame), "r1", lim)
	if err != nil || resp != nil || ev.Type != EventToolCalls || !reflect.DeepEqual(ev.Calls, calls) {
		t.Fatalf("Decode = %+v, %+v, %v; want the calls", ev, resp, err)
	}

	big := []ToolCall{{ID: "call_003", Name: "add", Input: json.RawMessage(`"` + strings.Repeat("x", 1300) + `"`)}}
	frame, _ = EncodeEvent("r1", &Event{Type: EventToolCalls, Calls: big})
	if _, _, err := Decode(parseOne(t, frame), "r1", lim); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a call over twice the input cap: err = %v, want ErrMalformed", err)
	}
	for _, bad := range []string{`[]`, `{}`, `[{"id":"","name":"x","input":{}}]`, `[{"id":"c","name":"x"}]`} {
		f := Frame{Header: []byte(fmt.Sprintf(`{"binary":%d,"id":"r1","type":"tool_calls"}`, len(bad))), Binary: []byte(bad)}
		if _, _, err := Decode(f, "r1", lim); !errors.Is(err, ErrMalformed) {
			t.Errorf("tool calls %s: err = %v, want ErrMalformed", bad, err)
		}
	}

	results := []ToolResult{{CallID: "call_001", Result: json.RawMessage(`{"temp":20}`)}, {CallID: "call_002", Result: json.RawMessage("null"), IsError: true, ErrorMessage: "no"}}
	out, err := EncodeToolResults("r1", results)
	if err != nil {
		t.Fatal(err)
	}
	id, got, err := DecodeToolResults(parseOne(t, out))
	if err != nil || id != "r1" || !reflect.DeepEqual(got, results) {
		t.Fatalf("DecodeToolResults = %q, %+v, %v", id, got, err)
	}
}

// parseOne parses the one frame bufs hold, from either side.
func parseOne(t *testing.T, bufs [][]byte) Frame {
	t.Helper()
	data := bytes.Join(bufs, nil)
	p := NewParser(1<<20, 1<<20)
	if bytes.HasPrefix(data, []byte(RequestStart)) {
		p = NewRequestParser(1<<20, 1<<20)
	}
	var frames []Frame
	p.Feed(data, func(f Frame, err error) {
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		frames = append(frames, f)
	})
	if len(frames) != 1 {
		t.Fatalf("got %d frames, want 1", len(frames))
	}
	return frames[0]
}
