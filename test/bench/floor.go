package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/protocol"
)

// Floor is what the machine costs without kiln, measured in the same run as kiln's
// rows: the exchange with a fresh warm REPL over a bare attach, the same over pipes
// inside the container, and raw bytes through an attach.
type Floor struct {
	BareExec Summary    `json:"bare_attach_first_exec"`
	BarePing Summary    `json:"bare_attach_first_ping"`
	PipeExec Summary    `json:"pipe_first_exec"`
	PipePing Summary    `json:"pipe_first_ping"`
	Bytes    []BytesRow `json:"bytes"`
	Note     string     `json:"note,omitempty"`
}

// floorInstance labels the sandboxes the floor phase starts, so that a run that dies
// leaves nothing a later run does not remove.
const floorInstance = "kiln-bench-floor"

// kilnLimits are the limits kiln sends with every request under its default
// configuration (cmd/kiln/config.go).
var kilnLimits = protocol.Limits{MaxOutputBytes: 1 << 20, MaxFileBytes: 25 << 20, MaxFiles: 20, MaxStateBytes: 64 << 20}

// bareSpec is the sandbox kiln's pool starts under its default configuration
// (cmd/kiln/app.go, (*Main).spec), owned by the benchmark's own instance label.
func bareSpec(image string) docker.Spec {
	return docker.Spec{Image: image, Instance: floorInstance, MemoryMB: 512, NanoCPUs: 1e9,
		PidsLimit: 128, TmpMB: 64, DataMB: 256, NoFile: 1024}
}

// bareAttach starts execs+pings fresh sandboxes as kiln's pool does (two at a time),
// lets them idle, then times the first request to each over its attach connection:
// print(1) to the first execs, ping to the others. Nothing of kiln's HTTP, session or
// store is in between. Every sandbox is removed, whatever happens.
func bareAttach(ctx context.Context, image string, execs, pings int) (execRow, pingRow Summary, err error) {
	dc, err := docker.New(slog.New(slog.NewTextHandler(io.Discard, nil)), docker.FrameLimits{Header: 8 << 20, Binary: 1 << 20})
	if err != nil {
		return execRow, pingRow, err
	}
	defer dc.Close()
	if _, err := dc.RemoveOrphans(ctx, floorInstance); err != nil {
		log.Printf("bare attach: removing leftovers: %v", err)
	}
	boxes, startErr := startSandboxes(ctx, dc, bareSpec(image), execs+pings, 2)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range boxes {
			if s != nil {
				err = errors.Join(err, s.Remove(rctx))
			}
		}
	}()
	if startErr != nil {
		return execRow, pingRow, startErr
	}
	time.Sleep(2 * time.Second) // let the last warm-ups' garbage settle, as in kiln's quiet waves
	var took [2][]time.Duration
	var fails [2]int
	for i, s := range boxes {
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
	note := "fresh warm sandbox (docker.Client.Start, kiln's spec), first request over Send and Receive"
	execRow = summarize("floor: bare attach, first print(1)", took[0], fails[0], note)
	pingRow = summarize("floor: bare attach, first ping", took[1], fails[1], note)
	return execRow, pingRow, nil
}

// startSandboxes starts n sandboxes of spec, `parallel` at a time. It returns those that
// started, with nils for the rest, and the first error.
func startSandboxes(ctx context.Context, dc *docker.Client, spec docker.Spec, n, parallel int) ([]*docker.Sandbox, error) {
	boxes := make([]*docker.Sandbox, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				boxes[i], errs[i] = dc.Start(sctx, spec)
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

// firstRequest times one request of op to a sandbox and checks the answer.
func firstRequest(ctx context.Context, s *docker.Sandbox, op string) (time.Duration, error) {
	req := &protocol.Request{ID: "floor1", Op: op, Limits: kilnLimits}
	if op == protocol.OpExec {
		req.Lang, req.Code, req.TimeoutMS = "python", "print(1)", 30000
	}
	msg, err := protocol.EncodeRequest(req)
	if err != nil {
		return 0, err
	}
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	err = s.Send(ectx, msg)
	var f protocol.Frame
	if err == nil {
		f, err = s.Receive(ectx) // no events were asked for: the next frame is the answer
	}
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("exchange: %w (%s)", err, strings.TrimSpace(s.Stderr()))
	}
	if op == protocol.OpPing {
		if !strings.Contains(string(f.Header), `"type":"pong"`) {
			return 0, fmt.Errorf("ping answered %.200s", f.Header)
		}
		return took, nil
	}
	resp, err := protocol.DecodeResponse(f, req.ID, kilnLimits)
	if err != nil {
		return 0, err
	}
	if resp.Stdout != "1\n" {
		return 0, fmt.Errorf("print(1) answered status %s, stdout %q", resp.Status, resp.Stdout)
	}
	return took, nil
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
	log.Printf("floor: bytes through a bare attach")
	sizes := []int{1 << 20, 10 << 20, fileSize, 100 << 20}
	if b.skip100 {
		sizes = sizes[:3]
	}
	f.Bytes, err = bytesFloor(ctx, b.image, sizes, b.counts.bytesReps)
	note("bytes", err)
	f.Note = strings.Join(notes, "; ")
}
