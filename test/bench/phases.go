package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// refillWait bounds one wait for the pool to have enough ready sandboxes.
const refillWait = 90 * time.Second

var printBody = map[string]any{"code": "print(1)"}

// pacing is how waves space their arrivals.
type pacing int

const (
	// quiet starts each wave once the pool is full and no warm-up is running: arrivals
	// below the refill rate, every call finding a warm sandbox and an idle machine.
	quiet pacing = iota
	// burst starts each wave as soon as c sandboxes are ready: calls follow each other
	// while the pool refills, sharing the CPU with the warm-ups of their replacements.
	burst
)

// waves runs n waves of c concurrent calls of body, each wave paced by p, so every
// call finds a warm sandbox. It returns the client-side round trips.
func waves(ctx context.Context, k *client, c, n int, body map[string]any, want string, p pacing) ([]time.Duration, int, error) {
	var (
		mu    sync.Mutex
		took  []time.Duration
		fails int
	)
	for range n {
		wctx, cancel := context.WithTimeout(ctx, refillWait)
		var err error
		if p == quiet {
			err = k.waitQuiet(wctx)
		} else {
			err = k.waitReady(wctx, c)
		}
		cancel()
		if err != nil {
			return took, fails, err
		}
		var wg sync.WaitGroup
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := k.exec(ctx, body)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || r.Code != http.StatusOK || r.Status != "ok" || !strings.Contains(r.Stdout, want) {
					fails++
					return
				}
				took = append(took, r.Took)
			}()
		}
		wg.Wait()
	}
	return took, fails, nil
}

// latencyPhase measures warm print(1) at each concurrency, paced quiet; at c=1 also
// stateless, and stateless in bursts.
func latencyPhase(ctx context.Context, k *client, counts map[int]int, res *Results) {
	for _, c := range []int{1, 2, 4, 8} {
		n := counts[c]
		cpu := k.cpu()
		took, fails, err := waves(ctx, k, c, n, printBody, "1", quiet)
		note := fmt.Sprintf("%d waves of %d, each once the pool is full and idle; new session, state captured, disk store", n, c)
		if err != nil {
			note += "; stopped: " + err.Error()
		}
		res.Latency = append(res.Latency, summarize(fmt.Sprintf("warm print(1), c=%d", c), took, fails, note))
		res.Resources.CPUPerRequestMS[fmt.Sprintf("print(1) c=%d", c)] = cpu.perRequest(len(took) + fails)
		if c != 1 {
			continue
		}
		// The same without the session store and the state capture: what the exchange
		// with the sandbox costs on its own; then calls that follow each other while
		// the pool refills, sharing the CPU with the warm-ups.
		for _, v := range []struct {
			name, note string
			p          pacing
		}{
			{"warm print(1), stateless, c=1", "each once the pool is full and idle", quiet},
			{"warm print(1), stateless, c=1, burst", "each as soon as one sandbox is ready, while the pool refills", burst},
		} {
			k.drainExec()
			took, fails, err := waves(ctx, k, 1, n, barePrintBody, "1", v.p)
			note := fmt.Sprintf("%d calls, %s; body state:null, capture_state:false (no store write)", n, v.note)
			if err != nil {
				note += "; stopped: " + err.Error()
			}
			s := summarize(v.name, took, fails, note)
			s.ExecP50 = median(k.drainExec())
			res.Latency = append(res.Latency, s)
		}
	}
}

// barePrintBody is print(1) in stateless mode with nothing to capture.
var barePrintBody = map[string]any{"code": "print(1)", "state": nil, "capture_state": false}

// complexCases are real work on the pre-imported stack.
var complexCases = []struct{ name, code, want string }{
	{"pandas groupby, 100k rows", "df = pd.DataFrame({'k': np.random.randint(0, 100, 100_000), 'v': np.random.rand(100_000)})\n" +
		"g = df.groupby('k')['v'].agg(['mean', 'sum', 'count'])\nprint(len(g))", "100"},
	{"scikit-learn fit (logistic, 5k x 20)", "from sklearn.linear_model import LogisticRegression\n" +
		"X = np.random.rand(5000, 20)\ny = (X[:, 0] + X[:, 1] > 1).astype(int)\n" +
		"m = LogisticRegression(max_iter=200).fit(X, y)\nprint('fit', round(m.score(X, y), 2))", "fit"},
	{"matplotlib savefig (png)", "fig, ax = plt.subplots()\nax.plot(np.random.rand(1000))\n" +
		"fig.savefig('plot.png')\nplt.close(fig)\nprint('saved')", "saved"},
}

func complexPhase(ctx context.Context, k *client, n int, res *Results) {
	for _, cc := range complexCases {
		took, fails, err := waves(ctx, k, 1, n, map[string]any{"code": cc.code}, cc.want, quiet)
		note := "warm, c=1"
		if err != nil {
			note += "; stopped: " + err.Error()
		}
		res.Latency = append(res.Latency, summarize(cc.name, took, fails, note))
	}
}

// firstUse times code that needs a module the pool may not have pre-imported.
func firstUse(ctx context.Context, k *client, n int) Summary {
	code := "import pandas as pd\nprint(pd.__version__)"
	took, fails, err := waves(ctx, k, 1, n, map[string]any{"code": code}, ".", quiet)
	note := ""
	if err != nil {
		note = "stopped: " + err.Error()
	}
	return summarize("first import pandas", took, fails, note)
}

// overload sends unpaced print(1) calls from `workers` loops for d, every call allowed
// to queue, and returns the pool's refill rate: sandboxes created per second while
// demand never stopped. Calls still queued at the end are cancelled.
func overload(ctx context.Context, k *client, workers int, d time.Duration) (Rate, error) {
	before, err := k.pool(ctx)
	if err != nil {
		return Rate{}, err
	}
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var (
		mu   sync.Mutex
		ok   int
		rest int
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for octx.Err() == nil {
				r, err := k.exec(octx, printBody)
				mu.Lock()
				switch {
				case err == nil && r.Code == http.StatusOK:
					ok++
				case octx.Err() == nil:
					rest++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := k.pool(ctx)
	if err != nil {
		return Rate{}, err
	}
	created := after.Created - before.Created
	return Rate{
		PerSecond: round(float64(created)/elapsed.Seconds(), 3), N: int(created), Seconds: round(elapsed.Seconds(), 1),
		Note: fmt.Sprintf("%d workers unpaced, queue allowed; %d answered 200, %d other", workers, ok, rest),
	}, nil
}

// exhaustion fires n calls at once at a pool far smaller than n and sorts the answers;
// a 503 that took longer than the queue timeout (plus 100 ms) counts as late.
func exhaustion(ctx context.Context, k *client, n int, queueTimeout time.Duration) Exhaustion {
	var (
		mu  sync.Mutex
		out Exhaustion
		got []time.Duration
		wg  sync.WaitGroup
	)
	out.Requests = n
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := k.exec(ctx, printBody)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				out.Other++
			case r.Code == http.StatusOK:
				out.OK++
			case r.Code == http.StatusServiceUnavailable:
				out.Unavailable++
				got = append(got, r.Took)
				if r.Took > queueTimeout+100*time.Millisecond {
					out.Late++
				}
			default:
				out.Other++
			}
		}()
	}
	wg.Wait()
	out.Share503 = round(float64(out.Unavailable)/float64(n), 3)
	out.Latency503 = summarize("503 answers", got, 0, "")
	return out
}

func human(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
