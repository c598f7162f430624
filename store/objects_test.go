package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/objstore"
	"github.com/kilnsh/kiln/store"
	"github.com/kilnsh/kiln/store/storetest"
	"github.com/kilnsh/kiln/test/kilntest"
)

// objectStore is a Redis store whose bytes live in a bucket of a versitygw the test
// started.
type objectStore struct {
	*store.Redis
	bucket *objstore.Bucket
	s3     *kilntest.S3
}

func openObjectStore(t *testing.T, redisURL string, s3 *kilntest.S3, bucket string) objectStore {
	t.Helper()
	b, err := objstore.Open(t.Context(), objstore.Config{Endpoint: s3.Endpoint, Bucket: bucket,
		Region: "us-east-1", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	r := openRedis(t, redisURL, newPrefix(), time.Hour, 8<<20)
	r.WithObjects(b, nil)
	return objectStore{Redis: r, bucket: b, s3: s3}
}

// The store's whole contract holds with the bytes in a bucket.
func TestRedisWithObjects(t *testing.T) {
	url, s3 := kilntest.StartRedis(t), kilntest.StartS3(t)
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		return openObjectStore(t, url, s3, fmt.Sprintf("contract-%d", n))
	})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func objectKeys(t *testing.T, s objectStore, prefix string) []string {
	t.Helper()
	keys, err := s.bucket.List(t.Context(), prefix, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// Bytes go to the bucket, one object per state and file version; what is replaced or
// removed leaves the bucket; what nothing refers to is swept.
func TestObjectsFollowTheStore(t *testing.T) {
	s := openObjectStore(t, kilntest.StartRedis(t), kilntest.StartS3(t), "follow")
	ctx := t.Context()
	sess := &store.Session{ID: kiln.NewID(), Owner: "o"}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	// A file past 64 KiB and a state blob, as real sessions have.
	data := randomBytes(300 << 10)
	f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "frame.parquet"}
	if err := s.PutFile(ctx, f, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if f.Size != int64(len(data)) {
		t.Errorf("size %d, want %d", f.Size, len(data))
	}
	_, got, err := s.File(ctx, sess.ID, f.ID)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file read back: %d bytes, err %v", len(got), err)
	}
	// Opened, the bytes stream from the bucket.
	info, rc, err := s.OpenFile(ctx, sess.ID, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(streamed, data) || info.Size != int64(len(data)) {
		t.Fatalf("file opened: %d bytes (size %d), err %v", len(streamed), info.Size, err)
	}
	if _, ok := rc.(interface{ Len() int }); ok {
		t.Error("the opened file is a buffer in memory, not a stream from the bucket")
	}
	files := objectKeys(t, s, "files/"+sess.ID+"/"+f.ID+"/")
	if len(files) != 1 {
		t.Fatalf("objects of the file: %v, want one", files)
	}
	blob := append([]byte{0x04, 0x22, 0x4d, 0x18}, randomBytes(100<<10)...)
	if err := s.PutState(ctx, sess.ID, blob); err != nil {
		t.Fatal(err)
	}
	if got, err := s.State(ctx, sess.ID); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("state read back: %d bytes, err %v", len(got), err)
	}
	if info, _ := s.Session(ctx, sess.ID); info.StateSize != int64(len(blob)) {
		t.Errorf("state size %d, want %d", info.StateSize, len(blob))
	}
	if keys := objectKeys(t, s, "state/"+sess.ID+"/"); len(keys) != 1 {
		t.Fatalf("objects of the state: %v", keys)
	}

	// Replaced: the new version is read, the old object is gone.
	data2 := randomBytes(70 << 10)
	if err := s.PutFile(ctx, &store.File{ID: f.ID, SessionID: sess.ID, Name: "frame.parquet"}, bytes.NewReader(data2), int64(len(data2))); err != nil {
		t.Fatal(err)
	}
	if _, got, _ := s.File(ctx, sess.ID, f.ID); !bytes.Equal(got, data2) {
		t.Error("the replaced file reads back its old bytes")
	}
	if keys := objectKeys(t, s, "files/"+sess.ID+"/"+f.ID+"/"); len(keys) != 1 || keys[0] == files[0] {
		t.Errorf("objects after the replacement: %v (before %v), want only a new one", keys, files)
	}
	blob2 := append([]byte{0x04, 0x22, 0x4d, 0x18}, randomBytes(1000)...)
	if err := s.PutState(ctx, sess.ID, blob2); err != nil {
		t.Fatal(err)
	}
	if keys := objectKeys(t, s, "state/"+sess.ID+"/"); len(keys) != 1 || !strings.HasSuffix(keys[0], store.SHA256Hex(blob2)) {
		t.Errorf("state objects after the replacement: %v", keys)
	}

	// An object nothing refers to (a crash between upload and reference) is swept;
	// the referenced ones stay.
	orphan := "files/" + sess.ID + "/" + kiln.NewID() + "/" + kiln.NewID()
	if err := s.bucket.Put(ctx, orphan, strings.NewReader("left behind"), 11); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepObjects(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Errorf("sweep removed %d objects (err %v), want the orphan alone", n, err)
	}
	if _, got, err := s.File(ctx, sess.ID, f.ID); err != nil || !bytes.Equal(got, data2) {
		t.Errorf("the sweep took a referenced file: %v", err)
	}

	// Removed with the session: nothing of it stays in the bucket.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if keys := append(objectKeys(t, s, "files/"+sess.ID), objectKeys(t, s, "state/"+sess.ID)...); len(keys) != 0 {
		t.Errorf("objects left after the session's removal: %v", keys)
	}
}

// The object store restarts while files are written and read: a write that was
// answered is read back whole, a failure is an error (never torn or stale bytes), and
// once the server is back every call works.
func TestObjectStoreRestartsMidTraffic(t *testing.T) {
	s3 := kilntest.StartS3(t)
	s := openObjectStore(t, kilntest.StartRedis(t), s3, "restarts")
	ctx := t.Context()
	sess := &store.Session{ID: kiln.NewID(), Owner: "o"}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		written = map[string][]byte{} // answered writes, by file id
		failed  int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := kiln.NewID()
				data := randomBytes(20<<10 + i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := s.PutFile(cctx, &store.File{ID: id, SessionID: sess.ID, Name: fmt.Sprintf("w%d-%d.bin", w, i)}, bytes.NewReader(data), int64(len(data)))
				cancel()
				mu.Lock()
				if err == nil {
					written[id] = data
				} else {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if err := s3.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d writes answered, %d failed while the server restarted", len(written), failed)
	if len(written) == 0 {
		t.Fatal("no write was answered")
	}
	for id, data := range written {
		_, got, err := s.File(ctx, sess.ID, id)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("file %s, answered before or after the restart: %d bytes back (want %d), err %v", id, len(got), len(data), err)
		}
	}
	// A reference whose object is gone is an error that says so, not empty bytes.
	lost := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "lost.bin"}
	if err := s.PutFile(ctx, lost, strings.NewReader("soon gone"), 9); err != nil {
		t.Fatal(err)
	}
	keys := objectKeys(t, s, "files/"+sess.ID+"/"+lost.ID+"/")
	if len(keys) != 1 {
		t.Fatalf("objects of the lost file: %v", keys)
	}
	if err := s.bucket.Delete(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.File(ctx, sess.ID, lost.ID); err == nil || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a file whose object is gone: err %v, want an error saying the object is missing", err)
	}
	if _, _, err := s.OpenFile(ctx, sess.ID, lost.ID); err == nil || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a file whose object is gone, opened: err %v, want an error saying the object is missing", err)
	}
}
