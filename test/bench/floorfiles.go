package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

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

// inputFileBody is the stateless call of the input file row, naming the uploaded file.
func inputFileBody(sid, fid string) map[string]any {
	return map[string]any{"code": inFileCode, "state": nil, "capture_state": false,
		"files": []map[string]string{{"id": fid, "session_id": sid, "name": inFileName}}}
}

// outputFileBody is the stateless call of the output file row.
func outputFileBody() map[string]any {
	return map[string]any{"code": outFileCode(fileSize), "state": nil, "capture_state": false}
}

// bareFiles times the file rows' exchanges with no kiln: the first request to fresh
// sandboxes carries a 20 MB file that the code reads back (n times), or runs the code
// that writes a 20 MB file, which comes back in the answer (n times). It is kiln's
// file rows less kiln's HTTP, session and store, with the request kiln sends for them
// (stateless: nothing captured; open figures saved).
func bareFiles(ctx context.Context, image string, n int) (in, out Summary, err error) {
	kinds := func() [2]bareKind {
		data := make([]byte, fileSize)
		_, _ = rand.Read(data)
		req := func(code string, files []protocol.File) *protocol.Request {
			return &protocol.Request{ID: "floor-file", Op: protocol.OpExec, Lang: "python", Code: code, Files: files,
				TimeoutMS: 30000, Figures: true, Limits: kilnLimits}
		}
		return [2]bareKind{
			{name: "floor: bare attach, first run, 20 MB input file read back",
				req: req(inFileCode, []protocol.File{{Path: inFileName, Content: data}}),
				check: func(r *protocol.Response) error {
					if r.Stdout != strconv.Itoa(fileSize)+"\n" {
						return fmt.Errorf("input file: answered status %s, stdout %q", r.Status, r.Stdout)
					}
					return nil
				}},
			{name: "floor: bare attach, first run, 20 MB output file returned", req: req(outFileCode(fileSize), nil),
				check: func(r *protocol.Response) error {
					if len(r.Files) != 1 || len(r.Files[0].Content) != fileSize {
						return fmt.Errorf("output file: answered status %s with %d files", r.Status, len(r.Files))
					}
					return nil
				}},
		}
	}
	rows, err := bareRuns(ctx, image, n, "fresh warm sandbox, first request, no kiln in between; the code of kiln's file rows", nil, kinds)
	return rows[0], rows[1], err
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
