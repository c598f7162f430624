package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/test/kilntest"
)

// The Jupyter rows: small cells (x += 1) sent through kiln's kernels API by JupyterLab's
// client library, against the same client and cells through a real Jupyter Server with
// ipykernel, on kiln's Python image plus Debian's ipykernel (images/ipykernel), with the
// sandbox's CPU and memory.
const (
	jupyterRow      = "jupyter: small cell over kiln's kernel WebSocket (@jupyterlab/services)"
	jupyterFloorRow = "floor: the same cell over Jupyter Server + ipykernel, same image"
	jupyterTarget   = 1.2
	ipykernelImage  = "kiln-ipykernel:latest"
)

func (b *bench) jupyterPhase(ctx context.Context, res *Results) error {
	log.Printf("jupyter: %d small cells through kiln's kernels, against Jupyter Server + ipykernel", b.counts.kernel)
	root := kilntest.Root()
	if out, err := exec.CommandContext(ctx, filepath.Join(root, "images", "build.sh"), "ipykernel", ipykernelImage).CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", ipykernelImage, err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	token := kiln.NewID()
	name := "kiln-bench-jupyter-" + strings.ToLower(kiln.NewID()[:8])
	run := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--name", name, "--network", "host",
		"--cpus", "1", "--memory", "512m", "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/mnt/data:mode=1777",
		"-e", "HOME=/tmp", "-e", "JUPYTER_RUNTIME_DIR=/tmp/runtime", ipykernelImage,
		"--ServerApp.ip=127.0.0.1", "--ServerApp.port="+strconv.Itoa(port), "--IdentityProvider.token="+token,
		"--ServerApp.root_dir=/mnt/data", "--no-browser")
	if out, err := run.CombinedOutput(); err != nil {
		return fmt.Errorf("start Jupyter Server: %v\n%s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", name).Run()
	jurl := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHTTP(ctx, jurl+"/api", time.Minute); err != nil {
		logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
		return fmt.Errorf("the Jupyter Server container: %w\n%s", err, logs)
	}

	srv, _, err := b.start(ctx, nil, 2)
	if err != nil {
		return fmt.Errorf("start kiln: %w", err)
	}
	defer stop(srv)

	var onKiln, onJupyter []time.Duration
	for range 2 { // interleaved, so that a machine's drift falls on both
		d, err := timeCells(ctx, srv.URL+"/jupyter", "", b.counts.kernel/2)
		if err != nil {
			return fmt.Errorf("cells on kiln: %w", err)
		}
		onKiln = append(onKiln, d...)
		if d, err = timeCells(ctx, jurl, token, b.counts.kernel/2); err != nil {
			return fmt.Errorf("cells on Jupyter Server: %w", err)
		}
		onJupyter = append(onJupyter, d...)
	}
	res.Latency = append(res.Latency,
		summarize(jupyterRow, onKiln, 0, "execute_request to its reply and idle, one kernel"),
		summarize(jupyterFloorRow, onJupyter, 0, "the same client and cells, the image's Python with Debian's ipykernel"))
	return nil
}

// timeCells runs test/jupyter/node/cells.mjs against a server and returns each cell's time.
func timeCells(ctx context.Context, base, token string, n int) ([]time.Duration, error) {
	cmd := exec.CommandContext(ctx, "node", "cells.mjs", base, token, strconv.Itoa(n))
	cmd.Dir = filepath.Join(kilntest.Root(), "test", "jupyter", "node")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, errOut.String())
	}
	var ds []time.Duration
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "cell "); ok {
			ms, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, err
			}
			ds = append(ds, time.Duration(ms*float64(time.Millisecond)))
		}
	}
	if len(ds) != n {
		return nil, fmt.Errorf("%d cells timed, want %d: %s", len(ds), n, out.String())
	}
	return ds, nil
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer within %s", url, within)
}

// jupyterRatios sets kiln's cells against Jupyter Server's.
func jupyterRatios(r *Results) []Ratio {
	k, j := r.summary(jupyterRow), r.summary(jupyterFloorRow)
	if k.N == 0 || j.N == 0 || j.P50 == 0 {
		return nil
	}
	return []Ratio{{Case: jupyterRow, KilnMS: k.P50, FloorMS: j.P50, Ratio: round(k.P50/j.P50, 2),
		Target: jupyterTarget, Basis: "p50 over kiln / p50 over Jupyter Server + ipykernel, same client, same run"}}
}
