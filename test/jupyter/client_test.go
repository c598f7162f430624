package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnsh/kiln/test/kilntest"
)

// A small Jupyter client for the tests that replay what a hostile or careless one does:
// the REST routes with a caller's headers, and a kernel's WebSocket in the legacy JSON
// framing.

// as is a caller: the headers its requests carry (a key, a user, a token).
type as http.Header

func (h as) with(extra ...string) http.Header {
	out := http.Header{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		out.Set(extra[i], extra[i+1])
	}
	return out
}

// startKernel starts a kernel on s as who, failing the test unless it answers 201.
func startKernel(t *testing.T, s *kilntest.Server, who as) string {
	t.Helper()
	resp, body, err := s.Request(http.MethodPost, "/jupyter/api/kernels", strings.NewReader(`{"name":"python3"}`),
		who.with("Content-Type", "application/json"))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/kernels: %v %v %s", err, status(resp), body)
	}
	var k struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = s.Request(http.MethodDelete, "/jupyter/api/kernels/"+k.ID, nil, http.Header(who)) })
	return k.ID
}

func status(resp *http.Response) any {
	if resp == nil {
		return "no response"
	}
	return resp.StatusCode
}

// jmsg is a kernel message as the legacy framing carries it.
type jmsg struct {
	Header       map[string]any  `json:"header"`
	ParentHeader map[string]any  `json:"parent_header"`
	Metadata     map[string]any  `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Channel      string          `json:"channel"`
	MsgType      string          `json:"msg_type"`
}

func (m jmsg) parent() string { id, _ := m.ParentHeader["msg_id"].(string); return id }

// socket is one WebSocket to a kernel.
type socket struct {
	t    *testing.T
	ws   *websocket.Conn
	n    int
	seen []jmsg // read while waiting for something else
}

// dial opens a kernel's channels as who; the HTTP answer is returned when the upgrade is
// refused.
func dial(t *testing.T, s *kilntest.Server, id string, who as) (*socket, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(s.URL, "http") + "/jupyter/api/kernels/" + id + "/channels?session_id=test"
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header(who)})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(64 << 20)
	sk := &socket{t: t, ws: ws}
	t.Cleanup(func() { _ = ws.CloseNow() })
	return sk, resp, nil
}

func mustDial(t *testing.T, s *kilntest.Server, id string, who as) *socket {
	t.Helper()
	sk, resp, err := dial(t, s, id, who)
	if err != nil {
		t.Fatalf("kernel %s channels: %v (%v)", id, err, status(resp))
	}
	return sk
}

// send writes a request of kind with content and returns its msg_id.
func (s *socket) send(kind string, content any) string {
	s.t.Helper()
	s.n++
	id := fmt.Sprintf("%s-%d-%d", kind, os.Getpid(), s.n)
	body, _ := json.Marshal(content)
	// In the order JupyterLab writes a message: the header first.
	m := struct {
		Header       map[string]any  `json:"header"`
		ParentHeader map[string]any  `json:"parent_header"`
		Metadata     map[string]any  `json:"metadata"`
		Content      json.RawMessage `json:"content"`
		Channel      string          `json:"channel"`
		Buffers      []any           `json:"buffers"`
	}{map[string]any{"msg_id": id, "msg_type": kind, "username": "test", "session": "test",
		"date": time.Now().UTC().Format(time.RFC3339), "version": "5.3"},
		map[string]any{}, map[string]any{}, body, "shell", []any{}}
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.ws.Write(ctx, websocket.MessageText, b); err != nil {
		s.t.Fatalf("sending %s: %v", kind, err)
	}
	return id
}

// execute sends a cell and returns its msg_id.
func (s *socket) execute(code string) string {
	return s.send("execute_request", map[string]any{"code": code, "silent": false, "store_history": true,
		"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false})
}

// read returns the next message, or the error that ended the socket.
func (s *socket) read(within time.Duration) (jmsg, error) {
	if len(s.seen) > 0 {
		m := s.seen[0]
		s.seen = s.seen[1:]
		return m, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, b, err := s.ws.Read(ctx)
	if err != nil {
		return jmsg{}, err
	}
	var m jmsg
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Fatalf("a message that is not JSON: %v", err)
	}
	return m, nil
}

// reply waits for the shell reply to msg_id, keeping what else comes for later reads.
func (s *socket) reply(id string, within time.Duration) jmsg {
	s.t.Helper()
	var kept []jmsg
	defer func() { s.seen = append(kept, s.seen...) }()
	deadline := time.Now().Add(within)
	for {
		m, err := s.read(time.Until(deadline))
		if err != nil {
			s.t.Fatalf("waiting for the reply to %s: %v", id, err)
		}
		if m.parent() == id && strings.HasSuffix(m.MsgType, "_reply") {
			return m
		}
		kept = append(kept, m)
	}
}

// content decodes a message's content.
func (m jmsg) content() map[string]any {
	var c map[string]any
	_ = json.Unmarshal(m.Content, &c)
	return c
}

// kilnRSS is the resident memory of the kiln process, from /proc.
func kilnRSS(t *testing.T, s *kilntest.Server) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}
