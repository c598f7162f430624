package main

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"strings"
)

// The figures for a session that holds real state: a live print(1) in a session holding
// a 1M-row DataFrame with a string column and 32 MB of floats (48 MB of state) against
// the live print(1) of a session holding nothing, with the capture that follows each
// answer (issues 35 and 42); the same calls back to back, each waiting for the last one's
// capture (no target: what durability costs a machine-paced client); and the sandbox's
// peak memory while that state is captured against the memory the session holds.
const (
	heldRow        = "live session holding 48 MB (1M-row DataFrame, 32 MB of floats): print(1), c=1"
	heldBackToBack = "live session holding 48 MB: print(1) back to back (each waits for the last one's capture), c=1"
	heldTarget     = 1.5
	// captureMemoryTarget bounds the REPL's peak RSS during a capture of the state
	// against its RSS before it.
	captureMemoryTarget = 1.5
)

// CaptureMemory is the REPL's resident memory while kiln stores a live session's state:
// its RSS once the session holds the state and has answered (the peak reset then,
// through /proc/self/clear_refs), and its peak RSS (VmHWM) after a flush that captured
// the whole namespace (GET /state stores a pending state first).
type CaptureMemory struct {
	Code   string  `json:"code"`
	LiveMB float64 `json:"live_repl_rss_mb"`
	PeakMB float64 `json:"peak_repl_rss_mb"`
	Ratio  float64 `json:"ratio"`
	Target float64 `json:"target"`
	Note   string  `json:"note,omitempty"`
}

// resetPeakCode resets the REPL's peak RSS to its RSS and prints the RSS in kB; it
// binds no name, so that the state it leaves is the state it found.
const resetPeakCode = "open('/proc/self/clear_refs', 'w').write('5')\n" +
	"print('rss', __import__('re').search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"

// peakCode prints the REPL's peak RSS in kB since the last reset.
const peakCode = "print('hwm', __import__('re').search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"

// heldPhase builds the session of issue 35, times live print(1) in it against
// livePrintRow, then measures what a capture of its state costs the REPL in memory.
func heldPhase(ctx context.Context, k *client, n int, res *Results) {
	sid, err := newSession(ctx, k, realFrameCode, "1000000")
	if err != nil {
		res.Latency = append(res.Latency, summarize(heldRow, nil, 1, "setup failed: "+err.Error()))
		return
	}
	s, cpuMS := liveRow(ctx, k, heldRow, sid, "print(1)", "1", n,
		"the session's state is stored (its first call); calls after it, each in the sandbox that served the last, each "+
			quietApart+" once the pool is full and idle; each answer is followed by a capture of the namespace")
	res.Latency = append(res.Latency, s)
	res.Resources.CPUPerRequestMS["live print(1) holding 48 MB"] = cpuMS
	s, _ = backToBackRow(ctx, k, heldBackToBack, sid, "print(1)", "1", n,
		"each sent as soon as the last answered: it waits for the capture that follows that answer")
	res.Latency = append(res.Latency, s)
	res.pairs = append(res.pairs, pair{row: heldRow, floor: livePrintRow, kiln: true, target: heldTarget,
		basis: "kiln's live print(1) in a session holding nothing, the same run"})
	m := &CaptureMemory{Code: "the session above: " + strings.ReplaceAll(realFrameCode, "\n", "; "), Target: captureMemoryTarget}
	res.CaptureMemory = m
	if err := m.measure(ctx, k, sid); err != nil {
		log.Printf("capture memory: %v", err)
		m.Note = err.Error()
	}
}

// measure resets the REPL's peak, has kiln store the session's state (the REPL
// captures its whole namespace), and reads the peak.
func (m *CaptureMemory) measure(ctx context.Context, k *client, sid string) error {
	live, err := kbPrinted(ctx, k, sid, resetPeakCode, "rss")
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	blob, err := k.state(ctx, sid)
	if err != nil {
		return fmt.Errorf("GET /state: %w", err)
	}
	peak, err := kbPrinted(ctx, k, sid, peakCode, "hwm")
	if err != nil {
		return fmt.Errorf("peak: %w", err)
	}
	m.LiveMB, m.PeakMB = round(live/1024, 1), round(peak/1024, 1)
	m.Ratio = round(peak/live, 2)
	m.Note = fmt.Sprintf("the stored state: %.1f MB compressed", float64(len(blob))/(1<<20))
	return nil
}

// kbPrinted runs code in the session's live sandbox and reads the number it printed
// after label.
func kbPrinted(ctx context.Context, k *client, sid, code, label string) (float64, error) {
	r, err := k.exec(ctx, map[string]any{"code": code, "session_id": sid})
	if err == nil {
		err = liveAnswer(r, label)
	}
	if err != nil {
		return 0, err
	}
	f := strings.Fields(r.Stdout)
	if len(f) != 2 || f[0] != label {
		return 0, fmt.Errorf("printed %q", r.Stdout)
	}
	return strconv.ParseFloat(f[1], 64)
}

// captureMemoryText is the report's line on the capture's memory.
func captureMemoryText(r *Results) string {
	m := r.CaptureMemory
	if m == nil {
		return ""
	}
	if m.LiveMB == 0 {
		return fmt.Sprintf("\nREPL memory during a capture: not measured (%s)\n", m.Note)
	}
	return fmt.Sprintf("\nREPL memory during a capture of 48 MB of state: peak RSS %.1f MB against %.1f MB held, %.2f (target at most %.2f); %s.\n",
		m.PeakMB, m.LiveMB, m.Ratio, m.Target, m.Note)
}
