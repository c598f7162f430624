package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// client talks to one kiln over loopback HTTP and watches its process.
type client struct {
	url string
	key string
	pid int // 0 when the process is not ours to watch
	// instance is the kiln's INSTANCE_ID, which labels its containers; empty when the
	// benchmark did not start it.
	instance string
	http     *http.Client
	polls    atomic.Int64 // /metrics polls so far, whose CPU cpuMeter takes out
	// pollCPU is kiln's CPU per /metrics poll in ms, measured with the pool idle.
	pollCPU float64

	mu    sync.Mutex
	execs []time.Duration // timing.exec_ms of the answers since the last drainExec
}

// drainExec returns the timing.exec_ms of the answers since the last call.
func (c *client) drainExec() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.execs
	c.execs = nil
	return out
}

func newClient(url, key string, pid int) *client {
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	return &client{url: strings.TrimRight(url, "/"), key: key, pid: pid, http: &http.Client{Transport: tr}}
}

// execResult is what the benchmark reads of a POST /exec answer.
type execResult struct {
	Code      int
	Status    string  `json:"status"`
	Stdout    string  `json:"stdout"`
	Result    *string `json:"result"` // the repr of a final expression
	Error     *string `json:"error"`
	SessionID string  `json:"session_id"`
	HasState  bool    `json:"has_state"`
	StateSize int     `json:"state_size"`
	// StateError names what of the namespace was not kept, and why.
	StateError *string `json:"state_error"`
	// RuntimeStatus says where a session's call ran: new, reused (the session's live
	// sandbox) or resumed (a fresh sandbox, from the stored state); empty from a kiln
	// without live sessions.
	RuntimeStatus string `json:"runtime_status"`
	Files         []struct {
		ID        string `json:"id"`
		SessionID string `json:"session_id"`
		Size      int64  `json:"size"`
	} `json:"files"`
	Timing struct {
		QueueMS float64 `json:"queue_ms"`
		ExecMS  float64 `json:"exec_ms"`
		TotalMS float64 `json:"total_ms"`
	} `json:"timing"`
	Took time.Duration
}

// Exec is kiln's own timing of the exchange with the sandbox (timing.exec_ms).
func (r *execResult) Exec() time.Duration {
	return time.Duration(r.Timing.ExecMS * float64(time.Millisecond))
}

// exec posts body to /exec and times the whole round trip as the client sees it.
func (c *client) exec(ctx context.Context, body map[string]any) (*execResult, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/exec", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return nil, err
	}
	out := &execResult{Code: resp.StatusCode, Took: took}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("decode answer: %w", err)
		}
		c.mu.Lock()
		c.execs = append(c.execs, out.Exec())
		c.mu.Unlock()
	}
	return out, nil
}

// poolStats is the pool part of /health/detailed.
type poolStats struct {
	Target  int   `json:"target"`
	Ready   int   `json:"ready"`
	Warming int   `json:"warming"`
	InUse   int   `json:"in_use"`
	Created int64 `json:"created"`
	Removed int64 `json:"removed"`
	// Containers are the ready sandboxes.
	Containers []poolContainer `json:"containers"`
}

// poolContainer is one ready sandbox of /health/detailed.
type poolContainer struct {
	ID    string `json:"id"` // short
	State string `json:"state"`
}

// liveStats is the live sessions' part of /health/detailed (absent before live sessions).
type liveStats struct {
	Enabled bool             `json:"enabled"`
	Idle    int              `json:"idle"`
	Busy    int              `json:"busy"`
	Memory  int64            `json:"memory_bytes"`
	Calls   map[string]int64 `json:"calls"` // by runtime status: new, reused, resumed
	Ended   map[string]int64 `json:"ended"` // by reason
}

// health is what the benchmark reads of /health/detailed.
type health struct {
	Pool poolStats `json:"pool"`
	Live liveStats `json:"live"`
}

func (c *client) pool(ctx context.Context) (poolStats, error) {
	h, err := c.health(ctx)
	return h.Pool, err
}

// health reads /health/detailed, which asks the Docker daemon: not for polling.
func (c *client) health(ctx context.Context) (health, error) {
	var out health
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/health/detailed", nil)
	if err != nil {
		return out, err
	}
	code, body, err := c.do(req)
	if err != nil {
		return out, err
	}
	if code != http.StatusOK && code != http.StatusServiceUnavailable {
		return out, fmt.Errorf("GET /health/detailed answered %d: %.200s", code, body)
	}
	err = json.Unmarshal(body, &out)
	return out, err
}

// waitReady polls the pool until at least n sandboxes are ready, or ctx ends. It reads
// the pool gauges of /metrics: /health/detailed asks the Docker daemon twice per call,
// which at this polling rate would be most of kiln's CPU in a paced phase.
func (c *client) waitReady(ctx context.Context, n int) error {
	return c.waitPool(ctx, fmt.Sprintf("%d ready sandboxes", n), 20*time.Millisecond, func(g map[string]float64) bool {
		return g["kiln_pool_ready"] >= float64(n)
	})
}

// waitQuiet waits until the pool is full and no warm-up is running: nothing of kiln's
// own competes for the CPU with the next call. A quiet wait lasts about a warm-up, so
// it polls less often: each poll costs kiln CPU that the per-request figures take out.
func (c *client) waitQuiet(ctx context.Context) error {
	return c.waitPool(ctx, "a full, idle pool", 100*time.Millisecond, func(g map[string]float64) bool {
		return g["kiln_pool_target"] > 0 && g["kiln_pool_ready"] == g["kiln_pool_target"] && g["kiln_pool_warming"] == 0
	})
}

func (c *client) waitPool(ctx context.Context, what string, every time.Duration, ok func(map[string]float64) bool) error {
	for {
		if g, err := c.poolGauges(ctx); err == nil && ok(g) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(every):
		}
	}
}

// poolGauges returns the kiln_pool_* gauges of /metrics, added up over the pools.
func (c *client) poolGauges(ctx context.Context) (map[string]float64, error) {
	c.polls.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	g := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		series, v, found := strings.Cut(line, " ")
		name, _, _ := strings.Cut(series, "{") // kiln_pool_ready{pool="python"}
		if !found || !strings.HasPrefix(name, "kiln_pool_") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			g[name] += f
		}
	}
	if _, ok := g["kiln_pool_ready"]; !ok {
		return nil, fmt.Errorf("no kiln_pool_ready in /metrics")
	}
	return g, nil
}

// cpuTicks returns the process's utime+stime in clock ticks (USER_HZ, 100 on Linux).
func cpuTicks(pid int) (int64, error) {
	_, f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// procStat reads /proc/PID/stat: the command name, and the fields after it (the name is
// in parentheses and may hold spaces); at least the 15 that hold the CPU times.
func procStat(pid int) (comm string, fields []string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", nil, err
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", nil, fmt.Errorf("pid %d: malformed stat", pid)
	}
	fields = strings.Fields(s[end+2:])
	if len(fields) < 15 {
		return "", nil, fmt.Errorf("pid %d: short stat", pid)
	}
	return s[open+1 : end], fields, nil
}

const userHZ = 100

// rssKB returns VmRSS of pid in KiB.
func rssKB(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

// rssSampler records the peak RSS of a process until stopped.
type rssSampler struct {
	pid  int
	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

func startRSS(pid int) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if kb, err := rssKB(pid); err == nil {
				s.mu.Lock()
				s.peak = max(s.peak, kb)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Peak returns the peak so far in MiB.
func (s *rssSampler) Peak() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.peak) / 1024
}

// Stop ends the sampling and returns the peak in MiB.
func (s *rssSampler) Stop() float64 {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	return s.Peak()
}

// cpuMeter measures the CPU a process used over a phase.
type cpuMeter struct {
	c     *client
	start int64
	polls int64
}

func (c *client) cpu() cpuMeter {
	if c.pid == 0 {
		return cpuMeter{}
	}
	t, _ := cpuTicks(c.pid)
	return cpuMeter{c: c, start: t, polls: c.polls.Load()}
}

// perRequest returns the CPU milliseconds used since the meter started, less what the
// benchmark's own /metrics polls cost, divided by n.
func (m cpuMeter) perRequest(n int) float64 {
	if m.c == nil || n == 0 {
		return 0
	}
	t, err := cpuTicks(m.c.pid)
	if err != nil {
		return 0
	}
	used := float64(t-m.start)*1000/userHZ - float64(m.c.polls.Load()-m.polls)*m.c.pollCPU
	return round(max(used, 0)/float64(n), 2)
}

// measurePollCPU polls /metrics n times with nothing else going on and keeps kiln's
// CPU per poll, so that paced phases can take it out of their figures.
func (c *client) measurePollCPU(ctx context.Context, n int) {
	if c.pid == 0 {
		return
	}
	start, err := cpuTicks(c.pid)
	if err != nil {
		return
	}
	for range n {
		if _, err := c.poolGauges(ctx); err != nil {
			return
		}
	}
	end, err := cpuTicks(c.pid)
	if err == nil {
		c.pollCPU = float64(end-start) * 1000 / userHZ / float64(n)
	}
}
