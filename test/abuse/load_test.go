package abuse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Cases 21 and 22 of security.md: clients that hang up, and more clients than
// sandboxes. Serial: both watch the pool's counts.

// Case 21: a client that disconnects mid-run: the sandbox running its code is still
// removed, at once rather than at the run's deadline, and the pool is refilled.
func TestCase21ClientDisconnect(t *testing.T) {
	before := settle(t)
	body := mustJSON(t, map[string]any{"code": "import time\ntime.sleep(60)\n", "timeout": 60000, "state": nil})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/exec", bytes.NewReader(body))
		if err != nil {
			done <- err
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", keyA)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = errors.New("got an answer (" + resp.Status + ") to a request cancelled mid-run")
		}
		done <- err
	}()

	// Wait until the code runs in a sandbox, give it a moment, then hang up.
	deadline := time.Now().Add(30 * time.Second)
	for poolStats(t).InUse != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the run never got a sandbox")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	hungUp := time.Now()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}

	// The sandbox that ran the code goes away well before its 60 s sleep would end.
	var gone []string
	for {
		ids, err := kilntest.Containers(srv.Instance)
		if err != nil {
			t.Fatal(err)
		}
		gone = gone[:0]
		for _, id := range before.containers {
			if !slices.Contains(ids, id) {
				gone = append(gone, id)
			}
		}
		p := poolStats(t)
		if len(gone) == 1 && p.InUse == 0 && p.Removed == before.pool.Removed+1 {
			break
		}
		if time.Since(hungUp) > 15*time.Second {
			t.Fatalf("15s after the client hung up: gone %v, pool %+v; want the running sandbox removed", short(gone), p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("sandbox %s removed %s after the client hung up", short(gone)[0], time.Since(hungUp).Round(time.Millisecond))
	after := settle(t)
	if len(after.containers) != poolSize+after.pool.Kept || after.pool.Leaked != before.pool.Leaked {
		t.Errorf("after the disconnect: %d containers (want the pool's %d and %d live sessions'), leaked %d→%d (want unchanged)",
			len(after.containers), poolSize, after.pool.Kept, before.pool.Leaked, after.pool.Leaked)
	}
	if !strings.Contains(srv.Logs(), "client went away during the run") {
		t.Errorf("kiln's log does not record the client going away")
	}
}

// Case 22: more concurrent requests than warm sandboxes: each is served in turn or
// answered 503 with Retry-After, within the queue timeout; none hangs.
func TestCase22Overload(t *testing.T) {
	settle(t)
	const n = poolSize + maxQueue + 4 // enough that the queue overflows
	const sleep = time.Second
	// The longest anyone may wait: the queue timeout, then the run, plus slack.
	limit := queueTimeoutSec*time.Second + sleep + graceMS*time.Millisecond + 15*time.Second
	body := mustJSON(t, map[string]any{"code": "import time\ntime.sleep(1)\nprint('served')\n", "timeout": 10000, "state": nil})

	type answer struct {
		status  int
		retry   string
		body    []byte
		elapsed time.Duration
		err     error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	startLine := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/exec", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", keyA)
			<-startLine
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			a := answer{err: err}
			if err == nil {
				a.body, a.err = io.ReadAll(resp.Body)
				resp.Body.Close()
				a.status, a.retry = resp.StatusCode, resp.Header.Get("Retry-After")
			}
			a.elapsed = time.Since(start)
			answers[i] = a
		}()
	}
	close(startLine)
	wg.Wait()

	served, refused := 0, 0
	for i, a := range answers {
		if a.err != nil {
			t.Errorf("request %d: %v after %s (hung past %s?)", i, a.err, a.elapsed.Round(time.Millisecond), limit)
			continue
		}
		switch a.status {
		case http.StatusOK:
			served++
			var res kilntest.ExecResponse
			if err := json.Unmarshal(a.body, &res); err != nil || res.Status != "ok" || res.Stdout != "served\n" {
				t.Errorf("request %d: 200 with %s, want an ok run printing served", i, a.body)
			}
		case http.StatusServiceUnavailable:
			refused++
			var e kilntest.ErrorBody
			_ = json.Unmarshal(a.body, &e)
			if secs, err := strconv.Atoi(a.retry); err != nil || secs < 1 || e.Error != "unavailable" {
				t.Errorf("request %d: 503 with Retry-After %q and error %q, want Retry-After ≥ 1 and unavailable", i, a.retry, e.Error)
			}
		default:
			t.Errorf("request %d: status %d, want 200 or 503: %s", i, a.status, a.body)
		}
		if a.elapsed > limit {
			t.Errorf("request %d answered after %s, want within %s", i, a.elapsed, limit)
		}
	}
	t.Logf("%d requests: %d served, %d refused with 503", n, served, refused)
	if served < poolSize {
		t.Errorf("served %d, want at least the %d warm sandboxes' worth", served, poolSize)
	}
	if refused < 1 {
		t.Errorf("refused %d, want some 503s: %d requests for %d sandboxes and a queue of %d", refused, n, poolSize, maxQueue)
	}
	after := settle(t)
	if len(after.containers) != poolSize+after.pool.Kept {
		t.Errorf("after the burst: %d containers, want the pool's %d and %d live sessions'", len(after.containers), poolSize, after.pool.Kept)
	}
}
