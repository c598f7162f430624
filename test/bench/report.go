package main

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Results is everything one run measured; it is written as results.json.
type Results struct {
	Meta struct {
		Started   string `json:"started"`
		Finished  string `json:"finished"`
		Commit    string `json:"commit"`
		GoVersion string `json:"go"`
		CPUs      int    `json:"cpus"`
		LoadStart string `json:"loadavg_start"`
		LoadEnd   string `json:"loadavg_end"`
		Target    string `json:"target"`
		Pacing    string `json:"pacing"`
	} `json:"meta"`
	Latency       []Summary      `json:"latency"`
	Rates         []Rate         `json:"rates"`
	Exhaustion    *Exhaustion    `json:"exhaustion,omitempty"`
	Resources     Resources      `json:"resources"`
	Preload       []PreloadRow   `json:"preload"`
	Floor         *Floor         `json:"floor,omitempty"`
	Ratios        []Ratio        `json:"ratios,omitempty"`
	Breakdown     []Part         `json:"breakdown,omitempty"`
	RefillCPU     []RefillCPU    `json:"refill_cpu,omitempty"`
	AB            *AB            `json:"before_after,omitempty"`
	LiveMemory    *LiveMemory    `json:"live_memory,omitempty"`
	CaptureMemory *CaptureMemory `json:"capture_memory,omitempty"`
	Kube          *Kube          `json:"kubernetes,omitempty"`

	transfers []transfer // the rows that move a payload, for their ratios
	realRuns  []realRun  // the real states kiln's rows measured, for their floor
	pairs     []pair     // the live rows and their floor rows, for their ratios
}

// Rate is a throughput: sandboxes (or containers) per second.
type Rate struct {
	Name      string  `json:"name"`
	PerSecond float64 `json:"per_second"`
	N         int     `json:"n"`
	Seconds   float64 `json:"seconds"`
	Note      string  `json:"note"`
}

// Exhaustion is how a pool that cannot keep up answers.
type Exhaustion struct {
	Config      string  `json:"config"`
	Requests    int     `json:"requests"`
	OK          int     `json:"ok"`
	Unavailable int     `json:"unavailable_503"`
	Other       int     `json:"other"`
	Share503    float64 `json:"share_503"`
	Late        int     `json:"late_503"` // 503s slower than the queue timeout + 100 ms
	Latency503  Summary `json:"latency_503"`
}

// Resources are kiln's own costs.
type Resources struct {
	IdleRSSMB      float64 `json:"idle_rss_mb"`
	PeakRSSMB      float64 `json:"peak_rss_mb"`
	PeakPrintRSSMB float64 `json:"peak_rss_print_phases_mb"`
	// UploadRSSGrowthMB is how far a fresh kiln's RSS rose during one upload of
	// UploadBodyMB (uploadMemory).
	UploadRSSGrowthMB float64            `json:"upload_rss_growth_mb"`
	UploadBodyMB      float64            `json:"upload_body_mb"`
	CPUPerRequestMS   map[string]float64 `json:"cpu_ms_per_request"`
	// PollCPUMS is kiln's CPU per /metrics poll, taken out of the paced phases' figures.
	PollCPUMS float64 `json:"cpu_ms_per_pacing_poll"`
}

// PreloadRow compares PRELOAD_MODULES sets.
type PreloadRow struct {
	Set         string  `json:"set"`
	Warmup      Summary `json:"warmup"`
	RefillPerS  float64 `json:"refill_per_second"`
	FirstImport Summary `json:"first_import_pandas"`
}

func (r *Results) rate(name string) Rate {
	for _, x := range r.Rates {
		if x.Name == name {
			return x
		}
	}
	return Rate{}
}

func (r *Results) summary(name string) Summary {
	for _, x := range r.Latency {
		if x.Name == name {
			return x
		}
	}
	return Summary{}
}

func write(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"results.json": append(b, '\n'),
		"table.txt":    []byte(table(r)),
		"table.md":     []byte(markdown(r)),
		"chart.svg":    []byte(chart(r)),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// table is the plain-text report printed at the end of a run.
func table(r *Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kiln bench %s, commit %s, %d CPUs, load %s -> %s\n", r.Meta.Started, r.Meta.Commit, r.Meta.CPUs, r.Meta.LoadStart, r.Meta.LoadEnd)
	fmt.Fprintf(&b, "pacing: %s\n\n", r.Meta.Pacing)
	fmt.Fprintf(&b, "%-44s %5s %9s %9s %9s %9s %5s  %s\n", "case", "n", "p50 ms", "p90 ms", "p99 ms", "max ms", "fail", "note")
	for _, s := range r.Latency {
		fmt.Fprintf(&b, "%-44s %5d %9.1f %9.1f %9.1f %9.1f %5d  %s\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, s.Fails, s.Note)
	}
	if f := r.Floor; f != nil {
		b.WriteString("\nfloor, same run:\n")
		for _, s := range f.summaries() {
			fmt.Fprintf(&b, "%-44s %5d %9.1f %9.1f %9.1f %9.1f %5d  %s\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, s.Fails, s.Note)
		}
		if len(f.Bytes) > 0 {
			fmt.Fprintf(&b, "\nbytes through a bare attach (median of %d):\n%-10s %9s %9s %11s %11s %11s %11s\n", f.Bytes[0].N,
				"size", "in ms", "out ms", "in net ms", "out net ms", "in ms/MB", "out ms/MB")
			for _, x := range f.Bytes {
				fmt.Fprintf(&b, "%-10s %9.2f %9.2f %11.2f %11.2f %11.3f %11.3f\n", human(x.Bytes), x.InMS, x.OutMS, x.InNetMS, x.OutNetMS, x.InMSPerMB, x.OutMSPerMB)
			}
		}
		if f.Note != "" {
			fmt.Fprintf(&b, "floor: %s\n", f.Note)
		}
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintf(&b, "\n%-44s %9s %9s %7s %7s %9s  %s\n", "kiln against the floor", "kiln p50", "floor ms", "ratio", "target", "on moved", "basis")
		for _, x := range r.Ratios {
			fmt.Fprintf(&b, "%-44s %9.1f %9.2f %7.2f %7.2f %9s  %s\n", x.Case, x.KilnMS, x.FloorMS, x.Ratio, x.Target, movedText(x), x.Basis)
		}
	}
	if len(r.Breakdown) > 0 {
		fmt.Fprintf(&b, "\n%-44s %9s %9s %9s %9s %9s %12s  %s\n", "where the time goes (p50)", "kiln ms", "bytes ms", "REPL ms", "disk ms", "kiln's ms", "in exchange", "basis")
		for _, x := range r.Breakdown {
			fmt.Fprintf(&b, "%-44s %9.1f %9.1f %9.1f %9.1f %9.1f %12s  %s\n", x.Case, x.KilnMS, x.TransportMS, x.REPLMS, x.DiskMS, x.OwnMS, optMS(x.InExchangeMS), x.Basis)
		}
	}
	b.WriteString(refillCPUText(r, false))
	b.WriteString(abText(r, false))
	b.WriteString(liveMemoryText(r, false))
	b.WriteString(captureMemoryText(r))
	if wire := r.wireRows(); len(wire) > 0 {
		fmt.Fprintf(&b, "\n%-44s %16s %16s\n", "bytes kiln exchanged with the sandbox", "in per call", "out per call")
		for _, s := range wire {
			fmt.Fprintf(&b, "%-44s %16s %16s\n", s.Name, bytesText(s.WireIn), bytesText(s.WireOut))
		}
	}
	b.WriteString("\n")
	for _, x := range r.Rates {
		fmt.Fprintf(&b, "%-44s %7.3f /s  (%d in %.0f s; %s)\n", x.Name, x.PerSecond, x.N, x.Seconds, x.Note)
	}
	if kr, dr := r.rate("kiln refill under overload"), r.rate("back-to-back docker run"); dr.PerSecond > 0 {
		fmt.Fprintf(&b, "%-44s %7.0f %%\n", "kiln refill / back-to-back docker run", 100*kr.PerSecond/dr.PerSecond)
	}
	if e := r.Exhaustion; e != nil {
		fmt.Fprintf(&b, "\nexhaustion (%s): %d ok, %d x 503 (%.0f%%), %d other; 503 latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; %d later than the queue timeout + 100 ms\n",
			e.Config, e.OK, e.Unavailable, 100*e.Share503, e.Other, e.Latency503.P50, e.Latency503.P99, e.Latency503.Max, e.Late)
	}
	b.WriteString(kubeText(r, false))
	if !r.dockerKiln() {
		return b.String() // the floor alone, or kiln on Kubernetes alone: no kiln ran on Docker
	}
	fmt.Fprintf(&b, "\nkiln RSS: idle %.1f MB (pool of 8 full), peak %.1f MB during the print(1) phases, %.1f MB over the run (the state rows included)\n",
		r.Resources.IdleRSSMB, r.Resources.PeakPrintRSSMB, r.Resources.PeakRSSMB)
	if r.Resources.UploadBodyMB > 0 {
		fmt.Fprintf(&b, "kiln RSS growth during one upload of %.1f MB (4 files) into a fresh kiln: %.1f MB, %.2f of the body (target %.2f)\n",
			r.Resources.UploadBodyMB, r.Resources.UploadRSSGrowthMB, r.Resources.UploadRSSGrowthMB/r.Resources.UploadBodyMB, uploadMemoryTarget)
	}
	fmt.Fprintf(&b, "kiln CPU per request (its sandbox's warm-up and removal included; %.3f ms per pacing poll taken out):\n", r.Resources.PollCPUMS)
	for _, k := range sortedKeys(r.Resources.CPUPerRequestMS) {
		fmt.Fprintf(&b, "  %-40s %7.2f ms\n", k, r.Resources.CPUPerRequestMS[k])
	}
	if len(r.Preload) > 0 {
		fmt.Fprintf(&b, "\n%-16s %14s %14s %12s %20s\n", "PRELOAD_MODULES", "warm-up p50 ms", "warm-up n", "refill /s", "first import pandas")
		for _, p := range r.Preload {
			fmt.Fprintf(&b, "%-16s %14.0f %14d %12.3f %17.1f ms\n", p.Set, p.Warmup.P50, p.Warmup.N, p.RefillPerS, p.FirstImport.P50)
		}
	}
	return b.String()
}

// markdown is the same report as tables for docs/performance.md.
func markdown(r *Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s, commit %s, %d CPUs, load average %s at the start, %s at the end.\n\n", r.Meta.Started, r.Meta.Commit, r.Meta.CPUs, r.Meta.LoadStart, r.Meta.LoadEnd)
	b.WriteString("| case | n | p50 ms | p90 ms | p99 ms | max ms | failures | note |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range r.Latency {
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %.1f | %d | %s |\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, s.Fails, s.Note)
	}
	if f := r.Floor; f != nil {
		b.WriteString("\nThe floor, measured in the same run:\n\n| floor | n | p50 ms | p90 ms | p99 ms | max ms | failures | note |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range f.summaries() {
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %.1f | %d | %s |\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, s.Fails, s.Note)
		}
		if len(f.Bytes) > 0 {
			fmt.Fprintf(&b, "\nRaw bytes through a bare attach, median of %d (net: less the same exchange with no payload):\n\n", f.Bytes[0].N)
			b.WriteString("| size | in ms | out ms | in net ms | out net ms | in ms per MB | out ms per MB |\n|---|---:|---:|---:|---:|---:|---:|\n")
			for _, x := range f.Bytes {
				fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f |\n", human(x.Bytes), x.InMS, x.OutMS, x.InNetMS, x.OutNetMS, x.InMSPerMB, x.OutMSPerMB)
			}
		}
		if f.Note != "" {
			fmt.Fprintf(&b, "\nFloor phase: %s\n", f.Note)
		}
	}
	if len(r.Ratios) > 0 {
		b.WriteString("\n| kiln against the floor | kiln p50 ms | floor ms | ratio | target | ratio on bytes moved | basis |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, x := range r.Ratios {
			fmt.Fprintf(&b, "| %s | %.1f | %.2f | %.2f | %.2f | %s | %s |\n", x.Case, x.KilnMS, x.FloorMS, x.Ratio, x.Target, movedText(x), x.Basis)
		}
	}
	if len(r.Breakdown) > 0 {
		b.WriteString("\n| where the time goes (p50) | kiln ms | moving the bytes ms | REPL ms | synced disk write ms | kiln's own ms | of which in the exchange | basis |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, x := range r.Breakdown {
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", x.Case, x.KilnMS, x.TransportMS, x.REPLMS, x.DiskMS, x.OwnMS, optMS(x.InExchangeMS), x.Basis)
		}
	}
	b.WriteString(refillCPUText(r, true))
	b.WriteString(abText(r, true))
	b.WriteString(liveMemoryText(r, true))
	b.WriteString(captureMemoryText(r))
	if wire := r.wireRows(); len(wire) > 0 {
		b.WriteString("\n| bytes kiln exchanged with the sandbox | in per call | out per call |\n|---|---:|---:|\n")
		for _, s := range wire {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", s.Name, bytesText(s.WireIn), bytesText(s.WireOut))
		}
	}
	b.WriteString("\n| rate | per second | n | seconds | note |\n|---|---:|---:|---:|---|\n")
	for _, x := range r.Rates {
		fmt.Fprintf(&b, "| %s | %.3f | %d | %.0f | %s |\n", x.Name, x.PerSecond, x.N, x.Seconds, x.Note)
	}
	if e := r.Exhaustion; e != nil {
		fmt.Fprintf(&b, "\nPool exhausted (%s): %d answered 200, %d answered 503 (%.0f%%), %d other; "+
			"503 latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; %d came later than the queue timeout + 100 ms.\n", e.Config, e.OK, e.Unavailable, 100*e.Share503, e.Other,
			e.Latency503.P50, e.Latency503.P99, e.Latency503.Max, e.Late)
	}
	b.WriteString(kubeText(r, true))
	if !r.dockerKiln() {
		return b.String()
	}
	fmt.Fprintf(&b, "\nkiln RSS idle with a full pool of 8: %.1f MB; peak during the print(1) phases %.1f MB; peak over the run (the state rows included) %.1f MB. CPU of the kiln process per request, "+
		"its sandbox's warm-up and removal included, the benchmark's pacing polls taken out (%.3f ms each):\n\n",
		r.Resources.IdleRSSMB, r.Resources.PeakPrintRSSMB, r.Resources.PeakRSSMB, r.Resources.PollCPUMS)
	b.WriteString("| phase | CPU ms per request |\n|---|---:|\n")
	for _, k := range sortedKeys(r.Resources.CPUPerRequestMS) {
		fmt.Fprintf(&b, "| %s | %.2f |\n", k, r.Resources.CPUPerRequestMS[k])
	}
	if r.Resources.UploadBodyMB > 0 {
		fmt.Fprintf(&b, "\nkiln RSS growth during one upload of %.1f MB (4 files) into a fresh kiln: %.1f MB, %.2f of the body (target at most %.2f: files past 64 KiB are spooled to disk).\n",
			r.Resources.UploadBodyMB, r.Resources.UploadRSSGrowthMB, r.Resources.UploadRSSGrowthMB/r.Resources.UploadBodyMB, uploadMemoryTarget)
	}
	if len(r.Preload) > 0 {
		b.WriteString("\n| PRELOAD_MODULES | warm-up p50 ms | warm-up p90 ms | warm-ups | refill per second | first `import pandas` p50 ms |\n|---|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Preload {
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %d | %.3f | %.1f |\n", p.Set, p.Warmup.P50, p.Warmup.P90, p.Warmup.N, p.RefillPerS, p.FirstImport.P50)
		}
	}
	return b.String()
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// chart draws p50 (bar) and p99 (tick) of every latency case on a logarithmic axis,
// as a self-contained SVG.
func chart(r *Results) string {
	const (
		left, right, top, rowH = 330.0, 40.0, 50.0, 26.0
		width                  = 1000.0
	)
	rows := make([]Summary, 0, len(r.Latency))
	all := r.Latency
	if r.Floor != nil {
		all = append(slices.Clone(all), r.Floor.summaries()...)
	}
	for _, s := range all {
		if s.N > 0 {
			rows = append(rows, s)
		}
	}
	height := top + rowH*float64(len(rows)) + 50
	lo, hi := 0.0, 5.0 // 1 ms .. 100 s, as powers of ten
	x := func(ms float64) float64 {
		v := math.Log10(math.Max(ms, 1))
		return left + (width-left-right)*(v-lo)/(hi-lo)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">kiln latency, p50 (bar) and p99 (tick), log scale</text>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#555">%s, commit %s, %d CPUs, load %s</text>`+"\n", html.EscapeString(r.Meta.Started), html.EscapeString(r.Meta.Commit), r.Meta.CPUs, html.EscapeString(r.Meta.LoadStart))
	bottom := top + rowH*float64(len(rows))
	for p := lo; p <= hi; p++ {
		ms := math.Pow(10, p)
		label := fmt.Sprintf("%g ms", ms)
		if ms >= 1000 {
			label = fmt.Sprintf("%g s", ms/1000)
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(ms), top-4, x(ms), bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x(ms), bottom+16, label)
	}
	for i, s := range rows {
		y := top + rowH*float64(i)
		color := "#3b7dd8"
		switch {
		case strings.HasPrefix(s.Name, "cold") || strings.HasPrefix(s.Name, "split"):
			color = "#d8703b"
		case strings.HasPrefix(s.Name, "floor"):
			color = "#777"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+rowH/2+4, html.EscapeString(s.Name))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", left, y+5, math.Max(x(s.P50)-left, 1), rowH-10, color)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-width="2"/>`+"\n", x(s.P99), y+3, x(s.P99), y+rowH-3)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#333">%s</text>`+"\n", x(s.P99)+5, y+rowH/2+4, fmtMS(s.P50)+" / "+fmtMS(s.P99))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555">blue: through kiln's HTTP API (warm pool); orange: docker run of the same image; grey: the floor without kiln</text>`+"\n", left, bottom+36)
	b.WriteString("</svg>\n")
	return b.String()
}

func fmtMS(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// summaries are the floor's latency rows that were measured.
func (f *Floor) summaries() []Summary {
	var out []Summary
	all := append([]Summary{f.BareExec, f.BarePing, f.PipeExec, f.PipePing, f.BareState, f.BareStateChanged}, f.RealState...)
	all = append(all, f.Live...)
	for _, s := range append(all, f.BareFileIn, f.BareFileOut, f.DiskWrite) {
		if s.Name != "" {
			out = append(out, s)
		}
	}
	return out
}

// summary is the floor's row named name, or none.
func (f *Floor) summary(name string) Summary {
	for _, s := range f.summaries() {
		if s.Name == name {
			return s
		}
	}
	return Summary{}
}

// wireRows are the rows that move a payload, whose wire counts the report shows (n/a
// when kiln does not count them), and the live rows, which should move almost nothing.
func (r *Results) wireRows() []Summary {
	var out []Summary
	for _, t := range r.transfers {
		if s := r.summary(t.name); s.N > 0 {
			out = append(out, s)
		}
	}
	for _, p := range r.pairs {
		if s := r.summary(p.row); s.N > 0 && s.WireIn != nil {
			out = append(out, s)
		}
	}
	return out
}

func bytesText(n *int64) string {
	if n == nil {
		return "n/a"
	}
	return strconv.FormatInt(*n, 10) + " B"
}

func movedText(x Ratio) string {
	if x.MovedFloorMS == 0 {
		return "-"
	}
	return strconv.FormatFloat(x.MovedRatio, 'f', 2, 64)
}

// optMS prints an optional figure in ms, "-" when absent.
func optMS(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}
