package jupyter

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// heldSessions is a session layer whose calls wait for release once they have begun.
type heldSessions struct {
	sess    *store.Session
	entered chan struct{}
	release chan struct{}
}

func (f *heldSessions) NewSession(_ context.Context, c session.Caller, entity string) (*store.Session, error) {
	f.sess = &store.Session{ID: kiln.NewID(), Owner: c.Owner(), EntityID: entity, ExpiresAt: time.Now().Add(time.Hour)}
	return f.sess, nil
}

func (f *heldSessions) Session(context.Context, session.Caller, string) (*store.Session, error) {
	return f.sess, nil
}

func (f *heldSessions) Admit(session.Caller) (func(), error) { return func() {}, nil }

func (f *heldSessions) Exec(context.Context, session.Caller, session.ExecRequest) (*session.ExecResult, error) {
	f.entered <- struct{}{}
	<-f.release
	return &session.ExecResult{Result: &executor.Result{Status: "ok"}, Session: f.sess}, nil
}

func (f *heldSessions) Cancel(context.Context, session.Caller, string) error        { return nil }
func (f *heldSessions) DeleteState(context.Context, session.Caller, string) error   { return nil }
func (f *heldSessions) DeleteSession(context.Context, session.Caller, string) error { return nil }

// Close waits for the cells the kernels' connections are running, and refuses new
// connections meanwhile: an HTTP server's Shutdown does not wait for a WebSocket, and a
// cell's results must reach the store before it closes. (Close once returned at once.)
func TestCloseWaitsForRunningCells(t *testing.T) {
	f := &heldSessions{entered: make(chan struct{}), release: make(chan struct{})}
	h := New(Config{Sessions: f, Caller: func(*http.Request) session.Caller { return session.Caller{Key: "k"} }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/kernels", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/kernels: %v %v", err, resp)
	}
	var k struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&k)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	channels := "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/kernels/" + k.ID + "/channels"
	ws, _, err := websocket.Dial(ctx, channels, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	go func() { // a client reads what the kernel says, its close frame too
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	cell := `{"channel": "shell", "header": {"msg_id": "m1", "msg_type": "execute_request", "session": "s1"},
		"parent_header": {}, "metadata": {}, "content": {"code": "x = 1"}}`
	if err := ws.Write(ctx, websocket.MessageText, []byte(cell)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.entered:
	case <-ctx.Done():
		t.Fatal("the cell did not start")
	}
	closed := make(chan error, 1)
	go func() { closed <- h.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a cell ran", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, resp, err := websocket.Dial(ctx, channels, nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a connection while kiln closes: %v %v; want 503", err, resp)
	}
	close(f.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return once the cell had ended")
	}
}
