package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kilnsh/kiln"
)

// Objects keeps bytes by key outside the store's own backend: an S3-compatible bucket
// (package objstore). With Objects, the Redis store keeps only metadata and, in place
// of each state blob and file's bytes, a reference to its object.
type Objects interface {
	// Put stores size bytes read from content under key, replacing what was there.
	Put(ctx context.Context, key string, content io.Reader, size int64) error
	// Get returns what is stored under key; ErrNotFound (wrapped) when nothing is.
	Get(ctx context.Context, key string) ([]byte, error)
	// Open returns a reader of what is stored under key, which streams it; ErrNotFound
	// (wrapped) when nothing is.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes key; a key that does not exist is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the keys under prefix last written before olderThan.
	List(ctx context.Context, prefix string, olderThan time.Time) ([]string, error)
}

// Object keys: a state blob under the session and its hash, a file's bytes under the
// session, the file and an id of that version, so that a reader never sees half of a
// replacement: the reference in Redis moves to a new object in one step.
//
//	state/<session id>/<sha256>
//	files/<session id>/<file id>/<version id>
const (
	stateObjects = "state/"
	fileObjects  = "files/"
)

// objectRef marks a value in Redis that refers to an object. A state blob is an LZ4
// frame and can never start with it; a file kept in Redis before objects were turned on
// might, and is then taken for a reference, which is followed only inside that same
// file's own keys (see deref).
var objectRef = []byte("\x00kiln-object:v1\x00")

// WithObjects makes r keep state blobs and file bytes in objs, with only references in
// Redis; log hears the removals of objects that failed (they are retried by the sweep).
// Call it before r is used.
func (r *Redis) WithObjects(objs Objects, log *slog.Logger) *Redis {
	r.objects, r.log = objs, log
	return r
}

func refTo(key string) []byte { return append(append([]byte(nil), objectRef...), key...) }

// deref returns the bytes a stored value stands for: the value itself, or the object it
// refers to, which must lie under prefix (the session's state, or the one file's keys).
func (r *Redis) deref(ctx context.Context, v []byte, prefix string) ([]byte, error) {
	key, err := r.objectOf(v, prefix)
	if key == "" || err != nil {
		return v, err
	}
	b, err := r.objects.Get(ctx, key)
	return b, missing(key, err)
}

// open is deref as a reader: the object's bytes stream from the bucket.
func (r *Redis) open(ctx context.Context, v []byte, prefix string) (io.ReadCloser, error) {
	key, err := r.objectOf(v, prefix)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return io.NopCloser(bytes.NewReader(v)), nil
	}
	rc, err := r.objects.Open(ctx, key)
	return rc, missing(key, err)
}

// objectOf returns the key of the object a stored value refers to, "" for a value that
// is the bytes themselves, and an error for a reference outside prefix.
func (r *Redis) objectOf(v []byte, prefix string) (string, error) {
	key, ok := refKey(v)
	if !ok || r.objects == nil {
		return "", nil
	}
	if !strings.HasPrefix(key, prefix) {
		return "", fmt.Errorf("a reference to object %q outside %q", key, prefix)
	}
	return key, nil
}

// missing says of an object the bucket does not have that it is missing: an error of
// kiln's, not the caller's ErrNotFound.
func missing(key string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("object %s is missing from the bucket", key)
	}
	return err
}

func refKey(v []byte) (string, bool) {
	if !bytes.HasPrefix(v, objectRef) {
		return "", false
	}
	return string(v[len(objectRef):]), true
}

// upload puts size bytes of content in the bucket under key and returns the reference
// to keep in Redis, streaming them; without objects, it returns the bytes themselves.
func (r *Redis) upload(ctx context.Context, key string, content io.Reader, size int64) ([]byte, error) {
	content = exactly(content, size)
	if r.objects == nil {
		b := make([]byte, size)
		if _, err := io.ReadFull(content, b); err != nil {
			return nil, err
		}
		if _, err := content.Read(make([]byte, 1)); err != io.EOF {
			return nil, err // more than size (exactly says so)
		}
		return b, nil
	}
	if err := r.objects.Put(ctx, key, content, size); err != nil {
		return nil, err
	}
	return refTo(key), nil
}

// drop removes the objects that the given old values referred to, once nothing refers
// to them; a failure is logged and left to the sweep.
func (r *Redis) drop(ctx context.Context, old ...[]byte) {
	for _, v := range old {
		if key, ok := refKey(v); ok {
			r.removeObject(ctx, key)
		}
	}
}

// removeObject deletes an object nothing refers to any more; a failure is logged and
// left to the sweep.
func (r *Redis) removeObject(ctx context.Context, key string) {
	if r.objects == nil {
		return
	}
	if err := r.objects.Delete(context.WithoutCancel(ctx), key); err != nil && r.log != nil {
		r.log.Warn("removing an object failed; the sweep retries", "key", key, "err", err)
	}
}

// sweepObjects removes the objects that nothing in Redis refers to and that were
// written before olderThan: those of sessions removed or expired, those replaced while
// their removal failed, and those a crash left between the upload and the reference.
func (r *Redis) sweepObjects(ctx context.Context, olderThan time.Time) (int, error) {
	removed := 0
	for _, prefix := range []string{stateObjects, fileObjects} {
		keys, err := r.objects.List(ctx, prefix, olderThan)
		if err != nil {
			return removed, err
		}
		refs := map[string]map[string]bool{} // session → its references
		for _, key := range keys {
			sid, _, _ := strings.Cut(strings.TrimPrefix(key, prefix), "/")
			if _, seen := refs[sid]; !seen && kiln.ValidID(sid) {
				if refs[sid], err = r.references(ctx, sid); err != nil {
					return removed, err
				}
			}
			if refs[sid][key] {
				continue
			}
			if err := r.objects.Delete(ctx, key); err != nil {
				return removed, err
			}
			removed++
		}
	}
	return removed, nil
}

// references returns the object keys that a session's state and files refer to.
func (r *Redis) references(ctx context.Context, sid string) (map[string]bool, error) {
	keys := r.keys(sid)
	var state *redis.StringCmd
	var data *redis.StringSliceCmd
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		state = p.Get(ctx, keys[1])
		data = p.HVals(ctx, keys[3])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("references of session %s: %w", sid, err)
	}
	refs := map[string]bool{}
	if k, ok := refKey([]byte(state.Val())); ok {
		refs[k] = true
	}
	for _, v := range data.Val() {
		if k, ok := refKey([]byte(v)); ok {
			refs[k] = true
		}
	}
	return refs, nil
}

// objectSweeps paces sweepObjects: listing a bucket is slower than Redis's expiry, so
// it runs at most once per objectSweepEvery, over objects older than objectGrace (an
// upload's reference is written right after it).
const (
	objectSweepEvery = 10 * time.Minute
	objectGrace      = 10 * time.Minute
)

type objectSweeps struct {
	mu   sync.Mutex
	last time.Time
}

// due reports whether a sweep of the objects is due at now, and records it.
func (o *objectSweeps) due(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Sub(o.last) < objectSweepEvery {
		return false
	}
	o.last = now
	return true
}
