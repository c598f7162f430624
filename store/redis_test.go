package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
	"github.com/kilnsh/kiln/store/storetest"
	"github.com/kilnsh/kiln/test/kilntest"
)

var prefixes atomic.Int64

// newPrefix returns a key prefix no other test uses.
func newPrefix() string { return fmt.Sprintf("kiln:test%d:", prefixes.Add(1)) }

func openRedis(t *testing.T, url, prefix string, ttl time.Duration, maxFile int64) *store.Redis {
	t.Helper()
	r, err := store.OpenRedisPrefix(t.Context(), url, prefix, ttl, maxFile)
	if err != nil {
		t.Fatalf("OpenRedis: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRedis(t *testing.T) {
	url := kilntest.StartRedis(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return openRedis(t, url, newPrefix(), time.Hour, 1<<20)
	})
}

func TestOpenRedisErrors(t *testing.T) {
	url := kilntest.StartRedis(t)
	tests := []struct {
		name    string
		url     string
		ttl     time.Duration
		maxFile int64
	}{
		{"bad url", "http://" + strings.TrimPrefix(url, "redis://"), time.Hour, 1},
		{"nobody listening", "redis://127.0.0.1:" + kilntest.FreePort(t), time.Hour, 1},
		{"zero ttl", url, 0, 1},
		{"zero file limit", url, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r, err := store.OpenRedis(t.Context(), tt.url, tt.ttl, tt.maxFile); err == nil {
				r.Close()
				t.Errorf("OpenRedis succeeded, want an error")
			}
		})
	}
}

// TestRedisSharedBetweenProcesses has two stores on one server, as two kiln processes
// behind a load balancer would.
func TestRedisSharedBetweenProcesses(t *testing.T) {
	url := kilntest.StartRedis(t)
	ctx := t.Context()
	a, err := store.OpenRedis(ctx, url, time.Hour, 1<<20)
	if err != nil {
		t.Fatalf("OpenRedis: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	b := openRedis(t, url, "kiln:", time.Hour, 1<<20)

	t0 := time.Now().UTC().Truncate(time.Microsecond)
	sess := &store.Session{ID: kiln.NewID(), Owner: "key", EntityID: "asst", LastUsedAt: t0}
	if err := a.CreateSession(ctx, sess); err != nil {
		t.Fatalf("a.CreateSession: %v", err)
	}
	if err := b.PutState(ctx, sess.ID, []byte("from b")); err != nil {
		t.Fatalf("b.PutState: %v", err)
	}
	f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "out.csv"}
	if err := a.PutFile(ctx, f, strings.NewReader("from a"), 6); err != nil {
		t.Fatalf("a.PutFile: %v", err)
	}
	if err := b.TouchSession(ctx, sess.ID, t0.Add(time.Minute)); err != nil {
		t.Fatalf("b.TouchSession: %v", err)
	}

	got, err := a.LatestSession(ctx, "key", "asst")
	if err != nil || got.ID != sess.ID || !got.HasState || !got.LastUsedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a.LatestSession = %+v, %v; want %s touched by b, with b's state", got, err, sess.ID)
	}
	if state, err := a.State(ctx, sess.ID); err != nil || string(state) != "from b" {
		t.Errorf("a.State = %q, %v; want %q", state, err, "from b")
	}
	if _, data, err := b.File(ctx, sess.ID, f.ID); err != nil || string(data) != "from a" {
		t.Errorf("b.File = %q, %v; want %q", data, err, "from a")
	}
	if n, err := b.Sweep(ctx, t0.Add(time.Minute+time.Hour)); err != nil || n != 1 {
		t.Fatalf("b.Sweep = %d, %v; want 1, nil", n, err)
	}
	if _, err := a.Session(ctx, sess.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a.Session after b swept it: %v, want ErrNotFound", err)
	}
}

func TestRedisFileLimit(t *testing.T) {
	r := openRedis(t, kilntest.StartRedis(t), newPrefix(), time.Hour, 10)
	ctx := t.Context()
	sess := &store.Session{ID: kiln.NewID()}
	if err := r.CreateSession(ctx, sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	tests := []struct {
		size    int
		wantErr error
	}{
		{0, nil},
		{10, nil},
		{11, store.ErrTooLarge},
		{1 << 20, store.ErrTooLarge},
	}
	for _, tt := range tests {
		f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "f"}
		err := r.PutFile(ctx, f, bytes.NewReader(make([]byte, tt.size)), int64(tt.size))
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("PutFile of %d bytes: %v, want %v", tt.size, err, tt.wantErr)
		}
		_, _, getErr := r.File(ctx, sess.ID, f.ID)
		if stored := getErr == nil; stored != (tt.wantErr == nil) {
			t.Errorf("file of %d bytes stored = %v, want %v", tt.size, stored, tt.wantErr == nil)
		}
	}
}

// TestRedisExpiresKeys checks that Redis drops an abandoned session by itself, and that
// owner strings never appear in key names.
func TestRedisExpiresKeys(t *testing.T) {
	url := kilntest.StartRedis(t)
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	r := openRedis(t, url, newPrefix(), ttl, 1<<20)
	sess := &store.Session{ID: kiln.NewID(), Owner: "secret-api-key", EntityID: "asst"}
	if err := r.CreateSession(ctx, sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if err := r.PutState(ctx, sess.ID, []byte("state")); err != nil {
		t.Fatalf("PutState: %v", err)
	}
	if err := r.PutFile(ctx, &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: "f"}, strings.NewReader("x"), 1); err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	ttls, err := r.KeyTTLs(ctx)
	if err != nil {
		t.Fatalf("KeyTTLs: %v", err)
	}
	if len(ttls) != 7 { // meta, state, files, data, latest, owner, expiry
		t.Errorf("keys = %v, want 7", ttls)
	}
	for k, d := range ttls {
		if strings.Contains(k, sess.Owner) {
			t.Errorf("key %q holds the owner", k)
		}
		if strings.HasSuffix(k, ":expiry") {
			continue // the sweep index lives on
		}
		if d <= 0 || d > ttl {
			t.Errorf("key %q has TTL %v, want (0, %v]", k, d, ttl)
		}
	}

	deadline := time.Now().Add(10 * time.Second)
	for len(ttls) > 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if ttls, err = r.KeyTTLs(ctx); err != nil {
			t.Fatalf("KeyTTLs: %v", err)
		}
	}
	if len(ttls) != 1 {
		t.Fatalf("keys left after the TTL: %v, want only the expiry index", ttls)
	}
	if _, err := r.Session(ctx, sess.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session after the TTL: %v, want ErrNotFound", err)
	}
	if n, err := r.Sweep(ctx, time.Now()); err != nil || n != 1 {
		t.Errorf("Sweep = %d, %v; want the 1 stale index entry cleared", n, err)
	}
	if ttls, _ = r.KeyTTLs(ctx); len(ttls) != 0 {
		t.Errorf("keys after Sweep: %v, want none", ttls)
	}
}
