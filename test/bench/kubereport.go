package main

import (
	"fmt"
	"strings"
)

// kubePair is a kiln row of the Kubernetes phase and its floor row on bare Pods.
type kubePair struct{ row, floor, basis string }

var kubePairs = []kubePair{
	{kubeStatelessRow, kubeFloorPrint, "a bare Pod's first print(1) (kube.Runtime.Start, kiln's spec) over Send and Receive"},
	{kubeResumedRow, kubeFloorState, "a bare Pod's first print(1) carrying the session's 10 MB state blob, as kiln sends a resumed call"},
	{kubeLiveRow, kubeFloorLive, "the same live print(1), " + quietApart + " on one bare Pod holding the same state"},
}

// summary is the Kubernetes phase's floor or start row named name, or none.
func (k *Kube) summary(name string) Summary {
	for _, s := range append(k.Floor, k.Starts...) {
		if s.Name == name {
			return s
		}
	}
	return Summary{}
}

// kubeRatios sets kiln's rows on Kubernetes against their floor on bare Pods, and
// kiln's refill there against back-to-back Pod starts, as time per sandbox made.
func kubeRatios(r *Results) []Ratio {
	k := r.Kube
	if k == nil {
		return nil
	}
	var out []Ratio
	for _, p := range kubePairs {
		if s, f := r.summary(p.row), k.summary(p.floor); s.N > 0 && f.N > 0 && f.P50 > 0 {
			out = append(out, Ratio{Case: p.row, KilnMS: s.P50, FloorMS: round(f.P50, 2), Ratio: round(s.P50/f.P50, 2), Target: ratioTarget,
				Basis: "kiln p50 / p50 of " + p.basis})
		}
	}
	if kiln, bare := r.rate(kubeRefillRate), r.rate(kubeStartsRate); kiln.PerSecond > 0 && bare.PerSecond > 0 {
		out = append(out, Ratio{Case: kubeRefillRate, KilnMS: round(1000/kiln.PerSecond, 1), FloorMS: round(1000/bare.PerSecond, 1),
			Ratio: round(bare.PerSecond/kiln.PerSecond, 2), Target: ratioTarget,
			Basis: "not a p50: ms per sandbox made (1 / rate), kiln's refill under overload / back-to-back Pod starts with kiln's spec"})
	}
	return out
}

// kubeBreakdown splits kiln's rows on Kubernetes as breakdown splits the stateless row:
// the floor's exchange, the API server's exec included, and kiln's own.
func kubeBreakdown(r *Results) []Part {
	k := r.Kube
	if k == nil {
		return nil
	}
	var out []Part
	for _, p := range kubePairs {
		if s, f := r.summary(p.row), k.summary(p.floor); s.N > 0 && f.N > 0 {
			out = append(out, Part{Case: p.row, KilnMS: s.P50, REPLMS: round(f.P50, 2), OwnMS: round(s.P50-f.P50, 2),
				InExchangeMS: inExchange(s, f), Basis: "REPL: " + p.basis + ", the API server's exec included"})
		}
	}
	return out
}

// dockerKiln reports whether a kiln ran on Docker in this run, whose own costs the
// report then gives.
func (r *Results) dockerKiln() bool {
	for _, s := range r.Latency {
		if !strings.HasPrefix(s.Name, kubePrefix) {
			return true
		}
	}
	return false
}

// kubeText is the Kubernetes phase's part of the report: why it was skipped, or its
// floor, the sandbox starts on each runtime, kiln's CPU, and the two runtimes side by side.
func kubeText(r *Results, md bool) string {
	k := r.Kube
	if k == nil {
		return ""
	}
	var b strings.Builder
	if k.Skipped != "" {
		if md {
			fmt.Fprintf(&b, "\nKubernetes phase skipped: %s.\n", k.Skipped)
		} else {
			fmt.Fprintf(&b, "\nkubernetes: skipped: %s\n", k.Skipped)
		}
		return b.String()
	}
	rows := append(append([]Summary(nil), k.Floor...), k.Starts...)
	if md {
		fmt.Fprintf(&b, "\nKubernetes (RUNTIME=kubernetes, kiln with %s): the floor on bare Pods and sandbox starts, same run:\n\n", k.Config)
		b.WriteString("| floor and starts | n | p50 ms | p90 ms | p99 ms | max ms | failures | note |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range rows {
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %.1f | %d | %s |\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, s.Fails, s.Note)
		}
	} else {
		fmt.Fprintf(&b, "\nkubernetes (kiln with %s), floor on bare Pods and sandbox starts, same run:\n", k.Config)
		for _, s := range rows {
			fmt.Fprintf(&b, "%-44s %5d %9.1f %9.1f %9.1f %9.1f %5d  %s\n", s.Name, s.N, s.P50, s.P90, s.P99, s.Max, s.Fails, s.Note)
		}
	}
	if len(k.CPUPerRequestMS) > 0 {
		var cpu []string
		for _, key := range sortedKeys(k.CPUPerRequestMS) {
			cpu = append(cpu, fmt.Sprintf("%s %.2f ms", key, k.CPUPerRequestMS[key]))
		}
		line := "kiln's CPU per request on Kubernetes (as on Docker: its Pod's warm-up and removal included): " + strings.Join(cpu, ", ")
		if md {
			fmt.Fprintf(&b, "\n%s.\n", line)
		} else {
			b.WriteString(line + "\n")
		}
	}
	b.WriteString(sideBySide(r, md))
	if k.Note != "" {
		if md {
			fmt.Fprintf(&b, "\nKubernetes phase: %s\n", k.Note)
		} else {
			fmt.Fprintf(&b, "kubernetes: %s\n", k.Note)
		}
	}
	return b.String()
}

// sideBySide sets the Kubernetes rows beside Docker's of the same run: p50 ms, and
// sandboxes per second for the refill.
func sideBySide(r *Results, md bool) string {
	k := r.Kube
	var dockerFloor Summary
	if r.Floor != nil {
		dockerFloor = r.Floor.BareExec
	}
	rows := []struct {
		name         string
		docker, kube float64
		unit         string
	}{
		{statelessRow, r.summary(statelessRow).P50, r.summary(kubeStatelessRow).P50, "ms"},
		{"floor: first print(1) to a fresh sandbox", dockerFloor.P50, k.summary(kubeFloorPrint).P50, "ms"},
		{resumedStateRow(readOnlySize), r.summary(resumedStateRow(readOnlySize)).P50, r.summary(kubeResumedRow).P50, "ms"},
		{liveStateRow(readOnlySize), r.summary(liveStateRow(readOnlySize)).P50, r.summary(kubeLiveRow).P50, "ms"},
		{"kiln refill under overload", r.rate("kiln refill under overload").PerSecond, r.rate(kubeRefillRate).PerSecond, "/s"},
		{"sandbox start to REPL ready", k.summary(dockerStartRow).P50, k.summary(kubeStartRow).P50, "ms"},
	}
	var b strings.Builder
	if md {
		b.WriteString("\n| the two runtimes, same run | Docker | Kubernetes | Kubernetes / Docker |\n|---|---:|---:|---:|\n")
	} else {
		fmt.Fprintf(&b, "\n%-44s %12s %12s %12s\n", "the two runtimes, same run", "docker", "kubernetes", "k8s/docker")
	}
	for _, x := range rows {
		d, kv, ratio := fmtUnit(x.docker, x.unit), fmtUnit(x.kube, x.unit), "-"
		if x.docker > 0 && x.kube > 0 {
			ratio = fmt.Sprintf("%.2f", x.kube/x.docker)
		}
		if md {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.name, d, kv, ratio)
		} else {
			fmt.Fprintf(&b, "%-44s %12s %12s %12s\n", x.name, d, kv, ratio)
		}
	}
	return b.String()
}

func fmtUnit(v float64, unit string) string {
	switch {
	case v == 0:
		return "-"
	case unit == "/s":
		return fmt.Sprintf("%.3f /s", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}
