package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/test/kilntest"
)

// Floor is what the machine costs without kiln, measured in the same run as kiln's
// rows: the exchange with a fresh warm REPL over a bare attach, the same over pipes
// inside the container, and raw bytes through an attach.
type Floor struct {
	BareExec Summary `json:"bare_attach_first_exec"`
	BarePing Summary `json:"bare_attach_first_ping"`
	PipeExec Summary `json:"pipe_first_exec"`
	PipePing Summary `json:"pipe_first_ping"`
	// BareState and BareStateChanged are a session call's exchange with no kiln: the
	// first request to a fresh REPL carries 10 MB of state, which the REPL restores,
	// runs in and captures (unchanged: nothing comes back; changed: all of it does).
	BareState        Summary `json:"bare_attach_first_exec_10mb_state"`
	BareStateChanged Summary `json:"bare_attach_first_exec_10mb_state_changed"`
	// RealState is the real state rows' exchanges with no kiln (realStatePhase): the
	// first request to a fresh REPL carries the blob kiln's session held and the code of
	// kiln's call.
	RealState []Summary `json:"bare_attach_first_exec_real_state,omitempty"`
	// Live is the live rows' exchanges with no kiln (liveFloors): requests shaped as
	// kiln's live calls, quietGap apart on one bare sandbox that served its session's
	// first call; and the small calls on one interpreter that captures nothing.
	Live []Summary `json:"bare_attach_live,omitempty"`
	// BareFileIn and BareFileOut are the file rows' exchanges with no kiln, and
	// DiskWrite what storing a 20 MB file durably costs on the disk under DATA_DIR.
	BareFileIn  Summary    `json:"bare_attach_first_exec_20mb_input_file"`
	BareFileOut Summary    `json:"bare_attach_first_exec_20mb_output_file"`
	DiskWrite   Summary    `json:"disk_20mb_synced_write"`
	Bytes       []BytesRow `json:"bytes"`
	Note        string     `json:"note,omitempty"`
}

// floorInstance labels the sandboxes the floor phase starts, so that a run that dies
// leaves nothing a later run does not remove.
const floorInstance = "kiln-bench-floor"

// kilnLimits are the limits kiln sends with every request under its default
// configuration (cmd/kiln/config.go).
var kilnLimits = protocol.Limits{MaxOutputBytes: 1 << 20, MaxFileBytes: 25 << 20, MaxFiles: 20, MaxStateBytes: 64 << 20,
	MaxStateRawBytes: 64 << 20}

// bareSpec is the sandbox kiln's pool starts under its default configuration
// (cmd/kiln/runtime.go, (*Main).spec); the runtime opened by openDocker labels it with
// the floor instance.
func bareSpec(image string) sandbox.Spec { return kilntest.DefaultSpec(image) }

// openDocker connects to the Docker daemon as kiln does, for the floor's sandboxes,
// labelled with the floor's instance.
func openDocker(ctx context.Context, frames sandbox.FrameLimits) (*docker.Runtime, error) {
	return docker.Open(ctx, sandbox.Options{Instance: floorInstance, Frames: frames,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, docker.Config{})
}

// bareAttach starts execs+pings fresh sandboxes as kiln's pool does (two at a time),
// lets them idle, then times the first request to each over its attach connection:
// print(1) to the first execs, ping to the others. Nothing of kiln's HTTP, session or
// store is in between. Every sandbox is removed, whatever happens.
func bareAttach(ctx context.Context, image string, execs, pings int) (execRow, pingRow Summary, err error) {
	dc, err := openDocker(ctx, sandbox.FrameLimits{Header: 8 << 20, Binary: 1 << 20})
	if err != nil {
		return execRow, pingRow, err
	}
	defer dc.Close()
	if _, err := dc.RemoveOrphans(ctx); err != nil {
		log.Printf("bare attach: removing leftovers: %v", err)
	}
	boxes, startErr := startSandboxes(ctx, dc, bareSpec(image), execs+pings, 2)
	defer func() { err = errors.Join(err, removeAll(boxes)) }()
	if startErr != nil {
		return execRow, pingRow, startErr
	}
	time.Sleep(2 * time.Second) // let the last warm-ups' garbage settle, as in kiln's quiet waves
	var took [2][]time.Duration
	var fails [2]int
	for i, s := range boxes {
		time.Sleep(quietGap)
		op, k := protocol.OpExec, 0
		if i >= execs {
			op, k = protocol.OpPing, 1
		}
		d, err := firstRequest(ctx, s, op)
		if err != nil {
			log.Printf("bare attach %s: %v", op, err)
			fails[k]++
			continue
		}
		took[k] = append(took[k], d)
	}
	note := "fresh warm sandbox (docker.Runtime.Start, kiln's spec), first request over Send and Receive" + quietNote
	execRow = summarize("floor: bare attach, first print(1)", took[0], fails[0], note)
	pingRow = summarize("floor: bare attach, first ping", took[1], fails[1], note)
	return execRow, pingRow, nil
}

// repl is a warm sandbox's REPL as the floor speaks to it, whichever runtime started it
// (a *docker.Sandbox or a *kube.Sandbox): what kiln's executor uses of it.
type repl interface {
	Send(ctx context.Context, frame net.Buffers) error
	Receive(ctx context.Context) (protocol.Frame, error)
	Stderr() string
}

// removable is a started sandbox the floor removes when done with it.
type removable interface {
	comparable
	Remove(ctx context.Context) error
}

// removeAll removes the sandboxes that started (the nils did not), whatever happened.
func removeAll[S removable](boxes []S) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var none S
	var err error
	for _, s := range boxes {
		if s != none {
			err = errors.Join(err, s.Remove(ctx))
		}
	}
	return err
}

// startSandboxes starts n sandboxes of spec, `parallel` at a time. It returns those that
// started, with nils for the rest, and the first error.
func startSandboxes(ctx context.Context, dc *docker.Runtime, spec sandbox.Spec, n, parallel int) ([]*docker.Sandbox, error) {
	return startAll(ctx, n, parallel, func(ctx context.Context) (*docker.Sandbox, error) { return dc.StartContainer(ctx, spec) })
}

// startAll calls start n times, `parallel` at a time, each bounded to two minutes, as
// kiln's warmers start sandboxes. It returns those that started, with zero values for
// the rest, and the first error.
func startAll[S any](ctx context.Context, n, parallel int, start func(context.Context) (S, error)) ([]S, error) {
	boxes := make([]S, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				boxes[i], errs[i] = start(sctx)
				cancel()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return boxes, errors.Join(errs...)
}

// firstRequest times one request of op to a sandbox and checks the answer. The exec is
// the one kiln sends for a stateless call: no state, nothing captured, open figures
// saved (AUTO_FIGURES).
func firstRequest(ctx context.Context, s repl, op string) (time.Duration, error) {
	req := &protocol.Request{ID: "floor1", Op: op, Limits: kilnLimits}
	if op == protocol.OpPing {
		took, f, err := roundTrip(ctx, s, req)
		if err == nil && !strings.Contains(string(f.Header), `"type":"pong"`) {
			err = fmt.Errorf("ping answered %.200s", f.Header)
		}
		return took, err
	}
	req.Lang, req.Code, req.TimeoutMS, req.Figures = "python", "print(1)", 30000, true
	took, resp, err := exchange(ctx, s, req)
	if err == nil && resp.Stdout != "1\n" {
		err = fmt.Errorf("print(1) answered status %s, stdout %q", resp.Status, resp.Stdout)
	}
	return took, err
}

// floorPhase measures the floor with no kiln running: the first exchange with fresh
// REPLs over a bare attach and over pipes inside a container, and raw bytes through a
// bare attach. A part that fails is noted and the rest goes on.
func (b *bench) floorPhase(ctx context.Context, res *Results) {
	f := &Floor{}
	res.Floor = f
	var notes []string
	note := func(what string, err error) {
		if err != nil {
			log.Printf("floor, %s: %v", what, err)
			notes = append(notes, what+": "+err.Error())
		}
	}
	var err error
	log.Printf("floor: first request to fresh sandboxes over a bare attach")
	f.BareExec, f.BarePing, err = bareAttach(ctx, b.image, b.counts.floorExecs, b.counts.floorPings)
	note("bare attach", err)
	log.Printf("floor: first request to fresh REPLs over pipes inside a container")
	f.PipeExec, f.PipePing, err = pipeRoundTrips(ctx, b.image, b.counts.floorExecs, b.counts.floorPings)
	note("pipes", err)
	log.Printf("floor: a 10 MB state over a bare attach")
	f.BareState, f.BareStateChanged, err = bareState(ctx, b.image, b.counts.floorStates)
	note("bare attach with state", err)
	if len(res.realRuns) > 0 {
		log.Printf("floor: real states (a DataFrame, a random forest) over a bare attach")
		f.RealState, err = bareRealStates(ctx, b.image, b.counts.floorStates, res.realRuns)
		note("bare attach with real states", err)
	}
	log.Printf("floor: live sessions, exchanges %s on one bare sandbox", quietApart)
	f.Live, err = b.liveFloors(ctx, res.realRuns)
	note("bare attach, live", err)
	log.Printf("floor: 20 MB files over a bare attach, and on disk")
	f.BareFileIn, f.BareFileOut, err = bareFiles(ctx, b.image, b.counts.floorFiles)
	note("bare attach with files", err)
	f.DiskWrite, err = diskWrite(b.tmp, fileSize, b.counts.floorFiles)
	note("disk", err)
	log.Printf("floor: bytes through a bare attach")
	sizes := []int{1 << 20, 10 << 20, fileSize, 100 << 20}
	if b.skip100 {
		sizes = sizes[:3]
	}
	f.Bytes, err = bytesFloor(ctx, b.image, sizes, b.counts.bytesReps)
	note("bytes", err)
	f.Note = strings.Join(notes, "; ")
}

// quietGap is how long the floor's machine idles before each request that stands for one
// of kiln's rows paced quiet (each call once the pool is full and idle, so about a
// warm-up after the last): a request to an idle machine costs more than one sent right
// after another (a bare first print(1) took about a third longer 1.5 s apart than back to
// back).
const quietGap = 1500 * time.Millisecond

// quietApart and quietNote say so in the floor rows' notes and the ratios' bases.
var (
	quietApart = fmt.Sprintf("%s apart", quietGap)
	quietNote  = fmt.Sprintf("; each request %s after the last", quietGap)
)

// bareStateSize is the state of the bare attach's session rows: kiln's 10 MB state row.
const bareStateSize = 10 << 20

// bareKind is one kind of first request in a pair of bare attach rows: the row's name,
// its request, and what the answer must hold.
type bareKind struct {
	name  string
	req   *protocol.Request
	check func(*protocol.Response) error
}

// bareRuns times the first request of each of two kinds to fresh sandboxes started as
// kiln's pool starts them, n of each, the kinds taking turns, with no kiln in between.
// prepare, when given, runs first on one more sandbox of its own; kinds is called after
// it. Every sandbox is removed, whatever happens.
func bareRuns(ctx context.Context, image string, n int, note string,
	prepare func(context.Context, *docker.Sandbox) error, kinds func() [2]bareKind) (rows [2]Summary, err error) {
	if n == 0 {
		return rows, nil
	}
	dc, err := openDocker(ctx, sandbox.FrameLimits{Header: 8 << 20, Binary: 64 << 20})
	if err != nil {
		return rows, err
	}
	defer dc.Close()
	extra := 0
	if prepare != nil {
		extra = 1
	}
	boxes, startErr := startSandboxes(ctx, dc, bareSpec(image), 2*n+extra, 2)
	defer func() { err = errors.Join(err, removeAll(boxes)) }()
	if startErr != nil {
		return rows, startErr
	}
	if prepare != nil {
		if err := prepare(ctx, boxes[0]); err != nil {
			return rows, err
		}
	}
	ks := kinds()
	time.Sleep(2 * time.Second) // as in bareAttach: the warm-ups' garbage settles
	var took [2][]time.Duration
	var fails [2]int
	for i, s := range boxes[extra:] {
		j := i % 2
		time.Sleep(quietGap)
		d, r, err := exchange(ctx, s, ks[j].req)
		if err == nil {
			err = ks[j].check(r)
		}
		if err != nil {
			log.Printf("%s: %v", ks[j].name, err)
			fails[j]++
			continue
		}
		took[j] = append(took[j], d)
	}
	for j, k := range ks {
		rows[j] = summarize(k.name, took[j], fails[j], note+quietNote)
	}
	return rows, nil
}

// bareState times the first request to fresh sandboxes that carries a 10 MB state blob
// made by the REPL itself, n times read-only (print(len(blob)): the state comes back
// unchanged, so not at all) and n times changing it (a new name: the whole state comes
// back). It is kiln's resumed session rows without kiln's HTTP, session and store, and
// the bytes floor plus the REPL's own handling of a state. The request is the one kiln
// sends for a resumed call: the state, live (its sandbox may go on serving the session),
// open figures saved.
func bareState(ctx context.Context, image string, n int) (same, changed Summary, err error) {
	var state []byte
	prepare := func(ctx context.Context, s *docker.Sandbox) error {
		mk := &protocol.Request{ID: "mkstate", Op: protocol.OpExec, Lang: "python", TimeoutMS: 60000, CaptureState: true,
			Code: fmt.Sprintf("import os\nblob = os.urandom(%d)", bareStateSize), Limits: kilnLimits}
		_, resp, err := exchange(ctx, s, mk)
		if err != nil {
			return fmt.Errorf("making the state: %w", err)
		}
		if len(resp.State) < bareStateSize {
			return fmt.Errorf("the state came back with %d bytes", len(resp.State))
		}
		state = resp.State
		return nil
	}
	kinds := func() [2]bareKind {
		req := func(code string) *protocol.Request {
			return &protocol.Request{ID: "floor-state", Op: protocol.OpExec, Lang: "python", Code: code, TimeoutMS: 30000,
				State: state, CaptureState: true, Live: true, Figures: true, Limits: kilnLimits}
		}
		printed := func(r *protocol.Response) error {
			if r.Stdout != fmt.Sprintf("%d\n", bareStateSize) {
				return fmt.Errorf("answered status %s, stdout %q", r.Status, r.Stdout)
			}
			return nil
		}
		return [2]bareKind{
			{name: "floor: bare attach, first print(len(blob)), 10 MB state, unchanged", req: req("print(len(blob))"),
				check: func(r *protocol.Response) error {
					if err := printed(r); err != nil || r.StateUnchanged {
						return err
					}
					return errors.New("a read-only run sent its state back")
				}},
			{name: "floor: bare attach, first run, 10 MB state, changed", req: req("blob2 = 1\nprint(len(blob))"),
				check: func(r *protocol.Response) error {
					if err := printed(r); err != nil || len(r.State) >= bareStateSize {
						return err
					}
					return fmt.Errorf("a changed state came back with %d bytes", len(r.State))
				}},
		}
	}
	rows, err := bareRuns(ctx, image, n, "fresh warm sandbox, first request carries 10 MB of state (os.urandom, made by the REPL), no kiln in between",
		prepare, kinds)
	return rows[0], rows[1], err
}

// exchange sends req to a sandbox and decodes its answer.
func exchange(ctx context.Context, s repl, req *protocol.Request) (time.Duration, *protocol.Response, error) {
	took, f, err := roundTrip(ctx, s, req)
	if err != nil {
		return 0, nil, err
	}
	lim := kilnLimits
	lim.MaxStateBytes = 64 << 20
	resp, err := protocol.DecodeResponse(f, req.ID, lim)
	return took, resp, err
}

// roundTrip times sending req to a sandbox and receiving the next frame, which is the
// answer: no events were asked for.
func roundTrip(ctx context.Context, s repl, req *protocol.Request) (time.Duration, protocol.Frame, error) {
	var f protocol.Frame
	msg, err := protocol.EncodeRequest(req)
	if err != nil {
		return 0, f, err
	}
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	err = s.Send(ectx, msg)
	if err == nil {
		f, err = s.Receive(ectx)
	}
	took := time.Since(start)
	if err != nil {
		return 0, f, fmt.Errorf("exchange: %w (%s)", err, strings.TrimSpace(s.Stderr()))
	}
	return took, f, nil
}
