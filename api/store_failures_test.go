package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/store"
)

// smallStore is a store whose files may be at most max bytes, as store.Redis refuses
// files over its own limit, and which hands files out as streams (as store.Redis does
// from a bucket) that break off after cut bytes when cut is set.
type smallStore struct {
	store.Store
	max int64
	cut int
}

func (s smallStore) PutFile(ctx context.Context, f *store.File, content io.Reader, size int64) error {
	if size > s.max {
		return fmt.Errorf("put file: %d bytes, limit %d: %w", size, s.max, store.ErrTooLarge)
	}
	return s.Store.PutFile(ctx, f, content, size)
}

func (s smallStore) OpenFile(ctx context.Context, sid, fid string) (*store.File, io.ReadCloser, error) {
	f, data, err := s.Store.File(ctx, sid, fid)
	if err != nil {
		return nil, nil, err
	}
	f.Size = int64(len(data))
	var body io.Reader = bytes.NewReader(data)
	if s.cut > 0 {
		body = io.MultiReader(bytes.NewReader(data[:s.cut]), iotest.ErrReader(errors.New("bucket: connection reset")))
	}
	return f, io.NopCloser(body), nil
}

// TestUploadStoreRefuses: a file the store refuses as too large, though within the
// API's limit, is one refused file of a batch, and refuses a single upload whole.
func TestUploadStoreRefuses(t *testing.T) {
	h := api.NewStoreHarness(t, api.HarnessConfig{}, func(st store.Store) store.Store { return smallStore{Store: st, max: 10} })
	ct, body := multipartBody(t, part{"file", "small.txt", "small"}, part{"file", "mid.txt", strings.Repeat("m", 20)})

	got := decode[batchAnswer](t, serve(t, h, "POST", "/upload/batch", ct, body, nil), http.StatusOK)
	if got.Message != "partial_success" || got.Succeeded != 1 || got.Failed != 1 || len(got.Files) != 2 {
		t.Fatalf("got %+v, want small.txt kept and mid.txt refused", got)
	}
	if f := got.Files[1]; f.Status != "error" || f.Filename != "mid.txt" || f.Error != `file "mid.txt" is over the store's size limit` || f.FileID != "" {
		t.Errorf("got %+v, want mid.txt refused as over the store's size limit", f)
	}

	checkError(t, serve(t, h, "POST", "/upload", ct, body, nil), http.StatusRequestEntityTooLarge, kiln.CodeTooLarge)
	list := decode[map[string][]any](t, serve(t, h, "GET", "/sessions", "", "", nil), http.StatusOK)
	if len(list["sessions"]) != 1 {
		t.Errorf("got %d sessions, want only the batch's: a refused upload keeps nothing", len(list["sessions"]))
	}
}

// TestDownloadCutShort: a file whose stream breaks off midway is answered short of its
// Content-Length, which the client sees, and the log says so.
func TestDownloadCutShort(t *testing.T) {
	var logs bytes.Buffer
	h := api.NewStoreHarness(t, api.HarnessConfig{Log: &logs}, func(st store.Store) store.Store { return smallStore{Store: st, max: 1 << 10, cut: 3} })
	sid, ids := upload(t, h, nil, "a.txt", "abcdef")
	rec := serve(t, h, "GET", "/download/"+sid+"/"+ids[0], "", "", nil)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Length") != "6" || rec.Body.String() != "abc" {
		t.Errorf("got %d, Content-Length %s, body %q; want 200, 6, and the 3 bytes that came", rec.Code, rec.Header().Get("Content-Length"), rec.Body)
	}
	if !strings.Contains(logs.String(), `"msg":"download cut short"`) || !strings.Contains(logs.String(), ids[0]) {
		t.Errorf("the log does not say the download of %s was cut short:\n%s", ids[0], logs.String())
	}
}
