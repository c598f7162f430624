package jupyter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A connection kiln closes tells its client why, even while its reader waits for the
// next message: the close frame goes out before the socket does. (Closing once cancelled
// the reader's context first, which drops the socket without a frame when the reader's
// goroutine wins: a token's expiry then looked like a network failure.)
func TestCloseSendsItsReasonWhileReading(t *testing.T) {
	closeNow := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c := newConn(nil, ws, r)
		go func() {
			<-closeNow
			c.close(websocket.StatusPolicyViolation, "the token expired")
		}()
		for {
			if _, _, _, err := c.next(1 << 20); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	for i := range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		closeNow <- struct{}{}
		_, _, err = ws.Read(ctx)
		cancel()
		if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("close %d of 1000: %v; want the policy-violation close frame", i+1, err)
		}
	}
}
