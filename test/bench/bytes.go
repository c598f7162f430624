package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	engine "github.com/moby/moby/client"

	"github.com/kilnsh/kiln/docker"
)

// The bytes floor talks to the Engine SDK itself: the docker package attaches only to
// REPLs that speak the protocol, and this floor has to be the attach with nothing of
// kiln's on it. Only this benchmark does so; the service keeps the SDK in docker/.

// BytesRow is the cost of moving Bytes raw through a bare attach, each way. The raw
// times include one 1-byte round trip (the go signal or the acknowledgement); the net
// times take out the same exchange with no payload.
type BytesRow struct {
	Bytes      int     `json:"bytes"`
	N          int     `json:"n"`
	InMS       float64 `json:"in_ms"`
	OutMS      float64 `json:"out_ms"`
	InNetMS    float64 `json:"in_net_ms"`
	OutNetMS   float64 `json:"out_net_ms"`
	InMSPerMB  float64 `json:"in_ms_per_mb"`
	OutMSPerMB float64 `json:"out_ms_per_mb"`
}

// moverScript is the container's process: after a ready byte, for each size and
// repetition it reads 1+size bytes and acknowledges with one byte (in), then waits for
// one byte and writes 1+size bytes (out). It never touches a file.
const moverScript = `import os, sys
reps, sizes = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
view = memoryview(bytearray(1 + max(sizes)))
stdin = sys.stdin.buffer.raw

def read(n):
    got = 0
    while got < n:
        k = stdin.readinto(view[got:n])
        if not k:
            sys.exit(1)
        got += k

def write(n):
    sent = 0
    while sent < n:
        sent += os.write(1, view[sent:n])

os.write(1, b"R")
for size in sizes:
    for _ in range(reps):
        read(1 + size)
        os.write(1, b"K")
        read(1)
        write(1 + size)
`

// bytesFloor moves each size in and out of one container of the image, with kiln's
// hardening and no logging, reps times, through a bare Engine-SDK attach. Size 0 comes
// first, twice: the first round warms the path up and is dropped, the second is what
// the net times take out.
func bytesFloor(ctx context.Context, image string, sizes []int, reps int) (rows []BytesRow, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sizes = append([]int{0, 0}, sizes...)
	args := []string{"-c", moverScript, strconv.Itoa(reps)}
	for _, s := range sizes {
		args = append(args, strconv.Itoa(s))
	}
	out, err := exec.CommandContext(ctx, "docker", append([]string{"create"}, sandboxFlags(image, nil, "python3", args...)...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("docker create: %w: %s", err, bytes.TrimSpace(out))
	}
	id := strings.TrimSpace(string(out))
	api, err := engine.New(engine.FromEnv)
	if err != nil {
		return nil, err
	}
	defer api.Close()
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, rerr := api.ContainerRemove(rctx, id, engine.ContainerRemoveOptions{Force: true}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("container remove: %w", rerr))
		}
	}()
	att, err := api.ContainerAttach(ctx, id, engine.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("container attach: %w", err)
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close) // unblocks every read and write below
	defer stop()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	demuxed := make(chan struct{})
	go func() {
		defer close(demuxed)
		derr := docker.Demux(att.Reader, pw, &stderr, 1<<20)
		pw.CloseWithError(errors.Join(derr, io.ErrUnexpectedEOF))
	}()
	defer func() {
		att.Close()
		<-demuxed
		if err != nil && stderr.Len() > 0 {
			err = fmt.Errorf("%w: %s", err, lastLines(stderr.String(), 3))
		}
	}()
	if _, err := api.ContainerStart(ctx, id, engine.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("container start: %w", err)
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(pr, one); err != nil || one[0] != 'R' {
		return nil, fmt.Errorf("mover not ready: %v", err)
	}
	buf := make([]byte, 1+slices.Max(sizes))
	for _, size := range sizes {
		var in, outs []time.Duration
		for range reps {
			start := time.Now()
			if _, err := att.Conn.Write(buf[:1+size]); err != nil {
				return nil, fmt.Errorf("write %d bytes: %w", size, err)
			}
			if _, err := io.ReadFull(pr, one); err != nil || one[0] != 'K' {
				return nil, fmt.Errorf("no acknowledgement of %d bytes: %v", size, err)
			}
			in = append(in, time.Since(start))
			start = time.Now()
			if _, err := att.Conn.Write(one); err != nil {
				return nil, fmt.Errorf("write go: %w", err)
			}
			if _, err := io.ReadFull(pr, buf[:1+size]); err != nil {
				return nil, fmt.Errorf("read %d bytes: %w", size, err)
			}
			outs = append(outs, time.Since(start))
		}
		rows = append(rows, BytesRow{Bytes: size, N: reps, InMS: median(in), OutMS: median(outs)})
	}
	return netBytes(rows[1:]), nil
}

// netBytes fills the net times and the cost per MB of each row from the first row,
// which moved no payload.
func netBytes(rows []BytesRow) []BytesRow {
	if len(rows) == 0 || rows[0].Bytes != 0 {
		return rows
	}
	base := rows[0]
	for i := range rows {
		r := &rows[i]
		r.InNetMS, r.OutNetMS = round(max(r.InMS-base.InMS, 0), 2), round(max(r.OutMS-base.OutMS, 0), 2)
		if r.Bytes > 0 {
			mb := float64(r.Bytes) / (1 << 20)
			r.InMSPerMB, r.OutMSPerMB = round(r.InNetMS/mb, 3), round(r.OutNetMS/mb, 3)
		}
	}
	return rows
}

// median returns the median of d in milliseconds, rounded to 0.01 ms.
func median(d []time.Duration) float64 {
	s := summarize("", d, 0, "")
	return round(s.P50, 2)
}
