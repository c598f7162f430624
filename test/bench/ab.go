package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ABRow is one case measured on an older build of kiln and on this one, side by side
// in the same run, their calls alternating.
type ABRow struct {
	Case   string  `json:"case"`
	Before Summary `json:"before"`
	After  Summary `json:"after"`
	Ratio  float64 `json:"after_over_before_p50"`
}

// AB is the before/after comparison: which builds, and their rows.
type AB struct {
	Before string  `json:"before"` // the older binary and its image
	After  string  `json:"after"`
	Calls  int     `json:"calls_per_row_per_build"`
	Rows   []ABRow `json:"rows"`
}

// abCase is one row: setup runs once per kiln and returns the body of its measured
// calls and what their stdout must contain.
type abCase struct {
	name  string
	setup func(ctx context.Context, k *client) (body map[string]any, want string, err error)
}

// runAB starts an older kiln (beforeBin with beforeImage) and this tree's kiln side by
// side, each with a pool of 2, and measures the same cases on both: every call paced
// until both pools are full and idle, the two kilns taking turns (which goes first
// alternates), so that the machine's drift over the run falls on both alike.
func (b *bench) runAB(ctx context.Context, res *Results, beforeBin, beforeImage string, n int) error {
	res.Meta.Target = "before/after: " + beforeBin + " against this tree, side by side"
	env := []string{"MAX_QUEUE=8", "QUEUE_TIMEOUT_SECONDS=60"}
	log.Printf("before/after: starting %s (%s) and this tree's kiln (%s), pools of 2", beforeBin, beforeImage, b.image)
	before, kb, err := b.startBuild(ctx, beforeBin, beforeImage, env, 2)
	if err != nil {
		return fmt.Errorf("start the older kiln: %w", err)
	}
	defer stop(before)
	after, ka, err := b.startBuild(ctx, "", b.image, env, 2)
	if err != nil {
		return fmt.Errorf("start this kiln: %w", err)
	}
	defer stop(after)
	ab := &AB{Before: beforeBin + " with " + beforeImage, After: "this tree with " + b.image, Calls: n}
	res.AB = ab
	for _, c := range abCases() {
		log.Printf("before/after: %s", c.name)
		ab.Rows = append(ab.Rows, abRow(ctx, c, [2]*client{kb, ka}, n))
	}
	return nil
}

// abRow measures one case on both kilns, n calls each, alternating.
func abRow(ctx context.Context, c abCase, ks [2]*client, n int) ABRow {
	row := ABRow{Case: c.name}
	var bodies [2]map[string]any
	var wants [2]string
	var setupErr [2]error
	for i, k := range ks {
		bodies[i], wants[i], setupErr[i] = c.setup(ctx, k)
	}
	var took [2][]time.Duration
	var fails [2]int
	for call := range n {
		for j := range 2 {
			i := (call + j) % 2 // who goes first alternates
			if setupErr[i] != nil {
				continue
			}
			if err := waitAllQuiet(ctx, ks[:]...); err != nil {
				fails[i]++
				continue
			}
			r, err := ks[i].exec(ctx, bodies[i])
			if err != nil || r.Code != http.StatusOK || r.Status != "ok" || !strings.Contains(r.Stdout, wants[i]) {
				fails[i]++
				continue
			}
			took[i] = append(took[i], r.Took)
		}
	}
	note := func(i int) string {
		if setupErr[i] != nil {
			return "setup failed: " + setupErr[i].Error()
		}
		return ""
	}
	row.Before = summarize(c.name, took[0], fails[0], note(0))
	row.After = summarize(c.name, took[1], fails[1], note(1))
	if row.Before.N > 0 && row.After.N > 0 && row.Before.P50 > 0 {
		row.Ratio = round(row.After.P50/row.Before.P50, 2)
	}
	return row
}

// waitAllQuiet waits until every kiln's pool is full and idle.
func waitAllQuiet(ctx context.Context, ks ...*client) error {
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	defer cancel()
	for _, k := range ks {
		if err := k.waitQuiet(wctx); err != nil {
			return err
		}
	}
	return nil
}

// realFrameCode makes the data-science session of the before/after table.
const realFrameCode = "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\n" +
	"df = pd.DataFrame({'a': np.arange(1_000_000), 'b': rng.random(1_000_000), 'c': rng.choice(['x', 'y', 'z'], 1_000_000)})\n" +
	"arr = rng.random(4_000_000)\nprint(len(df))"

// abCases are the rows of the before/after table: the plain call, sessions with state,
// and the file rows, with the bodies of the main benchmark's rows.
func abCases() []abCase {
	fixed := func(body map[string]any, want string) func(context.Context, *client) (map[string]any, string, error) {
		return func(context.Context, *client) (map[string]any, string, error) { return body, want, nil }
	}
	sessionOf := func(made, code, want string) func(context.Context, *client) (map[string]any, string, error) {
		return func(ctx context.Context, k *client) (map[string]any, string, error) {
			setup := map[string]any{"code": made}
			if err := waitAllQuiet(ctx, k); err != nil {
				return nil, "", err
			}
			r, err := k.exec(ctx, setup)
			if err == nil && (r.Code != http.StatusOK || !r.HasState) {
				err = fmt.Errorf("setup answered %d, has_state %v", r.Code, r.HasState)
			}
			if err != nil {
				return nil, "", err
			}
			return map[string]any{"code": code, "session_id": r.SessionID}, want, nil
		}
	}
	session := func(size int, code, want string) func(context.Context, *client) (map[string]any, string, error) {
		return sessionOf(fmt.Sprintf("import os\nblob = os.urandom(%d)\nprint(len(blob))", size), code, want)
	}
	input := func(ctx context.Context, k *client) (map[string]any, string, error) {
		data := make([]byte, fileSize)
		_, _ = rand.Read(data)
		sid, fid, _, err := k.upload(ctx, inFileName, data)
		if err != nil {
			return nil, "", err
		}
		return inputFileBody(sid, fid), strconv.Itoa(fileSize), nil
	}
	return []abCase{
		{"stateless print(1)", fixed(barePrintBody, "1")},
		{"print(1), new session", fixed(printBody, "1")},
		{"session with 1 MB state, print(1)", session(1<<20, "print(1)", "1")},
		{"session with 10 MB state, print(1)", session(10<<20, "print(1)", "1")},
		{"session with 10 MB state, print(len(blob))", session(10<<20, "print(len(blob))", strconv.Itoa(10<<20))},
		// The session of issue 35: a 1M-row DataFrame with a string column and 32 MB of
		// floats, 47 MB of pickle.
		{"session with a 1M-row DataFrame and 32 MB of floats, print(1)", sessionOf(realFrameCode, "print(1)", "1")},
		{"input file 20 MB placed, read back", input},
		{"output file 20 MB returned", fixed(outputFileBody(), "written")},
	}
}

// abText is the report's before/after section, as text or markdown.
func abText(r *Results, md bool) string {
	if r.AB == nil || len(r.AB.Rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nbefore: %s\nafter: %s\n%d calls per row and build, alternating, each once both pools are full and idle\n", r.AB.Before, r.AB.After, r.AB.Calls)
	if md {
		b.WriteString("\n| case | before p50 ms | before p90 ms | after p50 ms | after p90 ms | after / before | failures before, after |\n|---|---:|---:|---:|---:|---:|---|\n")
	} else {
		fmt.Fprintf(&b, "\n%-44s %11s %11s %11s %11s %8s  %s\n", "before/after", "before p50", "before p90", "after p50", "after p90", "ratio", "failures")
	}
	for _, x := range r.AB.Rows {
		fails := fmt.Sprintf("%d, %d", x.Before.Fails, x.After.Fails)
		if note := strings.TrimSpace(x.Before.Note + " " + x.After.Note); note != "" {
			fails += " (" + note + ")"
		}
		if md {
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %s |\n", x.Case, x.Before.P50, x.Before.P90, x.After.P50, x.After.P90, x.Ratio, fails)
		} else {
			fmt.Fprintf(&b, "%-44s %11.1f %11.1f %11.1f %11.1f %8.2f  %s\n", x.Case, x.Before.P50, x.Before.P90, x.After.P50, x.After.P90, x.Ratio, fails)
		}
	}
	return b.String()
}
