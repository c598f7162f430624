package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLiftStateMatchesEncodingJSON(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 250, '"', '\\'}, 50000)
	full, _ := json.Marshal(map[string]any{"id": "r1", "type": "result", "status": "ok",
		"stdout": `say "state":"x" \" `, "files": []File{{Path: "a", Content: []byte(`{"state":"]`)}}, "state": big})
	tests := []struct {
		name    string
		payload string
		lifted  bool
	}{
		{"big state among tricky strings", string(full), true},
		{"state null", `{"id":"r1","type":"result","status":"ok","state":null}`, false},
		{"no state", `{"id":"r1","type":"result","status":"ok"}`, false},
		{"empty state", `{"id":"r1","type":"result","status":"ok","state":""}`, true},
		{"spaces", "{ \"id\" : \"r1\" , \"type\":\"result\",\"status\":\"ok\", \"state\" : \"AAE=\" }", true},
		{"duplicate state", `{"id":"r1","type":"result","status":"ok","state":"AAE=","state":"AAI="}`, false},
		{"escaped state", `{"id":"r1","type":"result","status":"ok","state":"AA\u0045="}`, false},
		{"not base64", `{"id":"r1","type":"result","status":"ok","state":"!!"}`, false},
		{"state in a nested object", `{"id":"r1","type":"result","status":"ok","files":[{"path":"a","content":"","state":"AAE="}]}`, false},
		{"truncated", `{"id":"r1","type":"result","status":"ok","state":"AAE=`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, ok := liftState([]byte(tt.payload))
			if ok != tt.lifted {
				t.Errorf("got lifted %v, want %v", ok, tt.lifted)
			}
			var want Response
			wantErr := json.Unmarshal([]byte(tt.payload), &want)
			got, err := DecodeResponse([]byte(tt.payload), "r1", Limits{})
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("got error %v, encoding/json says %v", err, wantErr)
			}
			if err == nil && (!bytes.Equal(got.State, want.State) || (got.State == nil) != (want.State == nil) || got.Stdout != want.Stdout) {
				t.Errorf("got state %d bytes (nil %v), stdout %q; want %d bytes (nil %v), %q",
					len(got.State), got.State == nil, got.Stdout, len(want.State), want.State == nil, want.Stdout)
			}
		})
	}
}

func BenchmarkDecodeResponseState1MB(b *testing.B) {
	payload, _ := json.Marshal(map[string]any{"id": "r1", "type": "result", "status": "ok",
		"stdout": "1\n", "files": []File{}, "state": bytes.Repeat([]byte(strings.Repeat("kiln", 64)), 4096)})
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := DecodeResponse(payload, "r1", Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
