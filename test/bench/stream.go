package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// streamPhase measures live output and cancel over Server-Sent Events: how long after
// the call the first output event arrives (the code prints at once), and how long
// after a cancel the run's done event does (the code sleeps in time.sleep). Each call
// starts once the pool is full and idle.
func streamPhase(ctx context.Context, k *client, n int, res *Results) {
	var first, cancel []time.Duration
	fails := 0
	for range n {
		wctx, stop := context.WithTimeout(ctx, refillWait)
		err := k.waitQuiet(wctx)
		stop()
		if err != nil {
			break
		}
		start := time.Now()
		var firstAt time.Time
		resp, _, err := kilntest.StreamURL(ctx, k.url, k.key, map[string]any{"code": "print(1, flush=True)\nimport time\ntime.sleep(0.2)"},
			func(e kilntest.Event) {
				if e.Name == "stdout" && firstAt.IsZero() {
					firstAt = e.At
				}
			})
		if err != nil || resp.StatusCode != http.StatusOK || firstAt.IsZero() {
			fails++
			continue
		}
		first = append(first, firstAt.Sub(start))

		wctx, stop = context.WithTimeout(ctx, refillWait)
		err = k.waitQuiet(wctx)
		stop()
		if err != nil {
			break
		}
		var cancelAt, doneAt time.Time
		var execID, status string
		resp, _, err = kilntest.StreamURL(ctx, k.url, k.key, map[string]any{"code": "print('go', flush=True)\nimport time\ntime.sleep(600)"},
			func(e kilntest.Event) {
				switch {
				case e.Name == "start":
					_, execID = e.Start()
				case e.Name == "stdout" && cancelAt.IsZero():
					cancelAt = time.Now()
					go k.cancel(ctx, execID)
				case e.Name == "done":
					doneAt = e.At
					if strings.Contains(e.Data, `"status":"cancelled"`) {
						status = "cancelled"
					}
				}
			})
		if err != nil || resp.StatusCode != http.StatusOK || doneAt.IsZero() || status != "cancelled" {
			fails++
			continue
		}
		cancel = append(cancel, doneAt.Sub(cancelAt))
	}
	res.Latency = append(res.Latency,
		summarize("stream: first output event after the call", first, fails, "Accept: text/event-stream; the code prints at once; pool full and idle"),
		summarize("stream: cancel to done (time.sleep)", cancel, 0, "POST /executions/{id}/cancel after the first output; KeyboardInterrupt in time.sleep"))
}

// cancel posts a cancel of the execution id.
func (c *client) cancel(ctx context.Context, id string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/executions/"+id+"/cancel", nil)
	if err != nil {
		return
	}
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		fmt.Printf("bench: cancel answered %d\n", resp.StatusCode)
	}
}
