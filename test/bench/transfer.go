package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"time"
)

// transfer names a kiln row that moves a payload through the sandbox's attach, and
// which ways that payload crosses by design, for its ratio to the floor.
type transfer struct {
	name    string
	bytes   int
	in, out bool
	// bare names the floor row of the same exchange with no kiln, when the floor has
	// one: the ratio is then to it, not to the bytes floor.
	bare string
	// file marks the file rows, whose same exchange with no kiln the floor measures
	// too (Floor.BareFileIn, BareFileOut): their ratio is to it.
	file bool
}

// readOnlySize is the state of the session whose read-only call and live call are also
// measured.
const readOnlySize = 10 << 20

// The names of the state rows. A resumed call restores the session's state from the
// store in a fresh sandbox; a live one runs in the sandbox that served the session's
// last call, which holds its namespace.
func resumedStateRow(size int) string {
	return fmt.Sprintf("session with %s state, resumed, c=1", human(size))
}

func liveStateRow(size int) string {
	return fmt.Sprintf("session with %s state, live, c=1", human(size))
}

func readOnlyRow(size int) string {
	return fmt.Sprintf("read-only print(len(blob)), %s state, resumed", human(size))
}

// statePhase creates a session holding size bytes of incompressible state once, then
// runs print(1) in it, each call resumed from the store in a fresh sandbox (its state
// put back before each call, untimed, which ends the live sandbox): the REPL restores
// the state, captures it, and sends it back only when it changed. For readOnlySize it
// also runs print(len(blob)) so, then print(1) in the session's live sandbox, where
// nothing is restored and, the state unchanged, nothing of it crosses.
func statePhase(ctx context.Context, k *client, sizes []int, n int, res *Results) {
	for _, size := range sizes {
		name := resumedStateRow(size)
		setup := map[string]any{"code": fmt.Sprintf("import os\nblob = os.urandom(%d)\nprint(len(blob))", size)}
		wctx, cancel := context.WithTimeout(ctx, refillWait)
		err := k.waitReady(wctx, 1)
		cancel()
		var r *execResult
		if err == nil {
			r, err = k.exec(ctx, setup)
		}
		if err == nil && (r.Code != http.StatusOK || !r.HasState) {
			err = fmt.Errorf("setup answered %d, has_state %v", r.Code, r.HasState)
		}
		var blob []byte
		if err == nil {
			blob, err = k.state(ctx, r.SessionID)
		}
		if err != nil {
			res.Latency = append(res.Latency, summarize(name, nil, 1, "setup failed: "+err.Error()))
			continue
		}
		sid := r.SessionID
		note := fmt.Sprintf("state_size %d B; POST /state of it before each call (untimed), so that each resumes from the store in a fresh sandbox: "+
			"restored, captured, sent back if changed", r.StateSize)
		s, cpuMS := resumedRow(ctx, k, name, sid, blob, "print(1)", "1", n, note)
		res.Latency = append(res.Latency, s)
		res.Resources.CPUPerRequestMS["state "+human(size)+", resumed"] = cpuMS
		res.transfers = append(res.transfers, transfer{name: name, bytes: r.StateSize, in: true, out: true})
		if size != readOnlySize {
			continue
		}
		name = readOnlyRow(size)
		s, _ = resumedRow(ctx, k, name, sid, blob, "print(len(blob))", strconv.Itoa(size), n,
			fmt.Sprintf("state_size %d B; resumed as the row above; the state is unchanged, so it need not come back", r.StateSize))
		res.Latency = append(res.Latency, s)
		res.transfers = append(res.transfers, transfer{name: name, bytes: r.StateSize, in: true, out: true})

		name = liveStateRow(size)
		s, cpuMS = liveRow(ctx, k, name, sid, "print(1)", "1", n,
			fmt.Sprintf("state_size %d B; in the sandbox that served the session's last call (runtime_status reused): no state sent, "+
				"captured and compared with the last capture, unchanged, so nothing comes back", r.StateSize))
		res.Latency = append(res.Latency, s)
		res.Resources.CPUPerRequestMS["state "+human(size)+", live"] = cpuMS
		res.pairs = append(res.pairs, pair{row: name, floor: liveStateFloor(human(size) + " state"), target: ratioTarget,
			basis: "the same live print(1), " + quietApart + " on one bare sandbox holding the same state"})
	}
}

// measuredRow runs n paced calls of body and records, besides their latency, the
// protocol bytes per call kiln's counter saw cross the sandbox's attach.
func measuredRow(ctx context.Context, k *client, name string, body map[string]any, want string, n int, note string) Summary {
	w := k.wireMeter(ctx)
	k.drainExec()
	took, fails, err := waves(ctx, k, 1, n, body, want, quiet)
	if err != nil {
		note += "; stopped: " + err.Error()
	}
	s := summarize(name, took, fails, note)
	s.ExecP50 = median(k.drainExec())
	s.WireIn, s.WireOut = w.perCall(ctx, k, len(took)+fails)
	return s
}

// fileSize is the size of the files the file rows move.
const fileSize = 20 << 20

// filePhase measures a 20 MB input file placed in the sandbox (uploaded once, named
// in each call) and a 20 MB output file returned by it (then downloaded). Both calls
// are stateless, so that nothing but the file separates them from stateless print(1).
func filePhase(ctx context.Context, k *client, n int, res *Results) {
	inName := fmt.Sprintf("input file %s placed, read back", human(fileSize))
	data := make([]byte, fileSize)
	_, _ = rand.Read(data)
	sid, fid, took, err := k.upload(ctx, inFileName, data)
	if err != nil {
		res.Latency = append(res.Latency, summarize(inName, nil, 1, "upload failed: "+err.Error()))
	} else {
		res.Latency = append(res.Latency, summarize(fmt.Sprintf("upload %s (POST /upload)", human(fileSize)), []time.Duration{took}, 0, "multipart, disk store"))
		body := inputFileBody(sid, fid)
		res.Latency = append(res.Latency, measuredRow(ctx, k, inName, body, strconv.Itoa(fileSize), n,
			"stateless; an uploaded file of random bytes named in files, read back by the code"))
		res.transfers = append(res.transfers, transfer{name: inName, bytes: fileSize, in: true, file: true})
	}

	outName := fmt.Sprintf("output file %s returned", human(fileSize))
	body := outputFileBody()
	w := k.wireMeter(ctx)
	var execs, downloads []time.Duration
	var execTimes []time.Duration
	fails, dlFails := 0, 0
	note := "stateless; the code writes the file in /mnt/data, kiln returns and stores it"
	for range n {
		wctx, cancel := context.WithTimeout(ctx, refillWait)
		err := k.waitQuiet(wctx)
		cancel()
		if err != nil {
			note += "; stopped: " + err.Error()
			break
		}
		r, err := k.exec(ctx, body)
		if err == nil && (r.Code != http.StatusOK || r.Status != "ok" || len(r.Files) != 1 || r.Files[0].Size != fileSize) {
			err = fmt.Errorf("answered %d, status %s, %d files", r.Code, r.Status, len(r.Files))
		}
		if err != nil {
			log.Printf("%s: %v", outName, err)
			fails++
			continue
		}
		execs = append(execs, r.Took)
		execTimes = append(execTimes, r.Exec())
		fsid := r.Files[0].SessionID
		if fsid == "" {
			fsid = r.SessionID
		}
		size, d, err := k.download(ctx, fsid, r.Files[0].ID)
		if err == nil && size != fileSize {
			err = fmt.Errorf("downloaded %d bytes, want %d", size, fileSize)
		}
		if err != nil {
			log.Printf("download: %v", err)
			dlFails++
			continue
		}
		downloads = append(downloads, d)
	}
	s := summarize(outName, execs, fails, note)
	s.ExecP50 = median(execTimes)
	s.WireIn, s.WireOut = w.perCall(ctx, k, len(execs)+fails)
	res.Latency = append(res.Latency, s,
		summarize(fmt.Sprintf("download %s output (GET /download)", human(fileSize)), downloads, dlFails, "after each call above"))
	res.transfers = append(res.transfers, transfer{name: outName, bytes: fileSize, out: true, file: true})
}
