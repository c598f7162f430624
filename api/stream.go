package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// keepAliveEvery is how often a stream that says nothing else gets a comment line, so
// that proxies and clients with idle timeouts keep it open.
const keepAliveEvery = 5 * time.Second

// wantsStream reports whether the client asked for Server-Sent Events.
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
			return true
		}
	}
	return false
}

// eventStream writes one response as Server-Sent Events. Nothing is written until
// begin: whatever fails before the run starts is still a plain HTTP error.
type eventStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	keepAlive time.Duration

	mu      sync.Mutex
	started bool
	stop    chan struct{}
	stopped chan struct{}
}

func newEventStream(w http.ResponseWriter, keepAlive time.Duration) *eventStream {
	return &eventStream{w: w, rc: http.NewResponseController(w), keepAlive: keepAlive}
}

// begin sends the headers and starts the keep-alive comments; it is idempotent.
func (s *eventStream) begin(executionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events through as they come
	h.Set("X-Execution-Id", executionID)
	s.w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	s.stop, s.stopped = make(chan struct{}), make(chan struct{})
	go s.keepAlives()
}

func (s *eventStream) keepAlives() {
	defer close(s.stopped)
	t := time.NewTicker(s.keepAlive)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.write([]byte(": keep-alive\n\n"))
		}
	}
}

// send writes one event whose data is v as one line of JSON.
func (s *eventStream) send(event string, v any) {
	var buf bytes.Buffer
	buf.WriteString("event: " + event + "\ndata: ")
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends the line
		buf.Reset()
		buf.WriteString("event: error\ndata: {\"error\":\"internal\",\"message\":\"event encoding failed\"}\n")
	}
	buf.WriteByte('\n')
	s.write(buf.Bytes())
}

func (s *eventStream) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(b); err == nil {
		_ = s.rc.Flush()
	}
}

// end stops the keep-alives and waits for them.
func (s *eventStream) end() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		close(s.stop)
		<-s.stopped
	}
}

// streamEvents turns the session layer's events into SSE events.
func (s *eventStream) events(ev session.Event) {
	switch ev.Type {
	case session.EventStart:
		s.begin(ev.ExecutionID)
		s.send("start", map[string]string{"session_id": ev.SessionID, "execution_id": ev.ExecutionID})
	case session.EventStdout, session.EventStderr:
		s.send(ev.Type, map[string]string{"text": ev.Text})
	case session.EventDisplay:
		s.send("display", fileOutFromStore([]*store.File{ev.File}).out()[0])
	case session.EventOutput:
		s.send("output", ev.Output)
	}
}

// execStream answers POST /exec as Server-Sent Events: start, stdout, stderr, display
// and output while the code runs, then done with the body a plain request would have got.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, sreq session.ExecRequest, c session.Caller, answer func(*session.ExecResult) *execResponse) {
	st := newEventStream(w, s.keepAlive)
	defer st.end()
	sreq.Events = st.events
	res, err := s.sessions.Exec(r.Context(), c, sreq)
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			logger(r).Info("client went away during the run")
		case !st.started:
			writeError(w, r, err) // the run never started: a plain HTTP error
		default:
			var e *kiln.Error
			if !errors.As(err, &e) {
				logger(r).Error("internal error", "err", err)
				e = &kiln.Error{Code: kiln.CodeInternal, Message: "internal error; see the server log with this request id"}
			}
			st.send("error", errorBody{Error: e.Code, Message: e.Message, RequestID: requestID(r)})
		}
		return
	}
	defer res.Release()
	st.begin(res.ExecutionID)
	st.send("done", answer(res))
}
