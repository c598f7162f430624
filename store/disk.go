package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
)

// On-disk layout, under the directory given to OpenDisk:
//
//	sessions/<id>/session.json         the session (sessionRecord)
//	sessions/<id>/state-<sha256>.bin   its state blob, named by content
//	sessions/<id>/files/<file id>      a JSON fileRecord line, then the file's bytes
//
// Names starting with "." are work in progress: temporary files and directories being
// written, and deleted sessions being removed. OpenDisk removes them.
const (
	sessionsDir = "sessions"
	sessionFile = "session.json"
	filesDir    = "files"
	tmpPrefix   = ".tmp-"
	delPrefix   = ".del-"
)

// lockStripes is how many locks the sessions are spread over: writers of one session
// wait for each other, writers of different sessions rarely do.
const lockStripes = 64

// Disk is a Store that keeps everything in files under one directory. A Disk opened
// on the same directory after a restart or a crash sees everything written before.
//
// Each session is guarded by one of a fixed set of locks; an in-memory index of
// sessions, rebuilt by OpenDisk, serves LatestSession and Sweep.
type Disk struct {
	root  string // the sessions directory
	ttl   time.Duration
	locks [lockStripes]sync.RWMutex

	mu      sync.Mutex // guards index, byKey and byOwner
	index   map[string]indexEntry
	byKey   map[ownerEntity]map[string]struct{}
	byOwner map[string]map[string]struct{}
}

type ownerEntity struct{ owner, entity string }

type indexEntry struct {
	key      ownerEntity
	created  time.Time
	lastUsed time.Time
}

var _ Store = (*Disk)(nil)

// OpenDisk opens the store kept in dir, creating dir if needed. Sessions expire ttl
// after their last use. Leftovers of an interrupted write are removed.
func OpenDisk(dir string, ttl time.Duration) (*Disk, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("open disk store: ttl %v is not positive", ttl)
	}
	d := &Disk{
		root:    filepath.Join(dir, sessionsDir),
		ttl:     ttl,
		index:   make(map[string]indexEntry),
		byKey:   make(map[ownerEntity]map[string]struct{}),
		byOwner: make(map[string]map[string]struct{}),
	}
	if err := os.MkdirAll(d.root, 0o700); err != nil {
		return nil, fmt.Errorf("open disk store: %w", err)
	}
	if err := d.load(); err != nil {
		return nil, fmt.Errorf("open disk store: %w", err)
	}
	return d, nil
}

// load removes leftovers of interrupted writes and indexes every session.
func (d *Disk) load() error {
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			if err := os.RemoveAll(filepath.Join(d.root, name)); err != nil {
				return fmt.Errorf("remove leftover: %w", err)
			}
			continue
		}
		if !e.IsDir() || !kiln.ValidID(name) {
			continue // not ours
		}
		rec, err := d.readSession(name)
		if errors.Is(err, ErrNotFound) {
			continue // not a session: CreateSession renames complete ones into place
		} else if err != nil {
			return fmt.Errorf("session %s: %w", name, err)
		}
		if err := d.cleanSession(rec); err != nil {
			return fmt.Errorf("session %s: %w", name, err)
		}
		d.indexPut(rec)
	}
	return nil
}

// cleanSession removes temporary files and state blobs the session no longer uses.
func (d *Disk) cleanSession(rec *sessionRecord) error {
	sdir := d.sessionDir(rec.ID)
	keep := ""
	if rec.StateSHA256 != "" {
		keep = stateName(rec.StateSHA256)
	}
	var errs []error
	for _, dir := range []string{sdir, filepath.Join(sdir, filesDir)} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			name := e.Name()
			stale := strings.HasPrefix(name, tmpPrefix) ||
				dir == sdir && strings.HasPrefix(name, "state-") && name != keep
			if stale {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
			}
		}
	}
	return errors.Join(errs...)
}

// Close does nothing: a Disk holds no open files between calls. It is idempotent.
func (d *Disk) Close() error { return nil }

func (d *Disk) lock(id string) *sync.RWMutex {
	h := fnv.New32a()
	h.Write([]byte(id))
	return &d.locks[h.Sum32()%lockStripes]
}

func (d *Disk) sessionDir(id string) string { return filepath.Join(d.root, id) }

// CreateSession implements Store. The session's directory is built under a temporary
// name and renamed into place, so a session is either complete or absent.
func (d *Disk) CreateSession(ctx context.Context, s *Session) error {
	if !validIDs(s.ID) {
		return ErrNotFound
	}
	now := time.Now()
	rec := &sessionRecord{
		ID:         s.ID,
		Owner:      []byte(s.Owner),
		EntityID:   []byte(s.EntityID),
		Creator:    []byte(s.Creator),
		CreatedAt:  normTime(s.CreatedAt, now),
		LastUsedAt: normTime(s.LastUsedAt, now),
	}
	l := d.lock(s.ID)
	l.Lock()
	defer l.Unlock()

	final := d.sessionDir(s.ID)
	if _, err := os.Lstat(final); err == nil {
		return ErrExists
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("create session: %w", err)
	}
	tmp, err := os.MkdirTemp(d.root, tmpPrefix)
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	if err := d.buildSession(tmp, rec, final); err != nil {
		return errors.Join(fmt.Errorf("create session: %w", err), os.RemoveAll(tmp))
	}
	d.indexPut(rec)
	s.CreatedAt, s.LastUsedAt, s.ExpiresAt = rec.CreatedAt, rec.LastUsedAt, rec.LastUsedAt.Add(d.ttl)
	return nil
}

func (d *Disk) buildSession(tmp string, rec *sessionRecord, final string) error {
	if err := os.Mkdir(filepath.Join(tmp, filesDir), 0o700); err != nil {
		return err
	}
	if err := writeSession(tmp, rec); err != nil { // syncs tmp, files/ included
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(d.root)
}

// Session implements Store.
func (d *Disk) Session(ctx context.Context, id string) (*Session, error) {
	if !validIDs(id) {
		return nil, ErrNotFound
	}
	l := d.lock(id)
	l.RLock()
	defer l.RUnlock()
	rec, err := d.readSession(id)
	if err != nil {
		return nil, err
	}
	return rec.session(d.ttl), nil
}

// LatestSession implements Store.
func (d *Disk) LatestSession(ctx context.Context, owner, entityID string) (*Session, error) {
	d.mu.Lock()
	var best string
	var bestUsed time.Time
	for id := range d.byKey[ownerEntity{owner, entityID}] {
		used := d.index[id].lastUsed
		if best == "" || used.After(bestUsed) || used.Equal(bestUsed) && id > best {
			best, bestUsed = id, used
		}
	}
	d.mu.Unlock()
	if best == "" {
		return nil, ErrNotFound
	}
	return d.Session(ctx, best)
}

// OwnerSessions implements Store.
func (d *Disk) OwnerSessions(ctx context.Context, owner string, offset, limit int) ([]*Session, error) {
	type entry struct {
		id      string
		created time.Time
	}
	d.mu.Lock()
	all := make([]entry, 0, len(d.byOwner[owner]))
	for id := range d.byOwner[owner] {
		all = append(all, entry{id, d.index[id].created})
	}
	d.mu.Unlock()
	slices.SortFunc(all, func(a, b entry) int {
		return cmp.Or(b.created.Compare(a.created), cmp.Compare(b.id, a.id))
	})
	out := []*Session{}
	for _, e := range all[min(max(offset, 0), len(all)):] {
		if len(out) >= limit {
			break
		}
		s, err := d.Session(ctx, e.id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// TouchSession implements Store.
func (d *Disk) TouchSession(ctx context.Context, id string, at time.Time) error {
	if !validIDs(id) {
		return ErrNotFound
	}
	l := d.lock(id)
	l.Lock()
	defer l.Unlock()
	rec, err := d.readSession(id)
	if err != nil {
		return err
	}
	at = normTime(at, time.Now())
	if !at.After(rec.LastUsedAt) {
		return nil
	}
	rec.LastUsedAt = at
	if err := writeSession(d.sessionDir(id), rec); err != nil {
		return fmt.Errorf("touch session: %w", err)
	}
	d.indexPut(rec)
	return nil
}

// DeleteSession implements Store.
func (d *Disk) DeleteSession(ctx context.Context, id string) error {
	if !validIDs(id) {
		return ErrNotFound
	}
	l := d.lock(id)
	l.Lock()
	defer l.Unlock()
	return d.removeSession(id)
}

// removeSession renames the session's directory out of the way, which removes the
// session at once, then deletes it. The caller holds the session's lock.
func (d *Disk) removeSession(id string) error {
	trash := filepath.Join(d.root, delPrefix+kiln.NewID())
	if err := os.Rename(d.sessionDir(id), trash); errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	} else if err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	d.indexDelete(id)
	if err := errors.Join(syncDir(d.root), os.RemoveAll(trash)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// Sweep implements Store.
func (d *Disk) Sweep(ctx context.Context, now time.Time) (int, error) {
	d.mu.Lock()
	var due []string
	for id, e := range d.index {
		if d.expired(e, now) {
			due = append(due, id)
		}
	}
	d.mu.Unlock()

	n := 0
	for _, id := range due {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		removed, err := d.sweepOne(id, now)
		if err != nil {
			return n, fmt.Errorf("sweep: %w", err)
		}
		if removed {
			n++
		}
	}
	return n, nil
}

// sweepOne removes the session if it is still expired once its lock is held.
func (d *Disk) sweepOne(id string, now time.Time) (bool, error) {
	l := d.lock(id)
	l.Lock()
	defer l.Unlock()
	d.mu.Lock()
	e, ok := d.index[id]
	d.mu.Unlock()
	if !ok || !d.expired(e, now) {
		return false, nil
	}
	if err := d.removeSession(id); errors.Is(err, ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}

func (d *Disk) expired(e indexEntry, now time.Time) bool {
	return !now.Before(e.lastUsed.Add(d.ttl))
}

func (d *Disk) indexPut(rec *sessionRecord) {
	key := ownerEntity{string(rec.Owner), string(rec.EntityID)}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.index[rec.ID] = indexEntry{key: key, created: rec.CreatedAt, lastUsed: rec.LastUsedAt}
	if d.byKey[key] == nil {
		d.byKey[key] = make(map[string]struct{})
	}
	d.byKey[key][rec.ID] = struct{}{}
	if d.byOwner[key.owner] == nil {
		d.byOwner[key.owner] = make(map[string]struct{})
	}
	d.byOwner[key.owner][rec.ID] = struct{}{}
}

func (d *Disk) indexDelete(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.index[id]
	if !ok {
		return
	}
	delete(d.index, id)
	delete(d.byKey[e.key], id)
	if len(d.byKey[e.key]) == 0 {
		delete(d.byKey, e.key)
	}
	delete(d.byOwner[e.key.owner], id)
	if len(d.byOwner[e.key.owner]) == 0 {
		delete(d.byOwner, e.key.owner)
	}
}

// readSession reads the session's record; ErrNotFound when there is no session.
func (d *Disk) readSession(id string) (*sessionRecord, error) {
	b, err := os.ReadFile(filepath.Join(d.sessionDir(id), sessionFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	var rec sessionRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	return &rec, nil
}

func writeSession(dir string, rec *sessionRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeAtomic(dir, sessionFile, b)
}
