package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kilnsh/kiln/kube"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/test/kilntest"
)

// Kube is the Kubernetes phase: kiln with RUNTIME=kubernetes on the cluster of
// $KUBECONFIG, the floor of its rows on bare Pods, and how long a sandbox takes to start
// on each runtime. Its kiln rows are in Results.Latency and its rates in Results.Rates,
// named with kubePrefix, beside Docker's.
type Kube struct {
	// Skipped says why the phase did not run; empty when it ran.
	Skipped string `json:"skipped,omitempty"`
	// Config is the kiln's configuration on the cluster.
	Config string    `json:"config,omitempty"`
	Floor  []Summary `json:"floor,omitempty"`
	// Starts are sandbox starts of the same image on each runtime, one at a time, the
	// runtimes taking turns: kube.Runtime.Start and docker.Runtime.Start.
	Starts []Summary `json:"starts,omitempty"`
	// CPUPerRequestMS is the kiln process's CPU, as Resources.CPUPerRequestMS counts it.
	CPUPerRequestMS map[string]float64 `json:"kiln_cpu_ms_per_request,omitempty"`
	Note            string             `json:"note,omitempty"` // the parts that failed
}

// The names of the Kubernetes phase's rows.
const (
	kubePrefix       = "kubernetes: "
	kubeStatelessRow = kubePrefix + statelessRow
	kubeRefillRate   = kubePrefix + "kiln refill under overload"
	kubeStartsRate   = kubePrefix + "back-to-back Pod starts"
	kubeFloorPrint   = "floor: kubernetes, bare Pod, first print(1)"
	kubeFloorState   = "floor: kubernetes, bare Pod, first print(1), 10 MB state"
	kubeFloorLive    = "floor: kubernetes, bare Pod, live print(1), 10 MB state held"
	kubeStartRow     = "cold start: kube.Runtime.Start, Pod to REPL ready"
	dockerStartRow   = "cold start: docker.Runtime.Start, container to REPL ready"
)

var (
	kubeResumedRow = kubePrefix + resumedStateRow(readOnlySize)
	kubeLiveRow    = kubePrefix + liveStateRow(readOnlySize)
)

// kubePool is the pool of kiln on the cluster: the test cluster is one node of the
// machine's cores, shared with other suites, and under overload the pool's size does not
// bound the refill, its warmers do.
const kubePool = 4

// kubeEnv is kiln's configuration on the cluster besides kilntest's KUBE_* settings.
// POOL_WARMERS is what kiln derives on a machine of 2 cores, fixed so that the back-to-back
// Pod starts run as many loops; LIVE_SESSIONS_MAX keeps the live sessions the overload opens
// from filling the shared node with Pods of 544 MB.
var kubeEnv = []string{"MAX_QUEUE=64", "QUEUE_TIMEOUT_SECONDS=60", "POOL_WARMERS=2", "LIVE_SESSIONS_MAX=2"}

// kubeLoops is how many back-to-back Pod starts run at once: kiln's POOL_WARMERS.
const kubeLoops = 2

// runtimeVar tells kilntest what the kilns it starts run their sandboxes on.
const runtimeVar = "KILN_TEST_RUNTIME"

// dockerKilns makes kilntest start the Docker phases' kilns on Docker: make bench runs the
// whole benchmark under deploy/k8s/test.sh, which sets KILN_TEST_RUNTIME=kubernetes for
// the suites it was written for; here only the Kubernetes phase wants it (kubeKilns).
func dockerKilns() {
	if os.Getenv(runtimeVar) == "kubernetes" {
		os.Unsetenv(runtimeVar)
	}
}

// kubeKilns makes kilntest start kilns on Kubernetes, until the returned function puts
// back what was there: RUNTIME=kubernetes in kilntest's namespace, images never pulled, a
// sliver of a core requested per Pod (test/kilntest/server.go).
func kubeKilns() (restore func()) {
	old, had := os.LookupEnv(runtimeVar)
	os.Setenv(runtimeVar, "kubernetes")
	return func() {
		if had {
			os.Setenv(runtimeVar, old)
		} else {
			os.Unsetenv(runtimeVar)
		}
	}
}

// kubeConnect connects to the cluster of $KUBECONFIG as kiln does, for the floor's Pods
// in kilntest's namespace, labelled with the floor's instance. Without a cluster it
// returns why the phase cannot run.
func kubeConnect(ctx context.Context) (kc *kube.Runtime, skipped string) {
	if os.Getenv("KUBECONFIG") == "" {
		return nil, "KUBECONFIG is not set, so there is no cluster to run on (make bench runs this phase on the test cluster " +
			"through deploy/k8s/test.sh; by hand: eval \"$(deploy/k8s/cluster.sh env)\" first)"
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	kc, err := kube.Open(cctx, sandbox.Options{Instance: floorInstance, Frames: sandbox.FrameLimits{Header: 8 << 20, Binary: 64 << 20},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		kube.Config{Namespace: kilntest.KubeNamespace, PullPolicy: "Never", MilliCPURequest: 20, EphemeralMB: 64})
	if err == nil {
		if err = kc.Ping(cctx); err != nil {
			kc.Close()
		}
	}
	if err != nil {
		return nil, "the cluster of $KUBECONFIG does not answer: " + err.Error()
	}
	return kc, ""
}

// kubePhase measures kiln on Kubernetes against its floor on bare Pods, then sandbox
// starts on both runtimes. Without a cluster it notes why and does nothing: an error
// only when the phase was asked for alone. A floor part that fails is noted and the
// rest goes on.
func (b *bench) kubePhase(ctx context.Context, res *Results, required bool) error {
	kp := &Kube{CPUPerRequestMS: map[string]float64{}}
	res.Kube = kp
	kc, skipped := kubeConnect(ctx)
	if kc == nil {
		kp.Skipped = skipped
		log.Printf("kubernetes: skipped: %s", skipped)
		if required {
			return errors.New("the Kubernetes phase cannot run: " + skipped)
		}
		return nil
	}
	defer kc.Close()
	sweep := func(ctx context.Context) {
		if _, err := kc.RemoveOrphans(ctx); err != nil {
			log.Printf("kubernetes floor: removing leftovers: %v", err)
		}
	}
	sweep(ctx)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sweep(cctx)
	}()
	var notes []string
	note := func(what string, err error) {
		if err != nil {
			log.Printf("kubernetes, %s: %v", what, err)
			notes = append(notes, what+": "+err.Error())
		}
	}
	blob, kilnErr := b.kubeKiln(ctx, kc, res, kp)
	note("kiln", kilnErr)
	note("floor", b.kubeFloor(ctx, kc, blob, kp))
	log.Printf("kubernetes: sandbox starts on each runtime, one at a time")
	var err error
	kp.Starts, err = startTimes(ctx, kc, b.image, b.counts.starts)
	note("starts", err)
	kp.Note = strings.Join(notes, "; ")
	return kilnErr
}

// kubeKiln runs kiln on the cluster and measures its rows: warm stateless print(1), a
// session with 10 MB of state resumed and live, and the refill under overload against
// back-to-back Pod starts. It returns the session's state blob, for the floor.
func (b *bench) kubeKiln(ctx context.Context, kc *kube.Runtime, res *Results, kp *Kube) ([]byte, error) {
	log.Printf("kubernetes: kiln with RUNTIME=kubernetes, POOL_SIZE=%d %s", kubePool, strings.Join(kubeEnv, " "))
	restore := kubeKilns()
	defer restore()
	srv, k, err := b.start(ctx, kubeEnv, kubePool)
	if err != nil {
		return nil, fmt.Errorf("start kiln on Kubernetes: %w", err)
	}
	defer stop(srv)
	kp.Config = fmt.Sprintf("POOL_SIZE=%d %s; kilntest's RUNTIME=kubernetes KUBE_NAMESPACE=%s KUBE_IMAGE_PULL_POLICY=Never KUBE_SANDBOX_CPU_REQUEST=0.02",
		kubePool, strings.Join(kubeEnv, " "), kilntest.KubeNamespace)
	k.measurePollCPU(ctx, 100)

	log.Printf("kubernetes: warm print(1), stateless, c=1")
	n := b.counts.waves[1]
	k.drainExec()
	cpu := k.cpu()
	took, fails, err := waves(ctx, k, 1, n, barePrintBody, "1", quiet)
	kp.CPUPerRequestMS["print(1) stateless"] = cpu.perRequest(len(took) + fails)
	note := fmt.Sprintf("%d calls, each once the pool is full and idle; body state:null, capture_state:false (no store write); the Pod removed after the call", n)
	if err != nil {
		note += "; stopped: " + err.Error()
	}
	s := summarize(kubeStatelessRow, took, fails, note)
	s.ExecP50 = median(k.drainExec())
	res.Latency = append(res.Latency, s)

	log.Printf("kubernetes: a session with 10 MB of state, resumed, then live")
	blob := kubeStateRows(ctx, k, b.counts.state, res, kp)

	run, err := b.refillWindows(ctx, k, "back-to-back Pod starts", func(ctx context.Context, d time.Duration) (int, time.Duration, error) {
		return backToBackPods(ctx, kc, kubeBareSpec(b.image), kubeLoops, d)
	})
	if err != nil {
		return blob, fmt.Errorf("refill: %w", err)
	}
	run.kiln.Name, run.other.Name = kubeRefillRate, kubeStartsRate
	run.other.Note = fmt.Sprintf("%d sequential loops (= POOL_WARMERS) of kube.Runtime.Start with kiln's Pod, its first print(1), its removal; %d windows of %s",
		kubeLoops, refillRounds, run.window)
	if run.otherErr != nil {
		run.other.Note += "; error: " + run.otherErr.Error()
	}
	res.Rates = append(res.Rates, run.kiln, run.other)
	if run.kiln.N > 0 {
		kp.CPUPerRequestMS["overload (per Pod)"] = round(run.kilnCPUMS/float64(run.kiln.N), 2)
	}
	return blob, nil
}

// kubeStateRows are the 10 MB state rows of statePhase on the cluster: the session made
// once, then print(1) resumed from the store in a fresh Pod each time, then print(1) in
// the Pod that served the session's last call. It returns the session's blob, nil when
// the setup failed.
func kubeStateRows(ctx context.Context, k *client, n int, res *Results, kp *Kube) []byte {
	sid, blob, size, err := stateSession(ctx, k, readOnlySize)
	if err != nil {
		for _, name := range []string{kubeResumedRow, kubeLiveRow} {
			res.Latency = append(res.Latency, summarize(name, nil, 1, "setup failed: "+err.Error()))
		}
		return nil
	}
	s, cpuMS := resumedRow(ctx, k, kubeResumedRow, sid, blob, "print(1)", "1", n,
		fmt.Sprintf("state_size %d B; POST /state of it before each call (untimed), so that each resumes from the store in a fresh Pod: "+
			"restored, captured, unchanged, so not sent back", size))
	res.Latency = append(res.Latency, s)
	kp.CPUPerRequestMS["state 10 MB, resumed"] = cpuMS
	s, cpuMS = liveRow(ctx, k, kubeLiveRow, sid, "print(1)", "1", n,
		fmt.Sprintf("state_size %d B; in the Pod that served the session's last call (runtime_status reused), each once the pool is full and idle: "+
			"no state sent, captured and compared, unchanged, so nothing comes back", size))
	res.Latency = append(res.Latency, s)
	kp.CPUPerRequestMS["state 10 MB, live"] = cpuMS
	return blob
}

// stateSession makes a session holding size bytes of os.urandom, and returns its id,
// its state blob as the store holds it, and kiln's state_size.
func stateSession(ctx context.Context, k *client, size int) (sid string, blob []byte, stateSize int, err error) {
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	err = k.waitQuiet(wctx)
	cancel()
	if err != nil {
		return "", nil, 0, err
	}
	r, err := k.exec(ctx, map[string]any{"code": fmt.Sprintf("import os\nblob = os.urandom(%d)\nprint(len(blob))", size)})
	if err == nil && (r.Code != http.StatusOK || !r.HasState) {
		err = fmt.Errorf("setup answered %d, has_state %v", r.Code, r.HasState)
	}
	if err != nil {
		return "", nil, 0, err
	}
	blob, err = k.state(ctx, r.SessionID)
	return r.SessionID, blob, r.StateSize, err
}
