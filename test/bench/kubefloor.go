package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/kube"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/test/kilntest"
)

// kubeBareSpec is the sandbox Pod kiln's pool makes on the test cluster under its default
// configuration: the same runtime-neutral spec as a container's (cmd/kiln/runtime.go,
// (*Main).spec), with the Pod's own settings (kilntest's KUBE_*) given to kube.Open by
// kubeConnect.
func kubeBareSpec(image string) sandbox.Spec { return kilntest.DefaultSpec(image) }

// kubeFloor measures the floor of kiln's rows on the cluster, with no kiln running:
// the first print(1) to fresh bare Pods, the first print(1) carrying the 10 MB state
// blob kiln's session held, and live print(1) on one bare Pod holding that state (the
// last two only when kiln's session was made).
func (b *bench) kubeFloor(ctx context.Context, kc *kube.Runtime, blob []byte, kp *Kube) error {
	spec := kubeBareSpec(b.image)
	var errs []error
	add := func(s Summary, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
			if s.N == 0 {
				s.Fails, s.Note = max(s.Fails, 1), "failed: "+err.Error()
			}
		}
		kp.Floor = append(kp.Floor, s)
	}
	log.Printf("kubernetes floor: first print(1) to fresh bare Pods")
	add(firstOnPods(ctx, kc, spec, b.counts.floorExecs, kubeFloorPrint,
		"fresh warm Pod (kube.Runtime.Start, kiln's spec), first request over Send and Receive (the API server's exec)",
		func(ctx context.Context, s repl) (time.Duration, error) { return firstRequest(ctx, s, protocol.OpExec) }))
	if blob == nil {
		return errors.Join(append(errs, errors.New("no state blob from kiln's session: no state floor"))...)
	}
	log.Printf("kubernetes floor: first print(1) carrying 10 MB of state, and live print(1) holding it")
	resumed := liveRequest("print(1)")
	resumed.State = blob
	add(firstOnPods(ctx, kc, spec, b.counts.floorStates, kubeFloorState,
		fmt.Sprintf("fresh warm Pod, first request carries the %d B state blob kiln's session held, as kiln sends a resumed call", len(blob)),
		func(ctx context.Context, s repl) (time.Duration, error) {
			d, r, err := exchange(ctx, s, resumed)
			if err == nil && (r.Status != "ok" || r.Stdout != "1\n" || len(r.State) > 0 || r.StateError != nil) {
				err = fmt.Errorf("answered status %s, stdout %q, %d state bytes back, state_error %v", r.Status, r.Stdout, len(r.State), r.StateError)
			}
			return d, err
		}))
	add(kubeLive(ctx, kc, spec, b.counts.state, firstCalls(resumed),
		fmt.Sprintf("one warm Pod; after print(1) carrying the %d B blob kiln's session held (untimed, as a resumed call), "+
			"the same live request %s, capturing nothing (as kiln's, whose states wait for the flush)", len(blob), quietApart)))
	return errors.Join(errs...)
}

// startPods starts n Pods of spec, two at a time, as kiln's warmers do; nils for those
// that did not start.
func startPods(ctx context.Context, kc *kube.Runtime, spec sandbox.Spec, n, parallel int) ([]*kube.Sandbox, error) {
	return startAll(ctx, n, parallel, func(ctx context.Context) (*kube.Sandbox, error) { return kc.StartPod(ctx, spec) })
}

// firstOnPods starts n fresh Pods of spec as kiln's pool does, lets them idle, then times
// one request to each with do, at most podBatch Pods at a time (each asks for its memory
// limit, and the test node holds only so many). Every Pod is removed, whatever happens.
func firstOnPods(ctx context.Context, kc *kube.Runtime, spec sandbox.Spec, n int, name, note string,
	do func(context.Context, repl) (time.Duration, error)) (Summary, error) {
	var (
		took  []time.Duration
		fails int
		errs  []error
	)
	for done := 0; done < n; done += podBatch {
		t, f, err := firstOnBatch(ctx, kc, spec, min(podBatch, n-done), name, do)
		took, fails, errs = append(took, t...), fails+f, append(errs, err)
	}
	row := summarize(name, took, fails, note+quietNote)
	return row, errors.Join(errs...)
}

// podBatch is how many fresh Pods firstOnPods holds at once.
const podBatch = 10

func firstOnBatch(ctx context.Context, kc *kube.Runtime, spec sandbox.Spec, n int, name string,
	do func(context.Context, repl) (time.Duration, error)) (took []time.Duration, fails int, err error) {
	boxes, err := startPods(ctx, kc, spec, n, 2)
	defer func() { err = errors.Join(err, removeAll(boxes)) }()
	time.Sleep(2 * time.Second) // as in bareAttach: the warm-ups' garbage settles
	for _, s := range boxes {
		if s == nil {
			fails++
			continue
		}
		time.Sleep(quietGap)
		d, err := do(ctx, s)
		if err != nil {
			log.Printf("%s: %v", name, err)
			fails++
			continue
		}
		took = append(took, d)
	}
	return took, fails, err
}

// kubeLive is bareLive on one Pod.
func kubeLive(ctx context.Context, kc *kube.Runtime, spec sandbox.Spec, n int, setup setupCalls, note string) (row Summary, err error) {
	row.Name = kubeFloorLive
	boxes, err := startPods(ctx, kc, spec, 1, 1)
	defer func() { err = errors.Join(err, removeAll(boxes)) }()
	if err != nil {
		return row, err
	}
	time.Sleep(2 * time.Second)
	return livePrints(ctx, boxes[0], kubeFloorLive, n, note, setup)
}

// backToBackPods makes sandboxes as kiln's refill does, with no kiln, in `loops`
// sequential loops until d has passed (each loop finishes the sandbox it is on): a Pod
// of kiln's (kube.Runtime.Start), its first print(1), its removal. It returns how many
// completed and how long it took.
func backToBackPods(ctx context.Context, kc *kube.Runtime, spec sandbox.Spec, loops int, d time.Duration) (n int, elapsed time.Duration, err error) {
	start := time.Now()
	end := start.Add(d)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				perr := podOnce(ctx, kc, spec)
				mu.Lock()
				if perr != nil && err == nil {
					err = perr
				}
				if perr == nil {
					n++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n, time.Since(start), err
}

// podOnce makes one sandbox Pod, sends it kiln's first print(1), and removes it.
func podOnce(ctx context.Context, kc *kube.Runtime, spec sandbox.Spec) (err error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	s, err := kc.StartPod(sctx, spec)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, removeAll([]*kube.Sandbox{s})) }()
	_, err = firstRequest(sctx, s, protocol.OpExec)
	return err
}

// startGap is the pause after each timed start's removal: the kubelet tears a deleted
// Pod down after the API server has let it go, and that must not run into the next start.
const startGap = 2 * time.Second

// startTimes times n sandbox starts on each runtime with the same image, one at a time,
// the runtimes taking turns (which goes first alternates): kube.Runtime.Start with kiln's
// Pod, docker.Runtime.Start with kiln's container; each from the call to the REPL's ready
// frame. Each sandbox is removed after its start, untimed.
func startTimes(ctx context.Context, kc *kube.Runtime, image string, n int) ([]Summary, error) {
	dc, err := openDocker(ctx, sandbox.FrameLimits{Header: 8 << 20, Binary: 1 << 20})
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	if _, err := dc.RemoveOrphans(ctx); err != nil {
		log.Printf("starts: removing leftovers: %v", err)
	}
	kspec, dspec := kubeBareSpec(image), bareSpec(image)
	sides := [2]struct {
		name, note string
		start      func(context.Context) (time.Duration, error)
	}{
		{kubeStartRow, "kiln's Pod: create, Running seen through the watch, exec through the API server, hello, ready", func(ctx context.Context) (time.Duration, error) {
			return timedStart(ctx, func(ctx context.Context) (*kube.Sandbox, error) { return kc.StartPod(ctx, kspec) })
		}},
		{dockerStartRow, "kiln's container: create, attach, start, hello, ready", func(ctx context.Context) (time.Duration, error) {
			return timedStart(ctx, func(ctx context.Context) (*docker.Sandbox, error) { return dc.StartContainer(ctx, dspec) })
		}},
	}
	var took [2][]time.Duration
	var fails [2]int
	var errs []error
	for i := range 2 * n {
		j := (i + i/2) % 2 // kube, docker, docker, kube, kube, docker, ...
		d, err := sides[j].start(ctx)
		if err != nil {
			log.Printf("%s: %v", sides[j].name, err)
			errs = append(errs, err)
			fails[j]++
		} else {
			took[j] = append(took[j], d)
		}
		time.Sleep(startGap)
	}
	rows := make([]Summary, 2)
	for j, s := range sides {
		rows[j] = summarize(s.name, took[j], fails[j], fmt.Sprintf("%s; same image, one at a time, the runtimes taking turns; removed after, then %s idle", s.note, startGap))
	}
	return rows, errors.Join(errs...)
}

// timedStart times start, then removes what it started (untimed).
func timedStart[S removable](ctx context.Context, start func(context.Context) (S, error)) (time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t := time.Now()
	s, err := start(sctx)
	d := time.Since(t)
	if err != nil {
		return 0, err
	}
	return d, removeAll([]S{s})
}
