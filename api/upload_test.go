package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
)

// A file part's filename keeps its directories (LibreChat uploads skill files as
// pptx/editing.md); what of them is kept is the session layer's to decide.
func TestPartFilenameKeepsDirectories(t *testing.T) {
	for _, name := range []string{"pptx/editing.md", "a/b/c.csv", "plain.txt", "../up.txt"} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte("x"))
		mw.Close()
		part, err := multipart.NewReader(&body, mw.Boundary()).NextPart()
		if err != nil {
			t.Fatal(err)
		}
		if got := partFilename(part); got != name {
			t.Errorf("partFilename = %q, want %q", got, name)
		}
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// uploadRequest is a multipart upload of the given files, by name.
func uploadRequest(t *testing.T, files ...[2]string) *http.Request {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, f := range files {
		fw, err := mw.CreateFormFile("files", f[0])
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(f[1]))
	}
	mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/upload", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	return r
}

// An uploaded file past spoolPast waits for the store in the spool directory, unlinked
// at once, rather than in memory; a small one stays in memory. Both read back whole, and
// closing the form frees the spooled copy, as does an upload refused midway.
func TestUploadSpoolsLargeFiles(t *testing.T) {
	var csv strings.Builder
	csv.WriteString("date,store,sku,units,revenue\n")
	for i := 0; csv.Len() < 2<<20; i++ {
		fmt.Fprintf(&csv, "2026-%02d-%02d,%d,SKU-%05d,%d,%d.%02d\n", i%12+1, i%28+1, i%40, i%9973, i%17, i%5000, i%100)
	}
	dir := filepath.Join(t.TempDir(), "spool") // made on first use
	s := &Server{spoolDir: dir, maxFile: 4 << 20, maxUpload: 16 << 20, maxFiles: 10}
	before := openFDs(t)

	form, err := s.readUpload(httptest.NewRecorder(), uploadRequest(t, [2]string{"sales.csv", csv.String()}, [2]string{"notes.txt", "small"}), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(form.uploads) != 2 || len(form.spooled) != 1 {
		t.Fatalf("%d uploads, %d spooled; want 2 uploads, the CSV spooled", len(form.uploads), len(form.spooled))
	}
	if _, ok := form.uploads[0].Content.(*os.File); !ok {
		t.Errorf("the %d-byte CSV is held as %T, want a spooled *os.File", csv.Len(), form.uploads[0].Content)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("spool directory holds %d entries (%v), want none: a spooled file is unlinked at once", len(left), err)
	}
	for i, want := range []string{csv.String(), "small"} {
		got, err := io.ReadAll(form.uploads[i].Content)
		if err != nil || form.uploads[i].Size != int64(len(want)) || string(got) != want {
			t.Errorf("upload %d: size %d, %d bytes read (%v); want %d", i, form.uploads[i].Size, len(got), err, len(want))
		}
	}
	form.close()
	if after := openFDs(t); after != before {
		t.Errorf("%d file descriptors open after the form was closed, want %d as before", after, before)
	}

	// Refused after a spooled file: the file over the limit, or too many files.
	s.maxFile = 3 << 20
	for name, files := range map[string][][2]string{
		"a file over the limit": {{"sales.csv", csv.String()}, {"big.csv", csv.String() + csv.String()}},
		"too many files":        slices.Repeat([][2]string{{"sales.csv", csv.String()}}, 11),
	} {
		if _, err := s.readUpload(httptest.NewRecorder(), uploadRequest(t, files...), false); kiln.ErrorCode(err) != kiln.CodeTooLarge {
			t.Errorf("%s: %v, want too large", name, err)
		}
		if after := openFDs(t); after != before {
			t.Errorf("%s: %d file descriptors open after the refusal, want %d as before", name, after, before)
		}
	}

	// A spool directory kiln cannot write is kiln's fault, not the client's.
	s.spoolDir = filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(s.spoolDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.readUpload(httptest.NewRecorder(), uploadRequest(t, [2]string{"sales.csv", csv.String()}), false)
	if pe := (*fs.PathError)(nil); !errors.As(err, &pe) {
		t.Errorf("an unusable spool directory: %v, want the path error (a 500)", err)
	}
}
