package observability

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestPrometheusRules checks the alert rules with Debian's promtool: they are valid,
// their unit tests in deploy/prometheus/alerts_test.yml pass, and those tests make
// every alert both fire and clear.
func TestPrometheusRules(t *testing.T) {
	promtool := lookPath(t, "promtool")
	dir := filepath.Join(kilntest.Root(), "deploy", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var tests struct {
		Tests []struct {
			Name          string
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	readYAML(t, filepath.Join(dir, "alerts_test.yml"), &tests)
	fires, clears := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else if fires[a.Alertname] {
				clears[a.Alertname] = true
			}
		}
	}
	for _, name := range alertNames(t) {
		if !fires[name] || !clears[name] {
			t.Errorf("alerts_test.yml: %s fires in a test: %v, clears after firing: %v; want both", name, fires[name], clears[name])
		}
	}
}

// TestPrometheusQueriesLiveKiln runs Debian's Prometheus against a live kiln with the
// shipped scrape configuration and alert rules, sends executions that end ok, error and
// timeout, and then runs every query of the Grafana dashboard through Prometheus: each
// must parse and return data, and the labels its legend names. The alert rules must
// load and evaluate without errors.
func TestPrometheusQueriesLiveKiln(t *testing.T) {
	began := time.Now()
	bin := lookPath(t, "prometheus")
	promtool := lookPath(t, "promtool")

	// Two pools, as `make run` has, so that the legends of per-pool series must tell
	// them apart. No preloaded libraries: the refills are faster and use less CPU,
	// and no metric depends on them.
	var s *kilntest.Server
	t.Cleanup(func() { // runs after start's own cleanup has stopped kiln
		if s == nil {
			return
		}
		if left, err := kilntest.Containers(s.Instance); err != nil || len(left) > 0 {
			t.Errorf("containers left after kiln stopped: %v (%v)", left, err)
		}
	})
	s = start(t, "POOLS=python:2,polyglot:1", "QUEUE_TIMEOUT_SECONDS=60", "PRELOAD_MODULES=none")
	p := startPrometheus(t, bin, promtool, s)
	p.waitFor(t, `up{job="kiln"} == 1`, 60*time.Second)

	// ok with output and state, error and timeout: each consumes a sandbox, so the
	// refills also move the warm-up metrics while Prometheus watches.
	execOK(t, s, "x = 41\nprint(x + 1)", "ok")
	execOK(t, s, "1/0", "error")
	var out kilntest.ExecResponse
	resp, err := s.PostJSON("/exec", map[string]any{"code": "import time\ntime.sleep(60)", "timeout": 500}, &out)
	if err != nil || resp.StatusCode != http.StatusOK || out.Status != "timeout" {
		t.Fatalf("exec sleep with timeout 500ms = %v %v %q, want 200 timeout", err, resp, out.Status)
	}
	for _, status := range []string{"ok", "error", "timeout"} {
		p.waitFor(t, fmt.Sprintf(`kiln_executions_total{job="kiln",status=%q} >= 1`, status), 30*time.Second)
	}
	// Each run made a session of its own, as a live call.
	p.waitFor(t, `kiln_live_calls_total{job="kiln",status="new"} >= 3`, 30*time.Second)

	t.Run("dashboard queries return data", func(t *testing.T) {
		targets := dashboardTargets(t, filepath.Join(kilntest.Root(), "deploy/grafana/dashboards/kiln.json"))
		if len(targets) < 10 {
			t.Fatalf("found only %d queries in the dashboard; is the parsing broken?", len(targets))
		}
		// One deadline for all: a warm-up in the 5m windows may still be under way.
		deadline := time.Now().Add(90 * time.Second)
		for _, tg := range targets {
			problem, wait := p.checkQuery(tg.expr, tg.legend)
			for wait && time.Now().Before(deadline) {
				time.Sleep(time.Second)
				problem, wait = p.checkQuery(tg.expr, tg.legend)
			}
			if problem != "" {
				t.Errorf("panel %q: %s\n    query: %s", tg.panel, problem, tg.expr)
			}
		}
	})

	t.Run("alert rules load and evaluate", func(t *testing.T) {
		want := alertNames(t)
		// Three rounds at the test's 1s evaluation interval, counted from now.
		after := time.Now().Add(3 * time.Second)
		var rules []promRule
		kilntest.WaitFor(t, 30*time.Second, "three rounds of rule evaluations", func() bool {
			rules = p.rules(t)
			for _, r := range rules {
				if r.LastEvaluation.Before(after) {
					return false
				}
			}
			return len(rules) > 0
		})
		var got []string
		for _, r := range rules {
			got = append(got, r.Name)
			if r.Type != "alerting" || r.Health != "ok" || r.LastError != "" {
				t.Errorf("rule %s: type %q, health %q, last error %q; want alerting, ok, none", r.Name, r.Type, r.Health, r.LastError)
			}
			for _, a := range r.Alerts {
				// A healthy kiln that served a few runs trips nothing; KilnSandboxesLeaking
				// has no `for` and would fire at once on a failed removal.
				if a.State == "firing" {
					t.Errorf("alert %s fires against a healthy kiln: %v", r.Name, a.Labels)
				}
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("Prometheus loaded the rules %v, want %v", got, want)
		}
	})
	t.Logf("Prometheus test took %s", time.Since(began).Round(100*time.Millisecond))
}

// lookPath finds a command or fails the test: CI must run these tests, and
// `make prometheus` installs both commands.
func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH (%v): run `make prometheus` (deploy/ensure-prometheus.sh)", name, err)
	}
	return p
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// alertNames returns the names of the alerts in deploy/prometheus/alerts.yml.
func alertNames(t *testing.T) []string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct{ Alert string }
		}
	}
	readYAML(t, filepath.Join(kilntest.Root(), "deploy/prometheus/alerts.yml"), &f)
	var names []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	if len(names) == 0 {
		t.Fatal("alerts.yml holds no alert")
	}
	return names
}

// target is one query of a dashboard panel, its Grafana variables replaced.
type target struct {
	panel, expr, legend string
}

// grafanaValues are what the test gives Grafana's built-in variables and the
// dashboard's own: a variable the board uses without a value here fails the test.
var grafanaValues = map[string]string{
	"__rate_interval": "1m",
	"__interval":      "15s",
	"__interval_ms":   "15000",
	"__range":         "5m",
	"__range_s":       "300",
	"pool":            "python",
	"job":             "kiln",
}

// grafanaVar matches $name, ${name}, ${name:format} and [[name]].
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]`)

// dashboardTargets reads every query of the dashboard and substitutes its variables.
func dashboardTargets(t *testing.T, path string) []target {
	t.Helper()
	var d struct {
		Templating struct {
			List []struct{ Name string }
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, v := range d.Templating.List {
		if _, ok := grafanaValues[v.Name]; !ok {
			t.Errorf("the dashboard's variable $%s has no value in grafanaValues", v.Name)
		}
	}
	var out []target
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := grafanaVar.ReplaceAllStringFunc(tg.Expr, func(m string) string {
				sub := grafanaVar.FindStringSubmatch(m)
				name := sub[1] + sub[2] + sub[3]
				if v, ok := grafanaValues[name]; ok {
					return v
				}
				t.Errorf("panel %q uses $%s, which has no value in grafanaValues", p.Title, name)
				return m
			})
			out = append(out, target{panel: p.Title, expr: expr, legend: tg.LegendFormat})
		}
	}
	return out
}

// legendLabel matches {{label}} in a legend format.
var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// checkQuery runs expr and returns what is wrong with its answer, or "". The query
// must succeed, return at least one series, at least one of them a number (a
// quantile of nothing is NaN), and every series must carry the labels its legend
// shows and get a legend of its own. wait says whether more data may cure the
// problem: a missing series or a NaN may, a failed query or a legend never does.
func (p *prometheus) checkQuery(expr, legend string) (problem string, wait bool) {
	samples, err := p.query(expr)
	if err != nil {
		return "query failed: " + err.Error(), false
	}
	if len(samples) == 0 {
		return "no data", true
	}
	numbers := 0
	legends := map[string]bool{}
	for _, s := range samples {
		if !math.IsNaN(s.value) {
			numbers++
		}
		for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
			if _, ok := s.labels[m[1]]; !ok {
				return fmt.Sprintf("legend %q shows {{%s}}, which the series %v lack", legend, m[1], s.labels), false
			}
		}
		shown := legendLabel.ReplaceAllStringFunc(legend, func(m string) string {
			return s.labels[legendLabel.FindStringSubmatch(m)[1]]
		})
		if legends[shown] {
			return fmt.Sprintf("legend %q names two of the %d series %q", legend, len(samples), shown), false
		}
		legends[shown] = true
	}
	if numbers == 0 {
		return fmt.Sprintf("only NaN in %d series", len(samples)), true
	}
	return "", false
}
