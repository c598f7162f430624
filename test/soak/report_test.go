package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// result is everything one soak measured, before judgement.
type result struct {
	plan     plan
	store    string
	began    time.Time
	took     time.Duration
	faults   []*faultRecord
	enough   bool // the mix reached its size
	requests []obs
	settled  string // what was left beyond the pool before the stop ("" when nothing)
	verified *recorder
	stopErr  string
	left     int // containers of the instance after kiln stopped
	samples  []sample
	lives    []time.Time
}

// report is the JSON written to test/results/soak/<store>/<mode>.json.
type report struct {
	Store          string                    `json:"store"`
	Mode           string                    `json:"mode"`
	Seed           int64                     `json:"seed"`
	Started        time.Time                 `json:"started"`
	DurationS      float64                   `json:"duration_s"`
	Clients        int                       `json:"clients"`
	OpsPerSec      float64                   `json:"max_operations_per_s"`
	Requests       int                       `json:"requests"`
	ByKind         map[string]map[string]int `json:"requests_by_kind_and_outcome"`
	ChecksFailed   int                       `json:"checks_failed"`
	Failed         []example                 `json:"failed_examples"`
	Tolerated      map[string]int            `json:"excused_by_fault"`
	Sessions       int                       `json:"sessions_verified"`
	Verification   map[string]map[string]int `json:"verification_by_kind_and_outcome"`
	VerifyFailed   int                       `json:"verification_failed"`
	VerifyExamples []example                 `json:"verification_failed_examples"`
	Faults         []faultRow                `json:"faults"`
	Samples        []summary                 `json:"samples"`
	SampleCount    int                       `json:"sample_count"`
	Raw            []sample                  `json:"raw_samples"` // every reading, as taken: what a failed growth check is read against
	Growth         []growth                  `json:"growth_checks"`
	Settled        string                    `json:"not_settled_before_stop,omitempty"`
	StopError      string                    `json:"stop_error,omitempty"`
	ContainersLeft int                       `json:"containers_left"`
	Enough         bool                      `json:"reached_size"`
	Env            []string                  `json:"kiln_env"`
}

type example struct {
	Kind     string   `json:"kind"`
	AtS      float64  `json:"at_s"`
	Outcome  string   `json:"outcome"`
	Problems []string `json:"problems"`
}

type faultRow struct {
	Kind     string   `json:"kind"`
	AtS      float64  `json:"at_s"`
	BackS    float64  `json:"back_after_s"`  // the failed part back, from the injection
	ReadyS   float64  `json:"ready_after_s"` // ready and a run served, from the injection
	Detail   string   `json:"detail"`
	Problems []string `json:"problems,omitempty"`
}

// finish judges the run, writes its report and fails t on whatever went wrong.
func (r *result) finish(t *testing.T, dir string, env []string) {
	v := judge(r.requests, r.faults)
	vv := judge(r.verified.list(), nil)
	rep := report{Store: r.store, Mode: r.plan.mode, Seed: r.plan.seed, Started: r.began, DurationS: r.took.Seconds(),
		Clients: r.plan.clients, OpsPerSec: r.plan.opsPerSec, Requests: len(r.requests), ByKind: tally(r.requests),
		ChecksFailed: len(v.Failed), Failed: examples(v.Failed, r.began), Tolerated: v.Tolerated,
		Verification: tally(r.verified.list()), VerifyFailed: len(vv.Failed), VerifyExamples: examples(vv.Failed, r.began),
		Samples: summarize(r.samples, len(r.lives)), SampleCount: len(r.samples), Raw: r.samples,
		Growth:  checkGrowth(r.samples, r.lives, windows(r.faults)),
		Settled: r.settled, StopError: r.stopErr, ContainersLeft: r.left, Enough: r.enough, Env: env}
	rep.Sessions = rep.Verification["verify run"]["200 ok"]
	for _, f := range r.faults {
		row := faultRow{Kind: f.Kind, AtS: f.Start.Sub(r.began).Seconds(), Detail: f.Detail, Problems: f.Problems}
		if !f.Back.IsZero() {
			row.BackS = f.Back.Sub(f.Start).Seconds()
		}
		if !f.Ready.IsZero() {
			row.ReadyS = f.Ready.Sub(f.Start).Seconds()
		}
		rep.Faults = append(rep.Faults, row)
	}
	table := rep.table()
	t.Logf("\n%s", table)
	js, _ := json.MarshalIndent(rep, "", "  ")
	for name, data := range map[string][]byte{r.plan.mode + ".json": js, r.plan.mode + ".md": []byte(table)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
	rep.fail(t)
}

// fail reports every failure of the run on t.
func (rep *report) fail(t *testing.T) {
	if !rep.Enough {
		t.Errorf("the mix did not reach its size: %d requests in %.0fs", rep.Requests, rep.DurationS)
	}
	for i, e := range rep.Failed {
		if i == 20 {
			t.Errorf("... and %d more failed checks (see the report)", len(rep.Failed)-i)
			break
		}
		t.Errorf("%s at %.1fs: %s: %s", e.Kind, e.AtS, e.Outcome, strings.Join(e.Problems, "; "))
	}
	for _, e := range rep.VerifyExamples {
		t.Errorf("verification: %s: %s: %s", e.Kind, e.Outcome, strings.Join(e.Problems, "; "))
	}
	for _, f := range rep.Faults {
		if len(f.Problems) > 0 {
			t.Errorf("fault %s at %.1fs: %s", f.Kind, f.AtS, strings.Join(f.Problems, "; "))
		}
	}
	for _, g := range rep.Growth {
		if !g.OK {
			t.Errorf("kiln %d: %s grew from a median of %.1f to %.1f (limit %.1f): a leak", g.Life, g.Metric, g.FirstMedian, g.LastMedian, g.Limit)
		}
	}
	if rep.Settled != "" {
		t.Errorf("the instance did not settle to its pool before the stop: %s", rep.Settled)
	}
	if rep.StopError != "" {
		t.Errorf("kiln did not stop cleanly on SIGTERM: %s", rep.StopError)
	}
	if rep.ContainersLeft != 0 {
		t.Errorf("%d containers of the instance left after kiln stopped, want 0", rep.ContainersLeft)
	}
}

func tally(all []obs) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, o := range all {
		if out[o.Kind] == nil {
			out[o.Kind] = map[string]int{}
		}
		out[o.Kind][o.Outcome]++
	}
	return out
}

// examples keeps the first five failures of each kind.
func examples(failed []obs, began time.Time) []example {
	var out []example
	per := map[string]int{}
	for _, o := range failed {
		if per[o.Kind]++; per[o.Kind] <= 5 {
			out = append(out, example{Kind: o.Kind, AtS: o.Start.Sub(began).Seconds(), Outcome: o.Outcome, Problems: o.Problems})
		}
	}
	return out
}

// table is the report as markdown.
func (rep *report) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Soak, %s store (%s run, seed %d)\n\n", rep.Store, rep.Mode, rep.Seed)
	fmt.Fprintf(&b, "%d clients (at most %g operations/s together), %d requests in %.0fs (%.1f/s); POOL_SIZE=%d, PRELOAD_MODULES=none.\n\n",
		rep.Clients, rep.OpsPerSec, rep.Requests, rep.DurationS, float64(rep.Requests)/rep.DurationS, poolSize)
	b.WriteString("| kind | requests | outcomes |\n|---|---:|---|\n")
	writeTally(&b, rep.ByKind)
	fmt.Fprintf(&b, "\nChecks failed: %d. Answers excused by a fault they overlapped: %s.\n", rep.ChecksFailed, counts(rep.Tolerated))
	for _, e := range rep.Failed {
		fmt.Fprintf(&b, "- %s at %.1fs, %s: %s\n", e.Kind, e.AtS, e.Outcome, cell(clip(strings.Join(e.Problems, "; "), 400)))
	}
	b.WriteString("\n| fault | at | back after | ready after | detail | problems |\n|---|---:|---:|---:|---|---|\n")
	for _, f := range rep.Faults {
		fmt.Fprintf(&b, "| %s | %.1fs | %s | %s | %s | %s |\n", f.Kind, f.AtS, secs(f.BackS), secs(f.ReadyS), f.Detail, cell(strings.Join(f.Problems, "; ")))
	}
	fmt.Fprintf(&b, "\nSessions read back at the end: %d; verification requests:\n\n| kind | requests | outcomes |\n|---|---:|---|\n", rep.Sessions)
	writeTally(&b, rep.Verification)
	fmt.Fprintf(&b, "\nVerification checks failed: %d.\n", rep.VerifyFailed)
	for _, e := range rep.VerifyExamples {
		fmt.Fprintf(&b, "- %s, %s: %s\n", e.Kind, e.Outcome, cell(clip(strings.Join(e.Problems, "; "), 400)))
	}
	fmt.Fprintf(&b, "\nkiln process samples (%d, every few seconds; RSS in MiB; fds and goroutines less %d and %d per live session's sandbox):\n\n", rep.SampleCount, fdsPerLive, goroutinesPerLive)
	b.WriteString("| kiln | metric | samples | first | min | max | last | first → last fault-free median (limit) |\n|---:|---|---:|---:|---:|---:|---:|---|\n")
	for i, s := range rep.Samples {
		g := rep.Growth[i]
		check := fmt.Sprintf("%.1f → %.1f (%.1f) %s", g.FirstMedian, g.LastMedian, g.Limit, map[bool]string{true: "ok", false: "GREW"}[g.OK])
		if g.Note != "" {
			check = g.Note
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %s |\n", s.Life, s.Metric, s.N, s.First, s.Min, s.Max, s.Last, check)
	}
	settled := "yes"
	if rep.Settled != "" {
		settled = "no: " + rep.Settled
	}
	fmt.Fprintf(&b, "\nOnly the pool's containers before the stop: %s. Containers left after kiln stopped: %d.\n", settled, rep.ContainersLeft)
	if rep.StopError != "" {
		fmt.Fprintf(&b, "Stop: %s\n", rep.StopError)
	}
	return b.String()
}

// secs prints a duration in seconds; 0 means it never came.
func secs(s float64) string {
	if s == 0 {
		return "never"
	}
	return fmt.Sprintf("%.1fs", s)
}

// cell makes text fit in one cell of a markdown table.
func cell(s string) string {
	return strings.NewReplacer("\n", " ", "|", "/").Replace(strings.TrimSpace(s))
}

func writeTally(b *strings.Builder, by map[string]map[string]int) {
	kinds := make([]string, 0, len(by))
	total := 0
	for k, outcomes := range by {
		kinds = append(kinds, k)
		for _, n := range outcomes {
			total += n
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		n := 0
		for _, c := range by[k] {
			n += c
		}
		fmt.Fprintf(b, "| %s | %d | %s |\n", k, n, counts(by[k]))
	}
	fmt.Fprintf(b, "| all | %d | |\n", total)
}

// counts prints a map of counts, largest first.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
