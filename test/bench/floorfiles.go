package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/protocol"
)

// The file rows' code, the same in kiln's rows (filePhase) and at the floor.
const (
	inFileName = "in.bin"
	inFileCode = "print(len(open('in.bin', 'rb').read()))"
)

func outFileCode(size int) string {
	return fmt.Sprintf("with open('out.bin', 'wb') as f:\n    f.write(bytes(%d))\nprint('written')", size)
}

// bareFiles times the file rows' exchanges with no kiln: the first request to fresh
// sandboxes carries a 20 MB file that the code reads back (n times), or runs the code
// that writes a 20 MB file, which comes back in the answer (n times). It is kiln's
// file rows less kiln's HTTP, session and store.
func bareFiles(ctx context.Context, image string, n int) (in, out Summary, err error) {
	if n == 0 {
		return in, out, nil
	}
	dc, err := docker.New(slog.New(slog.NewTextHandler(io.Discard, nil)), docker.FrameLimits{Header: 8 << 20, Binary: 64 << 20})
	if err != nil {
		return in, out, err
	}
	defer dc.Close()
	boxes, startErr := startSandboxes(ctx, dc, bareSpec(image), 2*n, 2)
	defer func() { err = errors.Join(err, removeAll(boxes)) }()
	if startErr != nil {
		return in, out, startErr
	}
	data := make([]byte, fileSize)
	_, _ = rand.Read(data)
	time.Sleep(2 * time.Second) // as in bareAttach: the warm-ups' garbage settles
	var took [2][]time.Duration
	var fails [2]int
	for i, s := range boxes {
		k := i % 2
		req := &protocol.Request{ID: "floor-file", Op: protocol.OpExec, Lang: "python", TimeoutMS: 60000, Limits: kilnLimits}
		if k == 0 {
			req.Code, req.Files = inFileCode, []protocol.File{{Path: inFileName, Content: data}}
		} else {
			req.Code = outFileCode(fileSize)
		}
		d, r, err := exchange(ctx, s, req)
		switch {
		case err != nil:
		case k == 0 && r.Stdout != strconv.Itoa(fileSize)+"\n":
			err = fmt.Errorf("input file: answered status %s, stdout %q", r.Status, r.Stdout)
		case k == 1 && (len(r.Files) != 1 || len(r.Files[0].Content) != fileSize):
			err = fmt.Errorf("output file: answered status %s with %d files", r.Status, len(r.Files))
		}
		if err != nil {
			log.Printf("bare attach with files: %v", err)
			fails[k]++
			continue
		}
		took[k] = append(took[k], d)
	}
	note := "fresh warm sandbox, first request, no kiln in between; the code of kiln's file rows"
	in = summarize("floor: bare attach, first run, 20 MB input file read back", took[0], fails[0], note)
	out = summarize("floor: bare attach, first run, 20 MB output file returned", took[1], fails[1], note)
	return in, out, nil
}

// diskWrite times what the disk store does to keep an output file: write it to a
// temporary file in dir, sync it, rename it into place and sync the directory. It is
// the floor of storing a file durably on the disk under the kilns' DATA_DIR. The files
// stay until the last is timed, as kiln's stay in their session: a write into pages the
// kernel has just freed (a file written and removed in a loop) takes a fraction of the
// time of one that needs new pages, which on this VM cost 2 to 3 ms per MB.
func diskWrite(dir string, size, n int) (s Summary, err error) {
	data := make([]byte, size)
	_, _ = rand.Read(data)
	sub, err := os.MkdirTemp(dir, "disk-floor-")
	if err != nil {
		return s, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(sub)) }()
	var took []time.Duration
	for i := range n {
		start := time.Now()
		if err := writeSynced(sub, fmt.Sprintf("file-%d", i), data); err != nil {
			return s, err
		}
		took = append(took, time.Since(start))
	}
	return summarize(fmt.Sprintf("floor: disk, %s written, synced and renamed", human(size)), took, 0, "in the kilns' DATA_DIR's file system, each file kept"), nil
}

func writeSynced(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return errors.Join(err, f.Close(), os.Remove(f.Name()))
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
