package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The E2B rows (issue 45), through E2B's own JS SDK (test/e2b/node/bench.mjs): a create to
// the first output of a command with the pool warm, against an absolute bound; a command
// in a held sandbox, against a live REST call whose Python spawns the same command; and
// 20 MB moved by files.write and files.read, against kiln's REST upload and download of
// the same bytes.
const (
	e2bCreateRow    = "e2b: Sandbox.create() to run('echo hi')'s first output, warm pool"
	e2bRunRow       = "e2b: commands.run('true') in a held sandbox"
	e2bRunFloorRow  = "rest: live call running subprocess.run(['true'])"
	e2bWriteRow     = "e2b: files.write of 20 MB"
	e2bReadRow      = "e2b: files.read of 20 MB"
	e2bUploadRow    = "rest: upload of 20 MB"
	e2bDownloadRow  = "rest: download of 20 MB"
	e2bCreateBound  = 30.0 // ms, p50
	e2bRunTarget    = 1.5
	e2bFilesTarget  = 1.5
	e2bFileMB       = 20
	e2bKeyForBench  = "e2b_00000000000000000000000000000000000000b0" // auth is off: any key of E2B's shape
	e2bCreateSteady = "p50 from the SDK's create call to the first stdout chunk, each create with the pool full"
)

func (b *bench) e2bPhase(ctx context.Context, res *Results) error {
	n := b.counts.e2b
	log.Printf("e2b: %d creates, %d commands and %d file round trips of %d MB through E2B's SDK, and their REST floors", n, n*2, max(1, n/4), e2bFileMB)
	srv, k, err := b.start(ctx, nil, 2)
	if err != nil {
		return fmt.Errorf("start kiln: %w", err)
	}
	defer stop(srv)

	creates, err := e2bNode(ctx, srv.URL, "create", n, srv.URL+"/health/detailed")
	if err != nil {
		return fmt.Errorf("creates: %w", err)
	}
	var runs, rest []time.Duration
	for range 2 { // interleaved, so that a machine's drift falls on both
		got, err := e2bNode(ctx, srv.URL, "run", n, "")
		if err != nil {
			return fmt.Errorf("commands: %w", err)
		}
		runs = append(runs, got["run"]...)
		d, err := liveSpawns(ctx, k, n)
		if err != nil {
			return fmt.Errorf("live calls: %w", err)
		}
		rest = append(rest, d...)
	}
	files := max(1, n/4)
	moved, err := e2bNode(ctx, srv.URL, "files", files, strconv.Itoa(e2bFileMB))
	if err != nil {
		return fmt.Errorf("files: %w", err)
	}
	var ups, downs []time.Duration
	data := bytes.Repeat([]byte("kiln-e2b"), e2bFileMB<<20/8)
	for range files {
		sid, fid, took, err := k.upload(ctx, "big.bin", data)
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		ups = append(ups, took)
		size, took, err := k.download(ctx, sid, fid)
		if err != nil || size != len(data) {
			return fmt.Errorf("download: %d bytes, %v", size, err)
		}
		downs = append(downs, took)
	}
	res.Latency = append(res.Latency,
		summarize(e2bCreateRow, creates["create"], 0, e2bCreateSteady),
		summarize(e2bRunRow, runs, 0, "Process.Start's stream to its end, one sandbox, over HTTP/1.1 and Connect's JSON"),
		summarize(e2bRunFloorRow, rest, 0, "POST /exec in one live session: the same spawn, without E2B's layers"),
		summarize(e2bWriteRow, moved["write"], 0, "multipart POST /files into the sandbox"),
		summarize(e2bReadRow, moved["read"], 0, "GET /files out of the sandbox"),
		summarize(e2bUploadRow, ups, 0, "POST /upload into kiln's store"),
		summarize(e2bDownloadRow, downs, 0, "GET /download out of kiln's store"))
	return nil
}

// liveSpawns times n live REST calls of one session whose Python spawns true.
func liveSpawns(ctx context.Context, k *client, n int) ([]time.Duration, error) {
	body := map[string]any{"lang": "py", "code": "import subprocess\nsubprocess.run(['true'])"}
	first, err := k.exec(ctx, body)
	if err != nil || first.Code != 200 {
		return nil, fmt.Errorf("first call: %v %v", first, err)
	}
	body["session_id"] = first.SessionID
	var ds []time.Duration
	for i := 0; i < n+3; i++ {
		r, err := k.exec(ctx, body)
		if err != nil || r.Code != 200 || r.Status != "ok" {
			return nil, fmt.Errorf("call: %+v %v", r, err)
		}
		if i >= 3 { // as the SDK's rows, after three untimed
			ds = append(ds, r.Took)
		}
	}
	return ds, nil
}

// e2bNode runs bench.mjs in one mode and returns its times by row.
func e2bNode(ctx context.Context, url, mode string, n int, arg string) (map[string][]time.Duration, error) {
	cmd := exec.CommandContext(ctx, "node", "bench.mjs", mode, strconv.Itoa(n), arg)
	cmd.Dir = filepath.Join(kilntest.Root(), "test", "e2b", "node")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+e2bKeyForBench)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("node bench.mjs %s: %v: %s", mode, err, errOut.String())
	}
	got := map[string][]time.Duration{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		row, v, ok := strings.Cut(line, " ")
		ms, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("node bench.mjs %s wrote %q", mode, line)
		}
		got[row] = append(got[row], time.Duration(ms*float64(time.Millisecond)))
	}
	return got, nil
}

// e2bRatios sets the SDK's rows against their bounds and floors.
func e2bRatios(r *Results) []Ratio {
	var out []Ratio
	if c := r.summary(e2bCreateRow); c.N > 0 {
		out = append(out, Ratio{Case: e2bCreateRow, KilnMS: c.P50, FloorMS: e2bCreateBound, Ratio: round(c.P50/e2bCreateBound, 2),
			Target: 1, Basis: "p50 / the issue's bound of 30 ms on this machine"})
	}
	pair := func(row, floor string, target float64, basis string) {
		k, f := r.summary(row), r.summary(floor)
		if k.N > 0 && f.N > 0 && f.P50 > 0 {
			out = append(out, Ratio{Case: row, KilnMS: k.P50, FloorMS: f.P50, Ratio: round(k.P50/f.P50, 2), Target: target, Basis: basis})
		}
	}
	pair(e2bRunRow, e2bRunFloorRow, e2bRunTarget, "p50 through the SDK / p50 of the live REST call, same run")
	pair(e2bWriteRow, e2bUploadRow, e2bFilesTarget, "p50 through the SDK / p50 of kiln's REST upload, same bytes, same run")
	pair(e2bReadRow, e2bDownloadRow, e2bFilesTarget, "p50 through the SDK / p50 of kiln's REST download, same bytes, same run")
	return out
}
