package session

import (
	"slices"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

func TestExecSavesOutputs(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	old := e.file(t, sess.ID, "report.csv", "old report")
	keep := e.file(t, sess.ID, "keep.txt", "keep")
	e.run.result.Stderr = "warning\n"
	e.run.result.Files = []protocol.File{
		{Path: "report.csv", Content: []byte("new report")},
		{Path: "plot.png", Content: []byte("PNG")},
		{Path: "sub/data.json", Content: []byte("{}")},
		{Path: "../escape.html", Content: []byte("<p>")},
	}
	req := execReq()
	req.SessionID = sess.ID

	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	want := []struct{ name, contentType, data string }{
		{"report.csv", ContentType("report.csv"), "new report"},
		{"plot.png", "image/png", "PNG"},
		{"sub/data.json", "application/json", "{}"},
		{"escape.html", "text/html; charset=utf-8", "<p>"},
	}
	if len(res.Files) != len(want) {
		t.Fatalf("result has %d files, want %d", len(res.Files), len(want))
	}
	ids := map[string]bool{old.ID: true, keep.ID: true}
	for i, w := range want {
		f := res.Files[i]
		if f.Name != w.name || f.ContentType != w.contentType || f.SessionID != sess.ID || f.Size != int64(len(w.data)) {
			t.Errorf("file %d = {%s %q %s %d}, want {%s %q %s %d}", i,
				f.Name, f.ContentType, f.SessionID, f.Size, w.name, w.contentType, sess.ID, len(w.data))
		}
		if !kiln.ValidID(f.ID) || ids[f.ID] {
			t.Errorf("file %s has id %q, want a new kiln id", f.Name, f.ID)
		}
		ids[f.ID] = true
		_, data, err := e.svc.File(t.Context(), alice, sess.ID, f.ID)
		if err != nil || string(data) != w.data {
			t.Errorf("stored %s = %q, %v; want %q", f.Name, data, err, w.data)
		}
	}
	if _, _, err := e.svc.File(t.Context(), alice, sess.ID, old.ID); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Errorf("the replaced file: error = %v, want not_found", err)
	}
	got := e.storedNames(t, sess.ID)
	slices.Sort(got)
	if want := []string{"escape.html", "keep.txt", "plot.png", "report.csv", "sub/data.json"}; !slices.Equal(got, want) {
		t.Errorf("session files = %q, want %q", got, want)
	}
	if res.Stderr != "warning\n" || res.Truncated {
		t.Errorf("stderr, truncated = %q, %v; want %q, false", res.Stderr, res.Truncated, "warning\n")
	}
}

func TestExecOutputsOverTheLimits(t *testing.T) {
	tests := []struct {
		name        string
		limit       int
		maxFile     int64 // the store's own size limit; 0 for none
		existing    []string
		outputs     []string
		wantSaved   []string
		wantDropped []string
		wantStored  []string
	}{
		{
			name:       "all fit",
			limit:      3,
			existing:   []string{"a.txt"},
			outputs:    []string{"b.txt", "c.txt"},
			wantSaved:  []string{"b.txt", "c.txt"},
			wantStored: []string{"a.txt", "b.txt", "c.txt"},
		},
		{
			name:        "new names past the limit are dropped",
			limit:       3,
			existing:    []string{"a.txt", "b.txt"},
			outputs:     []string{"c.txt", "d.txt", "e.txt"},
			wantSaved:   []string{"c.txt"},
			wantDropped: []string{"d.txt", "e.txt"},
			wantStored:  []string{"a.txt", "b.txt", "c.txt"},
		},
		{
			name:        "a replacement fits in a full session",
			limit:       2,
			existing:    []string{"a.txt", "b.txt"},
			outputs:     []string{"new.txt", "b.txt"},
			wantSaved:   []string{"b.txt"},
			wantDropped: []string{"new.txt"},
			wantStored:  []string{"a.txt", "b.txt"},
		},
		{
			name:        "a file over the store's size limit is dropped",
			limit:       5,
			maxFile:     4,
			outputs:     []string{"small.txt", "big.txt"},
			wantSaved:   []string{"small.txt"},
			wantDropped: []string{"big.txt"},
			wantStored:  []string{"small.txt"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Limits{MaxFileBytes: 1 << 10, MaxFilesPerSession: tt.limit})
			e.st.maxFile = tt.maxFile
			sess := e.session(t, alice, "")
			for _, name := range tt.existing {
				e.file(t, sess.ID, name, "old")
			}
			const stderr = "Traceback...\n"
			e.run.result.Stderr = stderr
			for _, name := range tt.outputs {
				data := "new"
				if strings.HasPrefix(name, "big") {
					data = "far too big"
				}
				e.run.result.Files = append(e.run.result.Files, protocol.File{Path: name, Content: []byte(data)})
			}
			req := execReq()
			req.SessionID = sess.ID

			res, err := e.svc.Exec(t.Context(), alice, req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			var saved []string
			for _, f := range res.Files {
				saved = append(saved, f.Name)
			}
			if !slices.Equal(saved, tt.wantSaved) {
				t.Errorf("saved = %q, want %q", saved, tt.wantSaved)
			}
			stored := e.storedNames(t, sess.ID)
			slices.Sort(stored)
			if !slices.Equal(stored, tt.wantStored) {
				t.Errorf("stored = %q, want %q", stored, tt.wantStored)
			}
			if len(tt.wantDropped) == 0 {
				if res.Stderr != stderr || res.Truncated {
					t.Errorf("stderr, truncated = %q, %v; want %q, false", res.Stderr, res.Truncated, stderr)
				}
				return
			}
			if !res.Truncated {
				t.Errorf("truncated = false, want true")
			}
			if !strings.HasPrefix(res.Stderr, stderr) {
				t.Errorf("stderr = %q, want it to start with the run's %q", res.Stderr, stderr)
			}
			if list := strings.Join(tt.wantDropped, ", "); !strings.Contains(res.Stderr, list) {
				t.Errorf("stderr = %q, want it to name %q", res.Stderr, list)
			}
			for _, name := range tt.wantSaved {
				if strings.Contains(res.Stderr[len(stderr):], name) {
					t.Errorf("stderr = %q names %q, which was kept", res.Stderr, name)
				}
			}
		})
	}
}

// Two outputs whose names clean to the same one: the second replaces the first, and
// the result names only files that still exist.
func TestExecOutputsWithOneCleanName(t *testing.T) {
	e := newEnv(t, testLimits)
	sess := e.session(t, alice, "")
	e.run.result.Files = []protocol.File{
		{Path: "x.txt", Content: []byte("first")},
		{Path: "../x.txt", Content: []byte("second")},
	}
	req := execReq()
	req.SessionID = sess.ID

	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got, want := e.storedNames(t, sess.ID), []string{"x.txt"}; !slices.Equal(got, want) {
		t.Errorf("stored = %q, want %q", got, want)
	}
	if len(res.Files) != 1 {
		t.Fatalf("result has %d files, want 1", len(res.Files))
	}
	_, data, err := e.svc.File(t.Context(), alice, sess.ID, res.Files[0].ID)
	if err != nil || string(data) != "second" {
		t.Errorf("File(%s) = %q, %v; want %q", res.Files[0].ID, data, err, "second")
	}
}
