package jupyter

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

func TestCutTraceback(t *testing.T) {
	for _, tc := range []struct {
		text, before string
		tb           []string
	}{
		{"warning: slow\nTraceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nZeroDivisionError: division by zero\n",
			"warning: slow\n", []string{"Traceback (most recent call last):", "  File \"<string>\", line 1, in <module>", "ZeroDivisionError: division by zero"}},
		{"  File \"<string>\", line 3\n    if\n      ^\nSyntaxError: invalid syntax\n",
			"", []string{"  File \"<string>\", line 3", "    if", "      ^", "SyntaxError: invalid syntax"}},
		{"  File \"<cell 4>\", line 1\n    x =\n       ^\nSyntaxError: invalid syntax\n",
			"", []string{"  File \"<cell 4>\", line 1", "    x =", "       ^", "SyntaxError: invalid syntax"}},
		{"just a warning\n", "just a warning\n", nil},
	} {
		tb, before, ok := cutTraceback(tc.text)
		if before != tc.before || !slices.Equal(tb, tc.tb) || ok != (tc.tb != nil) {
			t.Errorf("cutTraceback(%q) = %q, %q, %v", tc.text, tb, before, ok)
		}
	}
}

func TestFailureNames(t *testing.T) {
	line := func(s string) *string { return &s }
	for _, tc := range []struct {
		res           executor.Result
		cancelled     bool
		ename, evalue string
	}{
		{executor.Result{Status: execution.StatusError, Error: line("ZeroDivisionError: division by zero")}, false, "ZeroDivisionError", "division by zero"},
		{executor.Result{Status: execution.StatusError, Error: line("KeyError")}, false, "KeyError", ""},
		{executor.Result{Status: execution.StatusTimeout, Error: line("Time limit exceeded")}, false, "TimeoutError", "Time limit exceeded"},
		{executor.Result{Status: execution.StatusOOM, Error: line("Out of memory")}, false, "MemoryError", "Out of memory"},
		{executor.Result{Status: execution.StatusError, Error: line("KeyboardInterrupt")}, true, "KeyboardInterrupt", ""},
	} {
		got := failure(tc.res.Status, tc.res.Error, tc.cancelled)
		if got.ename != tc.ename || got.evalue != tc.evalue || len(got.traceback) == 0 {
			t.Errorf("failure(%+v) = %+v", tc.res, got)
		}
	}
}

// A reply names its parent's header and carries the protocol's version.
func TestReplyShape(t *testing.T) {
	parent := &message{Header: header{MsgID: "m1", MsgType: "execute_request", Session: "s1"}}
	m := reply(parent, "s1", "iopub", "status", map[string]string{"execution_state": "busy"})
	b, _ := json.Marshal(m)
	var back map[string]any
	_ = json.Unmarshal(b, &back)
	ph := back["parent_header"].(map[string]any)
	h := back["header"].(map[string]any)
	if ph["msg_id"] != "m1" || h["version"] != "5.3" || h["msg_type"] != "status" || back["channel"] != "iopub" ||
		back["msg_type"] != "status" || back["msg_id"] != h["msg_id"] {
		t.Errorf("reply: %s", b)
	}
}

// jupyter_server's gateway client writes the header's date as seconds, a number: the
// request is read, and its header goes back as the reply's parent as it came.
func TestGatewayClientDate(t *testing.T) {
	in := `{"header": {"msg_id": "m2", "msg_type": "kernel_info_request", "username": "u", "session": "s2",
		"date": 1795874400.25, "version": "5.3"}, "parent_header": {}, "metadata": {}, "content": {},
		"msg_id": "m2", "msg_type": "kernel_info_request"}`
	var m message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatalf("a numeric date: %v", err)
	}
	b, _ := json.Marshal(reply(&m, "s2", "shell", "kernel_info_reply", map[string]string{}))
	if !strings.Contains(string(b), `"parent_header":{"msg_id":"m2","msg_type":"kernel_info_request","username":"u","session":"s2","date":1795874400.25`) {
		t.Errorf("reply: %s", b)
	}
}

// The v1 framing reads back what it wrote, and refuses what is not a frame.
func TestWireV1RoundTrip(t *testing.T) {
	m := reply(&message{Header: header{MsgID: "p", MsgType: "execute_request"}}, "s", "iopub", "stream",
		map[string]string{"name": "stdout", "text": "héllo\n"})
	b, err := encodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeV1(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Channel != "iopub" || back.Header != m.Header || string(back.Content) != string(m.Content) || string(back.ParentHeader) != string(m.ParentHeader) {
		t.Errorf("round trip: %+v, want %+v", back, m)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, b[:40], append([]byte{200, 0, 0, 0, 0, 0, 0, 0}, b[8:]...)} {
		if _, err := decodeV1(bad); err == nil {
			t.Errorf("decodeV1(%q) accepted", bad)
		}
	}
}

// A kernel id is its session's id written as a UUID, and reads back; nothing else does.
func TestKernelIDs(t *testing.T) {
	for range 1000 {
		sid := kiln.NewID()
		kid := kernelID(sid)
		back, ok := sessionOf(kid)
		if !ok || back != sid || len(kid) != 36 || strings.Count(kid, "-") != 4 {
			t.Fatalf("%s -> %s -> %s %v", sid, kid, back, ok)
		}
	}
	upper := strings.ToUpper(kernelID(kiln.NewID()))
	for _, bad := range []string{"", "not-a-kernel", upper, "ffffffff-ffff-ffff-ffff-ffffffffffff", "0000000000000000000000000000000000ab",
		"00000000-0000-0000-0000-00000000000g", "00000000-0000-0000-00000-0000000000a"} {
		if sid, ok := sessionOf(bad); ok {
			t.Errorf("sessionOf(%q) = %q", bad, sid)
		}
	}
}

// A kernel nobody connects to or runs cells in is forgotten by the table after a while
// (its session stays, and its id still reaches it); one with a connection, or recent
// activity, is kept.
func TestIdleKernelsAreForgotten(t *testing.T) {
	h := &Handler{kernels: map[string]*kernel{}}
	owned := func(id string) *store.Session { return &store.Session{ID: id, Owner: "a\x00"} }
	old := h.add("k-old", owned("s-old"), session.Caller{Key: "a"})
	connected := h.add("k-conn", owned("s-conn"), session.Caller{Key: "a"})
	old.last = time.Now().Add(-2 * forgetAfter)
	connected.last = old.last
	connected.conns[&conn{}] = true
	h.add("k-new", owned("s-new"), session.Caller{Key: "a"})
	if _, ok := h.kernels["k-old"]; ok {
		t.Error("an idle kernel with no connection is still in the table")
	}
	for _, id := range []string{"k-conn", "k-new"} {
		if _, ok := h.kernels[id]; !ok {
			t.Errorf("kernel %s was forgotten", id)
		}
	}
}
