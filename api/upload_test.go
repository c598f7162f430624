package api

import (
	"bytes"
	"mime/multipart"
	"testing"
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
