package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Bounds on one request: an answer that takes longer is a hang, which no fault excuses.
// An /exec may wait QUEUE_TIMEOUT_SECONDS for a sandbox, then run for its timeout and
// grace; the rest is slack for a machine busy restarting things.
const (
	execBound = 90 * time.Second
	dataBound = 30 * time.Second
)

// client sends requests to the soak's kiln. Its address stays the same across kiln
// restarts (LISTEN_ADDR is fixed), so clients never need to learn a new one.
type client struct {
	base string
	key  string
	http *http.Client
}

func newClient(base, key string) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	return &client{base: base, key: key, http: &http.Client{Transport: tr}}
}

// answer is what one HTTP request came to: a status and body, or a transport error.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
	hang   bool // the bound passed with no answer
	start  time.Time
	end    time.Time
}

// refused reports whether the request never reached a kiln: nothing it asked for
// can have happened.
func (a answer) refused() bool { return errors.Is(a.err, syscall.ECONNREFUSED) }

// do sends one request with the key and waits at most bound for the whole answer.
func (c *client) do(method, path string, body io.Reader, header http.Header, bound time.Duration) answer {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	a := answer{start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		a.err, a.end = err, time.Now()
		return a
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("X-API-Key", c.key)
	resp, err := c.http.Do(req)
	if err == nil {
		defer resp.Body.Close()
		a.status, a.header = resp.StatusCode, resp.Header
		a.body, err = io.ReadAll(resp.Body)
	}
	a.err = err
	a.hang = err != nil && ctx.Err() != nil
	a.end = time.Now()
	return a
}

// errStreamCut is a stream that ended with neither a done nor an error event.
var errStreamCut = errors.New("the stream ended without a done or error event")

// execResult is one /exec answer, plain or streamed.
type execResult struct {
	answer
	body     kilntest.ExecResponse // the 200's body, or a stream's done event
	envl     kilntest.ErrorBody    // a non-200's body, or a stream's error event
	streamed bool
	events   []kilntest.Event // streamed only, comments left out
	done     bool             // a 200 with its body (a stream's done event)
	stopped  bool             // a stream that ended with an error event
}

// exec posts body to /exec and waits for the whole answer.
func (c *client) exec(body map[string]any) execResult {
	b, _ := json.Marshal(body)
	r := execResult{answer: c.do(http.MethodPost, "/exec", bytes.NewReader(b),
		http.Header{"Content-Type": {"application/json"}}, execBound)}
	switch {
	case r.err != nil:
	case r.status == http.StatusOK:
		r.done = json.Unmarshal(r.answer.body, &r.body) == nil
	default:
		_ = json.Unmarshal(r.answer.body, &r.envl)
	}
	return r
}

// stream posts body to /exec asking for Server-Sent Events; onEvent hears each event
// as it comes.
func (c *client) stream(body map[string]any, onEvent func(kilntest.Event)) execResult {
	ctx, cancel := context.WithTimeout(context.Background(), execBound)
	defer cancel()
	r := execResult{streamed: true, answer: answer{start: time.Now()}}
	resp, raw, err := kilntest.StreamURL(ctx, c.base, c.key, body, func(e kilntest.Event) {
		if e.Name == ":" {
			return
		}
		r.events = append(r.events, e)
		switch e.Name {
		case "done":
			r.done = json.Unmarshal([]byte(e.Data), &r.body) == nil
		case "error":
			r.stopped = true
			_ = json.Unmarshal([]byte(e.Data), &r.envl)
		}
		if onEvent != nil {
			onEvent(e)
		}
	})
	r.end = time.Now()
	if resp != nil {
		r.status, r.header, r.answer.body = resp.StatusCode, resp.Header, raw
		if resp.StatusCode != http.StatusOK {
			_ = json.Unmarshal(raw, &r.envl)
		}
	}
	switch {
	case r.done || r.stopped:
	case err != nil:
		r.err = err
		r.hang = ctx.Err() != nil
	case r.status == http.StatusOK:
		r.err = errStreamCut
	}
	return r
}

// cancel asks kiln to stop a running execution.
func (c *client) cancel(executionID string) answer {
	return c.do(http.MethodPost, "/executions/"+executionID+"/cancel", nil, nil, dataBound)
}
