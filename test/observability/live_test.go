package observability

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestLiveServer runs one kiln and checks its operational surface against it: the key
// on /metrics, the metric names the deploy/ configuration queries, the live sessions in
// /metrics and /health/detailed, and the dashboard.
func TestLiveServer(t *testing.T) {
	// Three warm sandboxes, and a long queue timeout: on a loaded machine a refill can
	// take longer than the default 10s. Every run below makes a session but the last,
	// and each session keeps its sandbox live: the pool refills behind them. A cap of
	// its own, which the host's memory would otherwise set, so that none is evicted.
	s := start(t, "POOL_SIZE=3", "QUEUE_TIMEOUT_SECONDS=60", "LIVE_SESSIONS_MAX=8")
	execOK(t, s, "print(1)", "ok")
	execOK(t, s, "print(2)", "ok")
	execOK(t, s, "1/0", "error")
	// Two calls of one session: the second runs in the sandbox the first left live.
	sid := execInSession(t, s, "", "x = 41", "new")
	execInSession(t, s, sid, "print(x + 1)", "reused")

	t.Run("metrics need the key", func(t *testing.T) {
		resp, _, err := s.Request(http.MethodGet, "/metrics", nil, http.Header{"X-Api-Key": {"wrong"}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /metrics with a wrong key = %d, want 401", resp.StatusCode)
		}
		resp, _, err = s.Request(http.MethodGet, "/metrics", nil, http.Header{"Authorization": {"Bearer " + s.Key}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /metrics with a bearer key = %d, want 200", resp.StatusCode)
		}
	})

	t.Run("configuration queries live metrics", func(t *testing.T) {
		families := scrape(t, s)
		if got := value(families["kiln_pool_target"]); got != 3 {
			t.Errorf("kiln_pool_target = %v, want 3", got)
		}
		root := kilntest.Root()
		exprs := grafanaExprs(t, filepath.Join(root, "deploy/grafana/dashboards/kiln.json"))
		exprs = append(exprs, alertExprs(t, filepath.Join(root, "deploy/prometheus/alerts.yml"))...)
		// The check itself must catch a wrong name and a wrong label.
		if len(checkExpr(`rate(kiln_no_such_total[5m])`, families)) != 1 ||
			len(checkExpr(`kiln_executions_total{no_such_label="x"}`, families)) != 1 {
			t.Fatal("checkExpr misses unknown names or labels")
		}
		if len(exprs) < 10 {
			t.Fatalf("found only %d expressions; is the parsing broken?", len(exprs))
		}
		for _, e := range exprs {
			for _, problem := range checkExpr(e, families) {
				t.Errorf("%s\n    in: %s", problem, e)
			}
		}
	})

	t.Run("live sessions in metrics and health", func(t *testing.T) {
		families := scrape(t, s)
		for _, c := range []struct {
			metric, label, value string
			atLeast              float64
		}{
			{"kiln_live_calls_total", "status", "reused", 1},
			{"kiln_live_calls_total", "status", "new", 4},
			{"kiln_live_calls_total", "status", "resumed", 0},
			{"kiln_live_sessions", "state", "idle", 1},
			{"kiln_live_sessions", "state", "busy", 0},
			{"kiln_live_sessions_ended_total", "reason", "capacity", 0},
			{"kiln_live_sessions_max", "", "", 8},
			{"kiln_live_memory_bytes", "", "", 1},
			{"kiln_pool_kept", "pool", "python", 1},
		} {
			if got := seriesValue(families[c.metric], c.label, c.value); got < c.atLeast {
				t.Errorf("%s{%s=%q} = %v, want at least %v", c.metric, c.label, c.value, got, c.atLeast)
			}
		}

		var h struct {
			Live struct {
				Enabled     bool             `json:"enabled"`
				Idle        int              `json:"idle"`
				Busy        int              `json:"busy"`
				Max         int              `json:"max"`
				MemoryBytes int64            `json:"memory_bytes"`
				Calls       map[string]int64 `json:"calls"`
			} `json:"live"`
		}
		if err := json.Unmarshal(get(t, s, "/health/detailed", http.StatusOK), &h); err != nil {
			t.Fatal(err)
		}
		l := h.Live
		if !l.Enabled || l.Idle+l.Busy < 1 || l.Max != 8 || l.MemoryBytes <= 0 || l.Calls["reused"] < 1 || l.Calls["new"] < 4 {
			t.Errorf("/health/detailed live = %+v, want enabled, a live session of at most 8, its memory, 1 reused call and 4 new", l)
		}
	})

	t.Run("dashboard shows live numbers", func(t *testing.T) {
		dashboard(t, s)
	})
}

// scrape reads /metrics into metric families.
func scrape(t *testing.T, s *kilntest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	body := get(t, s, "/metrics", http.StatusOK)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// seriesValue returns the value of f's series whose label name is value (f's first series
// when name is ""), or -1 when there is none.
func seriesValue(f *dto.MetricFamily, name, value string) float64 {
	for _, m := range f.GetMetric() {
		if name != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
			return l.GetName() == name && l.GetValue() == value
		}) {
			continue
		}
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	return -1
}

func value(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return -1
	}
	m := f.GetMetric()[0]
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

func grafanaExprs(t *testing.T, path string) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

func alertExprs(t *testing.T, path string) []string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string
				Expr  string
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		// Strict would reject unknown keys such as labels; fall back to the lenient form.
		if err := yaml.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("rule %+v lacks a name or an expression", r)
			}
			out = append(out, r.Expr)
		}
	}
	return out
}

var (
	// A metric name followed, maybe, by a selector; names of functions and keywords
	// are followed by "(" and are skipped below.
	metricRef = regexp.MustCompile(`\b((?:kiln|go|process)_[a-zA-Z0-9_]+)\b(\{[^}]*\})?`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)
)

// checkExpr returns what in expr does not exist on the live /metrics: unknown metric
// names (histogram series resolve to their family) and unknown label names.
func checkExpr(expr string, families map[string]*dto.MetricFamily) []string {
	var problems []string
	for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		f := families[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); f == nil && ok {
				if bf := families[base]; bf != nil && bf.GetType() == dto.MetricType_HISTOGRAM {
					f = bf
				}
			}
		}
		if f == nil {
			problems = append(problems, "unknown metric "+name)
			continue
		}
		labels := map[string]bool{"job": true, "instance": true, "le": true}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
			if !labels[lm[1]] {
				have := make([]string, 0, len(labels))
				for l := range labels {
					have = append(have, l)
				}
				sort.Strings(have)
				problems = append(problems, name+" has no label "+lm[1]+" (has "+strings.Join(have, ", ")+")")
			}
		}
	}
	return problems
}
