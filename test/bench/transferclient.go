package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// do sends req with the API key and returns the status and the whole body.
func (c *client) do(req *http.Request) (int, []byte, error) {
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// upload posts one file to /upload and returns the session and file ids kiln gave it.
func (c *client) upload(ctx context.Context, name string, data []byte) (sid, fid string, took time.Duration, err error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, err := mw.CreateFormFile("file", name)
	if err != nil {
		return "", "", 0, err
	}
	if _, err := w.Write(data); err != nil {
		return "", "", 0, err
	}
	if err := mw.Close(); err != nil {
		return "", "", 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/upload", &body)
	if err != nil {
		return "", "", 0, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	start := time.Now()
	code, raw, err := c.do(req)
	took = time.Since(start)
	if err != nil {
		return "", "", took, err
	}
	var out struct {
		SessionID string `json:"session_id"`
		Files     []struct {
			FileID string `json:"fileId"`
		} `json:"files"`
	}
	if code != http.StatusOK || json.Unmarshal(raw, &out) != nil || len(out.Files) != 1 {
		return "", "", took, fmt.Errorf("upload answered %d: %.200s", code, raw)
	}
	return out.SessionID, out.Files[0].FileID, took, nil
}

// download fetches a file and returns its size and how long the round trip took.
func (c *client) download(ctx context.Context, sid, fid string) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/download/"+sid+"/"+fid, nil)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	code, raw, err := c.do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took, err
	}
	if code != http.StatusOK {
		return 0, took, fmt.Errorf("download answered %d: %.200s", code, raw)
	}
	return len(raw), took, nil
}

// wireMetric is kiln's counter of protocol bytes exchanged with sandboxes.
const wireMetric = "kiln_sandbox_wire_bytes_total"

// wire returns kiln's wire counters, in and out; ok is false when kiln does not
// export them.
func (c *client) wire(ctx context.Context) (in, out float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/metrics", nil)
	if err != nil {
		return 0, 0, false
	}
	code, body, err := c.do(req)
	if err != nil || code != http.StatusOK {
		return 0, 0, false
	}
	in, okIn := metricValue(string(body), wireMetric+`{direction="in"}`)
	out, okOut := metricValue(string(body), wireMetric+`{direction="out"}`)
	return in, out, okIn && okOut
}

// metricValue returns the value of the series named exactly series (name and labels as
// the text exposition writes them) in a /metrics body.
func metricValue(body, series string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		rest, found := strings.CutPrefix(line, series+" ")
		if !found {
			continue
		}
		f := strings.Fields(rest) // a timestamp may follow the value
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[0], 64)
		return v, err == nil
	}
	return 0, false
}

// wireMeter measures the wire bytes of the calls of one row.
type wireMeter struct {
	in, out float64
	ok      bool
}

func (c *client) wireMeter(ctx context.Context) wireMeter {
	in, out, ok := c.wire(ctx)
	return wireMeter{in: in, out: out, ok: ok}
}

// perCall returns the bytes per call sent to and received from sandboxes since the
// meter started, or nils when kiln does not count them.
func (m wireMeter) perCall(ctx context.Context, c *client, calls int) (in, out *int64) {
	if !m.ok || calls == 0 {
		return nil, nil
	}
	i, o, ok := c.wire(ctx)
	if !ok {
		return nil, nil
	}
	pi, po := int64((i-m.in)/float64(calls)), int64((o-m.out)/float64(calls))
	return &pi, &po
}

// state fetches a session's state blob (GET /state/{session_id}).
func (c *client) state(ctx context.Context, sid string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/state/"+sid, nil)
	if err != nil {
		return nil, err
	}
	code, body, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /state answered %d: %.200s", code, body)
	}
	return body, nil
}

// putState makes blob a session's state (POST /state/{session_id}), which also ends the
// session's live sandbox.
func (c *client) putState(ctx context.Context, sid string, blob []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/state/"+sid, bytes.NewReader(blob))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	code, body, err := c.do(req)
	if err != nil {
		return err
	}
	if code != http.StatusCreated && code != http.StatusOK {
		return fmt.Errorf("POST /state answered %d: %.200s", code, body)
	}
	return nil
}
