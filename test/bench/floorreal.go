package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kilnsh/kiln/protocol"
)

// bareRealStates times, for each real state kiln's rows measured in this run, the
// first request to fresh sandboxes that carries the blob kiln's session held and the
// code of kiln's call, n of each call: kiln's rows without kiln's HTTP, session and
// store. The request is the one kiln's default configuration sends for a resumed
// Python call: live (LIVE_SESSIONS: its sandbox may go on serving the session), with
// open figures saved (AUTO_FIGURES). A state whose rows did not run has no floor.
func bareRealStates(ctx context.Context, image string, n int, runs []realRun) ([]Summary, error) {
	var out []Summary
	var errs []error
	for _, run := range runs {
		kinds := func() [2]bareKind {
			var ks [2]bareKind
			for i, c := range run.state.calls {
				ks[i] = bareKind{name: run.state.floorName(i), check: bareAnswer(c.changed, run.want[i], len(run.blob)),
					req: &protocol.Request{ID: "floor-real-state", Op: protocol.OpExec, Lang: "python", Code: c.code, TimeoutMS: 30000,
						State: run.blob, CaptureState: true, Live: true, Figures: true, Limits: kilnLimits}}
			}
			return ks
		}
		note := fmt.Sprintf("fresh warm sandbox, first request carries the %d B state blob kiln's session held (GET /state) and the code of kiln's row, no kiln in between",
			len(run.blob))
		rows, err := bareRuns(ctx, image, n, note, nil, kinds)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", run.state.what, err))
		}
		for _, r := range rows {
			if r.Name != "" {
				out = append(out, r)
			}
		}
	}
	return out, errors.Join(errs...)
}

// bareAnswer checks a bare attach's answer as kiln's rows check theirs, and that the
// state made the trip kiln's row says: an unchanged state stays in the sandbox, a
// changed one comes back whole (its size within 1% of the blob sent).
func bareAnswer(changed bool, want string, size int) func(*protocol.Response) error {
	return func(r *protocol.Response) error {
		switch {
		case r.Status != "ok" || !strings.Contains(r.Stdout, want):
			return fmt.Errorf("answered status %s, stdout %.200q", r.Status, r.Stdout)
		case r.StateError != nil:
			return fmt.Errorf("state_error: %s", *r.StateError)
		case !changed && !r.StateUnchanged:
			return errors.New("a read-only run sent its state back")
		case changed && (r.StateUnchanged || abs(len(r.State)-size) > size/100):
			return fmt.Errorf("a changed state came back with %d bytes, %d went in", len(r.State), size)
		}
		return nil
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
