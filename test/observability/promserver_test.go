package observability

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// prometheus is a Prometheus server that a test started.
type prometheus struct {
	url    string
	cmd    *exec.Cmd
	logs   *lockedLog
	exited chan struct{}
}

// startPrometheus runs Debian's prometheus binary against kiln s with the shipped
// deploy/prometheus/prometheus.yml, changed only where the test must: s's address,
// a key file holding s's key, the repository's alerts.yml, and 1s scrape and
// evaluation intervals. It listens on a free loopback port and keeps its data in a
// temporary directory; it is stopped by its PID when the test ends.
func startPrometheus(t *testing.T, bin, promtool string, s *kilntest.Server) *prometheus {
	t.Helper()
	root := kilntest.Root()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "kiln.key")
	if err := os.WriteFile(keyFile, []byte(s.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(shipped)
	for _, r := range []struct{ old, new string }{
		{"scrape_interval: 15s", "scrape_interval: 1s"},
		{"evaluation_interval: 15s", "evaluation_interval: 1s"},
		{"/etc/prometheus/kiln/alerts.yml", filepath.Join(root, "deploy/prometheus/alerts.yml")},
		{"/prometheus/kiln.key", keyFile},
		{`"kiln:8080"`, strconv.Quote(u.Host)},
	} {
		if n := strings.Count(cfg, r.old); n != 1 {
			t.Fatalf("deploy/prometheus/prometheus.yml holds %q %d times, want once: update this test", r.old, n)
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", cfgFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, cfg)
	}

	var lastErr error
	for range 3 { // the free port may be taken before prometheus binds it
		addr := "127.0.0.1:" + kilntest.FreePort(t)
		p := &prometheus{url: "http://" + addr, logs: &lockedLog{}, exited: make(chan struct{})}
		p.cmd = exec.Command(bin,
			"--config.file="+cfgFile,
			"--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--storage.tsdb.retention.time=1h",
			"--web.listen-address="+addr)
		p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("starting prometheus: %v", err)
		}
		go func() { _ = p.cmd.Wait(); close(p.exited) }()
		if lastErr = p.waitReady(30 * time.Second); lastErr == nil {
			t.Cleanup(func() { p.stop(t) })
			return p
		}
		p.stop(t)
	}
	t.Fatalf("prometheus did not start: %v", lastErr)
	return nil
}

// waitReady polls /-/ready until it answers 200 or the process exits.
func (p *prometheus) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("prometheus exited:\n%s", p.logs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("prometheus not ready within %s:\n%s", timeout, p.logs)
}

// stop sends SIGTERM to the process, and SIGKILL if it has not gone after 15s; a
// failed test also gets the log.
func (p *prometheus) stop(t *testing.T) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("prometheus %d did not stop after SIGTERM; killing it", p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	if t.Failed() {
		t.Logf("prometheus log:\n%s", p.logs)
	}
}

// sample is one series of an instant query's answer.
type sample struct {
	labels map[string]string
	value  float64
}

// query runs an instant query through the HTTP API. An error means the query
// itself failed (a parse error, for instance), not that it found nothing.
func (p *prometheus) query(expr string) ([]sample, error) {
	resp, err := http.PostForm(p.url+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status    string
		ErrorType string
		Error     string
		Data      struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%d: %v: %s", resp.StatusCode, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("status %q (%s): %s", r.Status, r.ErrorType, r.Error)
	}
	switch r.Data.ResultType {
	case "vector":
		var series []struct {
			Metric map[string]string
			Value  [2]any
		}
		if err := json.Unmarshal(r.Data.Result, &series); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(series))
		for _, s := range series {
			v, err := parseValue(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, sample{labels: s.Metric, value: v})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		f, err := parseValue(v)
		return []sample{{labels: map[string]string{}, value: f}}, err
	}
	return nil, fmt.Errorf("result type %q, want vector or scalar", r.Data.ResultType)
}

// parseValue reads the [time, "value"] pair of the API; the value may be NaN or ±Inf.
func parseValue(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("value %v is not a string", v[1])
	}
	return strconv.ParseFloat(s, 64)
}

// waitFor polls expr until it returns a series, failing the test after d with the
// last answer and the state of the scrape targets.
func (p *prometheus) waitFor(t *testing.T, expr string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got, err := p.query(expr)
		if err == nil && len(got) > 0 {
			return
		}
		if time.Now().After(deadline) {
			var targets string
			if resp, err := http.Get(p.url + "/api/v1/targets"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				targets = string(b)
			}
			t.Fatalf("Prometheus did not answer %s within %s: %v %v\ntargets: %s", expr, d, got, err, targets)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// promRule is an alerting rule as /api/v1/rules shows it.
type promRule struct {
	Name           string
	Type           string
	Health         string
	LastError      string
	LastEvaluation time.Time
	Alerts         []struct {
		State  string
		Labels map[string]string
	}
}

// rules returns the rules Prometheus has loaded, from every group.
func (p *prometheus) rules(t *testing.T) []promRule {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Groups []struct{ Rules []promRule }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("GET /api/v1/rules: %d %q %v", resp.StatusCode, r.Status, err)
	}
	var out []promRule
	for _, g := range r.Data.Groups {
		out = append(out, g.Rules...)
	}
	return out
}
