// Command bench measures kiln end to end on this machine: it starts real kiln
// processes on loopback (or targets one with -url), drives them over HTTP, times cold
// docker runs of the same image for comparison, and writes a table, JSON and an SVG
// chart under test/results/bench/. `make bench` runs it. Every phase is bounded in
// count and time; all traffic stays on loopback.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

func main() {
	var (
		url     = flag.String("url", "", "benchmark a running kiln at this URL instead of starting one (skips the phases that need their own configuration)")
		key     = flag.String("key", "", "API key for -url")
		pid     = flag.Int("pid", 0, "process id of the kiln behind -url, for RSS and CPU")
		image   = flag.String("image", "kiln-python:latest", "sandbox image")
		out     = flag.String("out", filepath.Join(kilntest.Root(), "test", "results", "bench"), "output directory")
		quick   = flag.Bool("quick", false, "small counts and short phases: a smoke test, not a measurement")
		overSec = flag.Int("overload-seconds", 30, "length of the sustained-overload phases")
		skip100 = flag.Bool("skip-100mb", false, "skip the 100 MB rows: the kiln with raised limits and the 100 MB floor")
		onlyE   = flag.Bool("egress-only", false, "measure only the egress rows and the floor they are set against")
		onlyJ   = flag.Bool("jupyter-only", false, "measure only the Jupyter rows: small cells through kiln's kernels and through Jupyter Server + ipykernel")
		onlyF   = flag.Bool("floor-only", false, "measure only the floor (bare attach, pipes, bytes), with no kiln")
		before  = flag.String("before", "", "an older kiln binary: measure it against this tree's kiln, side by side (with -before-image), then the floor")
		beforeI = flag.String("before-image", "", "the sandbox image of the -before build")
		abCalls = flag.Int("before-calls", 10, "calls per row and build in the -before comparison")
		onlyR   = flag.Bool("replicas-only", false, "measure only the replicas rows: a live session's calls sent to its replica and forwarded by another")
		onlyL   = flag.Bool("live-only", false, "measure only the live session rows (print(1), holding 48 MB and the capture's memory, small calls, memory), with no floor")
		onlyB   = flag.Bool("e2b-only", false, "measure only the E2B rows: E2B's JS SDK against kiln, and the REST calls they are set against")
		onlyK   = flag.Bool("k8s-only", false, "measure only the Kubernetes phase: kiln with RUNTIME=kubernetes on the cluster of $KUBECONFIG, its floor on bare Pods, sandbox starts on both runtimes")
	)
	flag.Parse()
	log.SetFlags(log.Ltime)
	c := defaultCounts()
	if *quick {
		c = quickCounts()
		*overSec = min(*overSec, 8)
	}
	b := &bench{image: *image, counts: c, overload: time.Duration(*overSec) * time.Second, skip100: *skip100}
	// Every kiln's DATA_DIR lives in one temporary directory, removed once they have all stopped.
	tmp, err := os.MkdirTemp("", "kiln-bench-")
	if err != nil {
		log.Fatalf("bench: %v", err)
	}
	b.tmp = tmp
	// A bound on the whole run, with room for a loaded machine: a quiet one takes about 20 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	res := newResults()
	dockerKilns()
	switch {
	case *onlyR:
		res.Meta.Target = "two kiln replicas on one Redis started by the benchmark (kilntest), loopback"
		err = b.replicaPhase(ctx, res)
	case *onlyK:
		res.Meta.Target = "kiln on Kubernetes started by the benchmark (kilntest), loopback; the floor on bare Pods"
		err = b.kubePhase(ctx, res, true)
	case *onlyE:
		res.Meta.Target = "kiln with egress started by the benchmark (kilntest), upstreams on loopback; the floor"
		b.floorPhase(ctx, res)
		err = b.egressPhase(ctx, res)
	case *onlyB:
		res.Meta.Target = "kiln started by the benchmark (kilntest), E2B's JS SDK and kiln's REST API on loopback"
		err = b.e2bPhase(ctx, res)
	case *onlyJ:
		res.Meta.Target = "kiln's kernels and a Jupyter Server + ipykernel container, both started by the benchmark, loopback"
		err = b.jupyterPhase(ctx, res)
	case *onlyL:
		res.Meta.Target = "kiln started by the benchmark (kilntest), loopback; the live rows only"
		err = b.liveOnly(ctx, res)
	case *onlyF:
		res.Meta.Target = "the floor only, no kiln"
		b.floorPhase(ctx, res)
	case *before != "":
		if *beforeI == "" {
			log.Fatalf("bench: -before needs -before-image")
		}
		if *quick {
			*abCalls = min(*abCalls, 2)
		}
		err = b.runAB(ctx, res, *before, *beforeI, *abCalls)
		b.floorPhase(ctx, res)
	case *url != "":
		err = b.runRemote(ctx, newClient(*url, *key, *pid), res)
	default:
		err = b.runLocal(ctx, res)
	}
	if rerr := os.RemoveAll(tmp); rerr != nil {
		log.Printf("bench: removing %s: %v", tmp, rerr)
	}
	res.Ratios = append(append(append(append(append(ratios(res), egressRatios(res)...), jupyterRatios(res)...), e2bRatios(res)...), kubeRatios(res)...), replicaRatios(res)...)
	res.Breakdown = append(breakdown(res), kubeBreakdown(res)...)
	if err != nil {
		log.Printf("bench: %v", err)
	}
	res.Meta.Finished = time.Now().UTC().Format(time.RFC3339)
	res.Meta.LoadEnd = loadAvg()
	if werr := write(*out, res); werr != nil {
		log.Fatalf("bench: write results: %v", werr)
	}
	fmt.Print(table(res))
	fmt.Printf("\nwritten to %s\n", *out)
	if err != nil {
		os.Exit(1)
	}
}

// counts are how many calls or waves each phase makes.
type counts struct {
	waves    map[int]int // concurrency -> waves
	state    int
	complex  int
	cold     int
	split    int
	firstUse int
	stream   int
	preload  time.Duration // overload length for each PRELOAD_MODULES variant
	bigState int           // calls in the session with 100 MB of state
	files    int           // calls of each 20 MB file row
	starts   int           // sandbox starts on each runtime, in the Kubernetes phase
	egress   int           // downloads through the egress proxy, and by the host
	kernel   int           // small cells through a Jupyter kernel, on kiln and on Jupyter Server
	e2b      int           // creates and commands through E2B's SDK (a quarter as many 20 MB files)
	// liveCalls are the calls of the live print(1) row and of its floor; cells the
	// rounds of small calls, for kiln and for the floor alike.
	liveCalls, cells int
	// The floor: first print(1) and first ping, each to a fresh REPL (over a bare
	// attach, and over pipes inside a container); first runs carrying a state over a
	// bare attach (of each kind: 10 MB of bytes, and each real state's calls);
	// repetitions of each bytes size.
	floorExecs, floorPings, floorStates, floorFiles, bytesReps int
}

func defaultCounts() counts {
	return counts{waves: map[int]int{1: 30, 2: 6, 4: 3, 8: 2}, state: 8, complex: 3, cold: 3, split: 3, firstUse: 3, preload: 20 * time.Second,
		bigState: 3, files: 12, floorExecs: 30, floorPings: 4, floorStates: 8, floorFiles: 12, bytesReps: 3, stream: 8,
		liveCalls: 30, cells: 3, starts: 8, egress: 5, kernel: 50, e2b: 20}
}

func quickCounts() counts {
	return counts{waves: map[int]int{1: 5, 2: 2, 4: 1, 8: 1}, state: 2, complex: 1, cold: 1, split: 1, firstUse: 1, preload: 5 * time.Second,
		bigState: 1, files: 1, floorExecs: 2, floorPings: 1, floorStates: 1, floorFiles: 1, bytesReps: 1, stream: 2,
		liveCalls: 3, cells: 1, starts: 2, egress: 1, kernel: 6, e2b: 4}
}

type bench struct {
	tmp      string // the kilns' data directories go here
	image    string
	counts   counts
	overload time.Duration
	skip100  bool
}

// start runs this tree's kiln with the benchmark's image and env, and waits until its
// pool is full.
func (b *bench) start(ctx context.Context, env []string, pool int) (*kilntest.Server, *client, error) {
	return b.startBuild(ctx, "", b.image, env, pool)
}

// startBuild runs the kiln binary bin (this tree's when empty) with the sandbox image,
// env and a pool of pool on top of what every kiln of the benchmark shares (its own
// DATA_DIR under the benchmark's temporary directory, debug logs), and waits until its
// pool is full.
func (b *bench) startBuild(ctx context.Context, bin, image string, env []string, pool int) (*kilntest.Server, *client, error) {
	dir, err := os.MkdirTemp(b.tmp, "data-")
	if err != nil {
		return nil, nil, err
	}
	env = append([]string{"SANDBOX_IMAGE=" + image, "DATA_DIR=" + dir, "LOG_LEVEL=debug"}, append(env, "POOL_SIZE="+strconv.Itoa(pool))...)
	srv, err := kilntest.Start(kilntest.Options{Env: env, Binary: bin, ReadyTimeout: 5 * time.Minute})
	if err != nil {
		return nil, nil, err
	}
	k := newClient(srv.URL, "", srv.PID())
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := k.waitReady(wctx, pool); err != nil {
		stop(srv)
		return nil, nil, err
	}
	return srv, k, nil
}

func stop(srv *kilntest.Server) {
	if err := srv.Stop(time.Minute); err != nil {
		log.Printf("stopping kiln: %v", err)
	}
}

// liveOnly measures the live rows on a kiln of its own, with no floor: the rows set
// against kiln's own rows have their ratios.
func (b *bench) liveOnly(ctx context.Context, res *Results) error {
	srv, k, err := b.start(ctx, []string{"MAX_QUEUE=64", "QUEUE_TIMEOUT_SECONDS=60"}, 4)
	if err != nil {
		return fmt.Errorf("start kiln: %w", err)
	}
	defer stop(srv)
	k.instance = srv.Instance
	livePhase(ctx, k, b.counts, res)
	return nil
}

func (b *bench) runLocal(ctx context.Context, res *Results) error {
	res.Meta.Target = "kiln started by the benchmark (kilntest), loopback"
	log.Printf("kiln A: POOL_SIZE=8, full pre-imports")
	srv, k, err := b.start(ctx, []string{"MAX_QUEUE=64", "QUEUE_TIMEOUT_SECONDS=60"}, 8)
	if err != nil {
		return fmt.Errorf("start kiln A: %w", err)
	}
	k.instance = srv.Instance
	time.Sleep(2 * time.Second) // let the last warm-up's garbage settle
	if kb, err := rssKB(srv.PID()); err == nil {
		res.Resources.IdleRSSMB = round(float64(kb)/1024, 1)
	}
	rss := startRSS(srv.PID())
	err = b.poolPhases(ctx, k, res, rss)
	if err == nil {
		err = b.refillCPU(ctx, k, res)
	}
	res.Resources.PeakRSSMB = round(rss.Stop(), 1)
	res.Preload = append(res.Preload, preloadRow("full (default)", srv.Logs(), res.rate("kiln refill under overload"), res.summary("first import pandas (full)")))
	stop(srv)
	if err != nil {
		return err
	}

	b.floorPhase(ctx, res)
	if !b.skip100 {
		if err := b.bigState(ctx, res); err != nil {
			return err
		}
	}
	b.dockerPhases(ctx, res)
	if err := b.egressPhase(ctx, res); err != nil {
		log.Printf("egress: %v", err)
	}
	if err := b.jupyterPhase(ctx, res); err != nil {
		log.Printf("jupyter: %v", err)
	}
	if err := b.e2bPhase(ctx, res); err != nil {
		log.Printf("e2b: %v", err)
	}

	log.Printf("kiln B: the memory of one upload, then pool exhaustion")
	srv, k, err = b.start(ctx, []string{"MAX_QUEUE=2", "QUEUE_TIMEOUT_SECONDS=1"}, 2)
	if err != nil {
		return fmt.Errorf("start kiln B: %w", err)
	}
	if growth, body, err := uploadMemory(ctx, k, srv.PID(), 4, 20<<20); err != nil {
		log.Printf("upload memory: %v", err)
	} else {
		res.Resources.UploadRSSGrowthMB, res.Resources.UploadBodyMB = growth, body
	}
	ex := exhaustion(ctx, k, 16, time.Second)
	ex.Config = "POOL_SIZE=2 MAX_QUEUE=2 QUEUE_TIMEOUT_SECONDS=1, 16 calls at once"
	res.Exhaustion = &ex
	stop(srv)

	for _, set := range []struct{ name, env string }{{"numpy", "numpy"}, {"none", "none"}} {
		log.Printf("kiln: PRELOAD_MODULES=%s", set.env)
		srv, k, err := b.start(ctx, []string{"PRELOAD_MODULES=" + set.env, "MAX_QUEUE=64", "QUEUE_TIMEOUT_SECONDS=60"}, 4)
		if err != nil {
			return fmt.Errorf("start kiln with PRELOAD_MODULES=%s: %w", set.env, err)
		}
		first := firstUse(ctx, k, b.counts.firstUse)
		rate, err := overload(ctx, k, 4, b.counts.preload)
		if err != nil {
			log.Printf("overload: %v", err)
		}
		res.Preload = append(res.Preload, preloadRow(set.name, srv.Logs(), rate, first))
		stop(srv)
	}
	log.Printf("replicas: a live session's calls, direct and forwarded")
	if err := b.replicaPhase(ctx, res); err != nil {
		return err
	}
	return b.kubePhase(ctx, res, false)
}

// poolPhases are the phases any kiln can serve, whoever started it.
func (b *bench) poolPhases(ctx context.Context, k *client, res *Results, rss *rssSampler) error {
	k.measurePollCPU(ctx, 300)
	res.Resources.PollCPUMS = round(k.pollCPU, 3)
	log.Printf("warm print(1) at c=1,2,4,8")
	latencyPhase(ctx, k, b.counts.waves, res)
	if rss != nil {
		res.Resources.PeakPrintRSSMB = round(rss.Peak(), 1)
	}
	log.Printf("live output and cancel")
	streamPhase(ctx, k, b.counts.stream, res)
	log.Printf("sessions with state")
	statePhase(ctx, k, []int{10 << 10, 1 << 20, 10 << 20}, b.counts.state, res)
	log.Printf("sessions with real objects: a DataFrame, a random forest")
	realStatePhase(ctx, k, b.counts.state, res)
	log.Printf("live sessions: print(1), small calls one after the other, memory")
	livePhase(ctx, k, b.counts, res)
	log.Printf("20 MB files in and out")
	filePhase(ctx, k, b.counts.files, res)
	log.Printf("complex cases")
	complexPhase(ctx, k, b.counts.complex, res)
	fu := firstUse(ctx, k, b.counts.firstUse)
	fu.Name = "first import pandas (full)"
	res.Latency = append(res.Latency, fu)
	return b.refillComparison(ctx, k, res)
}

// refillRounds is how many times the refill comparison alternates between kiln and
// docker run, so that a change in the machine's load hits both sides alike.
const refillRounds = 3

// refillComparison measures kiln's refill under sustained overload and back-to-back
// cold docker runs in alternating windows (refillWindows).
func (b *bench) refillComparison(ctx context.Context, k *client, res *Results) error {
	run, err := b.refillWindows(ctx, k, "docker run", func(ctx context.Context, d time.Duration) (int, time.Duration, error) {
		return backToBack(ctx, b.image, 2, d)
	})
	if err != nil {
		return err
	}
	kiln := run.kiln
	kiln.Name = "kiln refill under overload"
	res.Rates = append(res.Rates, kiln)
	if kiln.N > 0 {
		res.Resources.CPUPerRequestMS["overload (per container)"] = round(run.kilnCPUMS/float64(kiln.N), 2)
	}
	other := run.other
	other.Name = "back-to-back docker run"
	other.Note = fmt.Sprintf("2 sequential loops (= POOL_WARMERS), REPL --once with pre-imports + print(1); %d windows of %s", refillRounds, run.window)
	if run.otherErr != nil {
		other.Note += "; error: " + run.otherErr.Error()
	}
	res.Rates = append(res.Rates, other)
	return nil
}

// refillRun is one refill comparison: kiln's rate, the CPU kiln spent over its
// windows, and the other side's rate and first error.
type refillRun struct {
	kiln, other Rate
	kilnCPUMS   float64
	window      time.Duration
	otherErr    error
}

// refillWindows measures kiln's refill under sustained overload and another way of
// making sandboxes (other, run for a window's length) in alternating windows, each
// starting with kiln's pool full and idle, so that neither side competes with the
// other's work. The rates come back unnamed.
func (b *bench) refillWindows(ctx context.Context, k *client, otherName string,
	other func(ctx context.Context, d time.Duration) (n int, elapsed time.Duration, err error)) (refillRun, error) {
	run := refillRun{window: b.overload / refillRounds}
	st, err := k.pool(ctx)
	if err != nil {
		return run, fmt.Errorf("pool stats: %w", err)
	}
	var (
		otherT, kilnT time.Duration
		last          string
	)
	for round := range refillRounds {
		log.Printf("refill round %d/%d: kiln overload, then %s, %s each", round+1, refillRounds, otherName, run.window)
		if err := b.waitFull(ctx, k, st.Target); err != nil {
			return run, err
		}
		cpu := k.cpu()
		r, err := overload(ctx, k, 8, run.window)
		if err != nil {
			return run, fmt.Errorf("overload: %w", err)
		}
		run.kilnCPUMS += cpu.perRequest(1)
		run.kiln.N += r.N
		kilnT += time.Duration(r.Seconds * float64(time.Second))
		last = r.Note
		if err := b.waitFull(ctx, k, st.Target); err != nil {
			return run, err
		}
		n, d, err := other(ctx, run.window)
		run.other.N, otherT = run.other.N+n, otherT+d
		if err != nil && run.otherErr == nil {
			run.otherErr = err
		}
	}
	run.kiln.Seconds = round(kilnT.Seconds(), 1)
	run.kiln.PerSecond = round(float64(run.kiln.N)/kilnT.Seconds(), 3)
	run.kiln.Note = fmt.Sprintf("%d windows of %s alternating with %s; last: %s", refillRounds, run.window, otherName, last)
	run.other.Seconds = round(otherT.Seconds(), 1)
	run.other.PerSecond = round(float64(run.other.N)/otherT.Seconds(), 3)
	return run, nil
}

// waitFull waits until the pool is back to its target, so that no warm-up of kiln's
// runs into the next window.
func (b *bench) waitFull(ctx context.Context, k *client, target int) error {
	wctx, cancel := context.WithTimeout(ctx, 3*refillWait)
	defer cancel()
	return k.waitReady(wctx, target)
}

// dockerPhases time cold docker runs of the image: the baseline and the warm-up split.
func (b *bench) dockerPhases(ctx context.Context, res *Results) {
	log.Printf("cold docker runs")
	run := func(name string, n int, f func() (time.Duration, error), note string) {
		var took []time.Duration
		fails := 0
		for range n {
			d, err := f()
			if err != nil {
				log.Printf("%s: %v", name, err)
				fails++
				continue
			}
			took = append(took, d)
		}
		res.Latency = append(res.Latency, summarize(name, took, fails, note))
	}
	run("cold docker run: pre-imports + print(1)", b.counts.cold,
		func() (time.Duration, error) { return coldRun(ctx, b.image, nil) }, "same image and hardening, REPL --once")
	run("split: docker run, entrypoint true", b.counts.split,
		func() (time.Duration, error) { return trivialRun(ctx, b.image) }, "daemon + runtime only")
	run("split: docker run, python3 -c pass", b.counts.split,
		func() (time.Duration, error) { return interpreterRun(ctx, b.image) }, "daemon + bare interpreter")
}

func (b *bench) runRemote(ctx context.Context, k *client, res *Results) error {
	res.Meta.Target = k.url
	var rss *rssSampler
	if k.pid != 0 {
		if kb, err := rssKB(k.pid); err == nil {
			res.Resources.IdleRSSMB = round(float64(kb)/1024, 1)
		}
		rss = startRSS(k.pid)
		defer func() { res.Resources.PeakRSSMB = round(rss.Stop(), 1) }()
	}
	if err := b.poolPhases(ctx, k, res, rss); err != nil {
		return err
	}
	b.floorPhase(ctx, res)
	b.dockerPhases(ctx, res)
	return nil
}

// bigState measures a session with 100 MB of state, on a kiln whose limits allow it:
// the state cap raised, and memory for the REPL to hold, restore and capture it.
func (b *bench) bigState(ctx context.Context, res *Results) error {
	log.Printf("kiln C: 100 MB of state (STATE_MAX_SIZE_MB=128, SANDBOX_MEMORY_MB=1536)")
	srv, k, err := b.start(ctx, []string{"STATE_MAX_SIZE_MB=128", "SANDBOX_MEMORY_MB=1536", "MAX_QUEUE=8", "QUEUE_TIMEOUT_SECONDS=60"}, 2)
	if err != nil {
		return fmt.Errorf("start kiln C: %w", err)
	}
	defer stop(srv)
	statePhase(ctx, k, []int{100 << 20}, b.counts.bigState, res)
	return nil
}

func newResults() *Results {
	r := &Results{}
	r.Meta.Started = time.Now().UTC().Format(time.RFC3339)
	r.Meta.GoVersion = runtime.Version()
	r.Meta.CPUs = runtime.NumCPU()
	r.Meta.LoadStart = loadAvg()
	r.Meta.Pacing = "before each wave of c calls the benchmark polls /metrics (kiln_pool_ready) every 20 ms until ready >= c, so " +
		"every call finds a warm sandbox; arrivals are paced by the pool's refill (warm-ups of earlier calls' " +
		"replacements run in the background while later calls are measured)"
	if out, err := exec.Command("git", "-C", kilntest.Root(), "rev-parse", "--short", "HEAD").Output(); err == nil {
		r.Meta.Commit = strings.TrimSpace(string(out))
	}
	r.Resources.CPUPerRequestMS = map[string]float64{}
	return r
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// preloadRow summarises one PRELOAD_MODULES set: the warm-ups its kiln logged, its
// refill rate under overload and the first pandas import in user code.
func preloadRow(set, logs string, rate Rate, first Summary) PreloadRow {
	var warm []time.Duration
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"sandbox ready"`) {
			continue
		}
		var m struct {
			WarmupMS float64 `json:"warmup_ms"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.WarmupMS > 0 {
			warm = append(warm, time.Duration(m.WarmupMS*float64(time.Millisecond)))
		}
	}
	return PreloadRow{Set: set, Warmup: summarize("warm-up", warm, 0, ""), RefillPerS: rate.PerSecond, FirstImport: first}
}
