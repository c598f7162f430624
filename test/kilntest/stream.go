package kilntest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Event is one Server-Sent Event of a streamed /exec, with when it arrived.
type Event struct {
	Name string // start, stdout, stderr, display, done, error; ":" for a comment
	Data string
	At   time.Time
}

// Text returns the text of a stdout or stderr event.
func (e Event) Text() string {
	var v struct{ Text string }
	_ = json.Unmarshal([]byte(e.Data), &v)
	return v.Text
}

// Start returns the session and execution ids of a start event.
func (e Event) Start() (sessionID, executionID string) {
	var v struct {
		SessionID   string `json:"session_id"`
		ExecutionID string `json:"execution_id"`
	}
	_ = json.Unmarshal([]byte(e.Data), &v)
	return v.SessionID, v.ExecutionID
}

// Stream posts body to /exec asking for Server-Sent Events and calls onEvent with each
// event as it arrives, until the stream ends or ctx does. A non-200 answer is returned
// with its body and no events.
func (s *Server) Stream(ctx context.Context, body map[string]any, onEvent func(Event)) (*http.Response, []byte, error) {
	return StreamURL(ctx, s.URL, s.Key, body, onEvent)
}

// StreamURL is Stream against the kiln at url, with key when not empty.
func StreamURL(ctx context.Context, url, key string, body map[string]any, onEvent func(Event)) (*http.Response, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/exec", bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out, err := io.ReadAll(resp.Body)
		return resp, out, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		return resp, nil, fmt.Errorf("content type %q, want text/event-stream", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var cur Event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" {
				cur.At = time.Now()
				onEvent(cur)
			}
			cur = Event{}
		case strings.HasPrefix(line, ":"):
			onEvent(Event{Name: ":", At: time.Now()})
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data += strings.TrimPrefix(line, "data: ")
		}
	}
	return resp, nil, sc.Err()
}

// Cancel asks kiln to cancel the execution id and returns the answer's status code.
func (s *Server) Cancel(id string) (int, error) {
	resp, _, err := s.Request(http.MethodPost, "/executions/"+id+"/cancel", nil, nil)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}
