package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// TestAgentRoundTrip: a call reaches the REPL with its method, arguments and bytes; the
// REPL's events come back as agent frames, which net frames and cell results are not.
func TestAgentRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte{0, '\n', 0xff}, 40000) // raw bytes, newlines among them
	bufs, err := EncodeAgent(AgentCall{Call: 7, Method: "file.write", Args: map[string]any{"path": "a b"}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	req := parseOne(t, bufs)
	var h struct {
		Op     string         `json:"op"`
		Call   uint32         `json:"call"`
		Method string         `json:"method"`
		Args   map[string]any `json:"args"`
	}
	if err := json.Unmarshal(req.Header, &h); err != nil || h.Op != OpAgent || h.Call != 7 || h.Method != "file.write" || h.Args["path"] != "a b" {
		t.Errorf("the REPL reads header %s (%v), want op agent, call 7, file.write, path \"a b\"", req.Header, err)
	}
	if !bytes.Equal(req.Binary, data) {
		t.Errorf("the REPL reads %d bytes, want the call's %d", len(req.Binary), len(data))
	}

	for _, e := range []AgentEvent{
		{Call: 7, Event: json.RawMessage(`{"stdout":"hi"}`), Data: []byte("out\x00put")},
		{Call: 7, End: true, Code: "not_found", Error: "no such file"},
		{Call: 1 << 31, End: true},
	} {
		f := parseOne(t, EncodeAgentResponse(e))
		if !IsAgent(f) || IsNet(f) {
			t.Fatalf("frame %s: IsAgent %v, IsNet %v; want an agent frame only", f.Header, IsAgent(f), IsNet(f))
		}
		got, err := DecodeAgent(f)
		if err != nil {
			t.Fatal(err)
		}
		if e.Event == nil {
			e.Event = json.RawMessage("{}")
		}
		if got.Call != e.Call || got.End != e.End || got.Code != e.Code || got.Error != e.Error || !bytes.Equal(got.Event, e.Event) || !bytes.Equal(got.Data, e.Data) {
			t.Errorf("decoded %+v, want %+v", got, e)
		}
	}

	cell := Frame{Header: []byte(`{"binary":0,"type":"result","call":1}`)}
	if IsAgent(cell) {
		t.Errorf("a cell's result %s reads as an agent frame", cell.Header)
	}
	if _, err := DecodeAgent(Frame{Header: []byte(`{"binary":3,"type":"agent","call":1}`), Binary: []byte("ab")}); !errors.Is(err, ErrMalformed) {
		t.Errorf("an agent frame whose count is wrong decodes with %v, want ErrMalformed", err)
	}
}
