package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kilnsh/kiln"
)

// Redis keys, all under the prefix ("kiln:"):
//
//	s:<id>          hash: owner, entity, created, used, lk (its latest key), ssize, ssha, sat
//	s:<id>:state    the state blob
//	s:<id>:files    hash: file id → fileRecord JSON
//	s:<id>:data     hash: file id → the file's bytes
//	owner:<hash>    sorted set of the session ids of one owner, by creation;
//	                <hash> is a SHA-256 of the owner
//	latest:<hash>   sorted set of the session ids of one owner and entity, by last use;
//	                <hash> is a SHA-256 of the owner and entity, which may hold any bytes
//	expiry          sorted set of all session ids, by expiry time, for Sweep
//
// The replica directory (package replica) keeps its peer: and own: keys under the same
// prefix.
//
// Every key but expiry has a TTL, set to the store's TTL again by each write or touch,
// so Redis drops an abandoned session by itself. Times are Unix microseconds.
const defaultRedisPrefix = "kiln:"

// sweepBatch is how many sessions one sweep script removes; Redis runs scripts alone,
// so batches keep it responsive.
const sweepBatch = 100

var (
	scriptCreate      = redis.NewScript(luaCreate)
	scriptTouch       = redis.NewScript(luaTouch)
	scriptDelete      = redis.NewScript(luaDelete)
	scriptPutState    = redis.NewScript(luaPutState)
	scriptDeleteState = redis.NewScript(luaDeleteState)
	scriptPutFile     = redis.NewScript(luaPutFile)
	scriptDeleteFile  = redis.NewScript(luaDeleteFile)
	scriptSweep       = redis.NewScript(luaSweep)
)

// Redis is a Store kept in a Redis server, shared by every kiln process that uses the
// same server. File bytes are stored in Redis too, so files are limited in size.
type Redis struct {
	client  *redis.Client
	prefix  string
	ttl     time.Duration
	maxFile int64
	// objects, when set, holds state blobs and file bytes (objects.go); log hears
	// what goes wrong with them in the background.
	objects   Objects
	log       *slog.Logger
	objSweeps objectSweeps

	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*Redis)(nil)

// OpenRedis connects to the Redis server at redisURL (redis://[user:password@]host:port/db)
// and checks that it answers. Sessions expire ttl after their last use; files over
// maxFileBytes are refused with ErrTooLarge.
func OpenRedis(ctx context.Context, redisURL string, ttl time.Duration, maxFileBytes int64) (*Redis, error) {
	return openRedis(ctx, redisURL, defaultRedisPrefix, ttl, maxFileBytes)
}

func openRedis(ctx context.Context, redisURL, prefix string, ttl time.Duration, maxFileBytes int64) (*Redis, error) {
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("open redis store: ttl %v is under a millisecond", ttl)
	}
	if maxFileBytes <= 0 {
		return nil, fmt.Errorf("open redis store: file limit %d is not positive", maxFileBytes)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return nil, fmt.Errorf("open redis store: %w", err)
	}
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("open redis store: ping: %w", err), client.Close())
	}
	return &Redis{client: client, prefix: prefix, ttl: ttl, maxFile: maxFileBytes}, nil
}

// Client returns the store's Redis client and the prefix of its keys, for the replica
// directory (package replica), which shares the server, the connections and the
// prefix. The client stays the store's: Close closes it.
func (r *Redis) Client() (client *redis.Client, prefix string) { return r.client, r.prefix }

// Close closes the connections to Redis. It is idempotent.
func (r *Redis) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.client.Close() })
	return r.closeErr
}

// keys returns the session's keys in the order the scripts expect, with the expiry
// index last.
func (r *Redis) keys(id string) []string {
	meta := r.prefix + "s:" + id
	return []string{meta, meta + ":state", meta + ":files", meta + ":data", r.prefix + "expiry"}
}

// latestKey names the index of one owner's sessions for one entity. The length prefix
// keeps ("ab", "c") and ("a", "bc") apart.
func (r *Redis) latestKey(owner, entity string) string {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(owner))))
	h.Write([]byte(owner))
	h.Write([]byte(entity))
	return r.prefix + "latest:" + hex.EncodeToString(h.Sum(nil))
}

// ownerKey names the index of one owner's sessions.
func (r *Redis) ownerKey(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return r.prefix + "owner:" + hex.EncodeToString(sum[:])
}

func (r *Redis) ttlMillis() int64 { return r.ttl.Milliseconds() }

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// run runs a script that returns 0 when what it works on does not exist.
func (r *Redis) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (bool, error) {
	n, err := s.Run(ctx, r.client, keys, args...).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// CreateSession implements Store.
func (r *Redis) CreateSession(ctx context.Context, s *Session) error {
	if !validIDs(s.ID) {
		return ErrNotFound
	}
	now := time.Now()
	created, used := normTime(s.CreatedAt, now), normTime(s.LastUsedAt, now)
	keys := append(r.keys(s.ID), r.latestKey(s.Owner, s.EntityID), r.ownerKey(s.Owner))
	ok, err := r.run(ctx, scriptCreate, keys,
		s.ID, s.Owner, s.EntityID, micros(created), micros(used), micros(used.Add(r.ttl)), r.ttlMillis(), s.Creator)
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	if !ok {
		return ErrExists
	}
	s.CreatedAt, s.LastUsedAt, s.ExpiresAt = created, used, used.Add(r.ttl)
	return nil
}

// Session implements Store.
func (r *Redis) Session(ctx context.Context, id string) (*Session, error) {
	if !validIDs(id) {
		return nil, ErrNotFound
	}
	m, err := r.client.HGetAll(ctx, r.keys(id)[0]).Result()
	if err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	s, err := r.decodeSession(id, m)
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	return s, nil
}

func (r *Redis) decodeSession(id string, m map[string]string) (*Session, error) {
	s := &Session{ID: id, Owner: m["owner"], EntityID: m["entity"], Creator: m["creator"], StateSHA256: m["ssha"]}
	s.HasState = s.StateSHA256 != ""
	var errs [4]error
	s.CreatedAt, errs[0] = parseMicros(m["created"])
	s.LastUsedAt, errs[1] = parseMicros(m["used"])
	s.StateCreatedAt, errs[2] = parseMicros(m["sat"])
	if v := m["ssize"]; v != "" {
		s.StateSize, errs[3] = strconv.ParseInt(v, 10, 64)
	}
	s.ExpiresAt = s.LastUsedAt.Add(r.ttl)
	return s, errors.Join(errs[:]...)
}

// parseMicros reads a time written by micros; "" is the zero time.
func parseMicros(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(n).UTC(), nil
}

// LatestSession implements Store. Index entries whose session Redis expired are
// removed on the way.
func (r *Redis) LatestSession(ctx context.Context, owner, entityID string) (*Session, error) {
	key := r.latestKey(owner, entityID)
	for range 100 {
		ids, err := r.client.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key, Start: 0, Stop: 0, Rev: true}).Result()
		if err != nil {
			return nil, fmt.Errorf("latest session: %w", err)
		}
		if len(ids) == 0 {
			return nil, ErrNotFound
		}
		s, err := r.Session(ctx, ids[0])
		if !errors.Is(err, ErrNotFound) {
			return s, err
		}
		if err := r.client.ZRem(ctx, key, ids[0]).Err(); err != nil {
			return nil, fmt.Errorf("latest session: %w", err)
		}
	}
	return nil, ErrNotFound
}

// OwnerSessions implements Store. Ids of equal creation times come in descending order,
// as Redis sorts them. Index entries whose session Redis expired are removed on the
// way, which moves later pages up.
func (r *Redis) OwnerSessions(ctx context.Context, owner string, offset, limit int) ([]*Session, error) {
	key := r.ownerKey(owner)
	out := []*Session{}
	for limit > 0 {
		ids, err := r.client.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key, Start: offset, Stop: offset + limit - 1, Rev: true}).Result()
		if err != nil {
			return nil, fmt.Errorf("owner sessions: %w", err)
		}
		if len(ids) == 0 {
			return out, nil
		}
		gone := 0
		for _, id := range ids {
			s, err := r.Session(ctx, id)
			if errors.Is(err, ErrNotFound) {
				if err := r.client.ZRem(ctx, key, id).Err(); err != nil {
					return nil, fmt.Errorf("owner sessions: %w", err)
				}
				gone++
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		offset += len(ids) - gone
		limit -= len(ids) - gone
		if gone == 0 {
			return out, nil
		}
	}
	return out, nil
}

// TouchSession implements Store.
func (r *Redis) TouchSession(ctx context.Context, id string, at time.Time) error {
	if !validIDs(id) {
		return ErrNotFound
	}
	at = normTime(at, time.Now())
	ok, err := r.run(ctx, scriptTouch, r.keys(id), id, micros(at), micros(at.Add(r.ttl)), r.ttlMillis())
	if err != nil {
		return fmt.Errorf("touch session: %w", err)
	}
	if !ok {
		return ErrNotFound
	}
	return nil
}

// DeleteSession implements Store.
func (r *Redis) DeleteSession(ctx context.Context, id string) error {
	if !validIDs(id) {
		return ErrNotFound
	}
	var refs map[string]bool
	if r.objects != nil {
		var err error
		if refs, err = r.references(ctx, id); err != nil {
			return fmt.Errorf("delete session: %w", err)
		}
	}
	ok, err := r.run(ctx, scriptDelete, r.keys(id), id)
	if err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	if !ok {
		return ErrNotFound
	}
	for key := range refs {
		r.removeObject(ctx, key)
	}
	return nil
}

// State implements Store.
func (r *Redis) State(ctx context.Context, sessionID string) ([]byte, error) {
	if !validIDs(sessionID) {
		return nil, ErrNotFound
	}
	b, err := r.client.Get(ctx, r.keys(sessionID)[1]).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("get state: %w", err)
	}
	if b, err = r.deref(ctx, b, stateObjects+sessionID+"/"); err != nil {
		return nil, fmt.Errorf("get state: %w", err)
	}
	return b, nil
}

// PutState implements Store.
func (r *Redis) PutState(ctx context.Context, sessionID string, blob []byte) error {
	if !validIDs(sessionID) {
		return ErrNotFound
	}
	at := normTime(time.Time{}, time.Now())
	sum := sha256Hex(blob)
	old, err := r.previous(func() *redis.StringCmd { return r.client.Get(ctx, r.keys(sessionID)[1]) })
	if err != nil {
		return fmt.Errorf("put state: %w", err)
	}
	value, err := r.upload(ctx, stateObjects+sessionID+"/"+sum, bytes.NewReader(blob), int64(len(blob)))
	if err != nil {
		return fmt.Errorf("put state: %w", err)
	}
	ok, err := r.run(ctx, scriptPutState, r.keys(sessionID)[:4],
		value, len(blob), sum, micros(at), r.ttlMillis())
	if err != nil {
		return fmt.Errorf("put state: %w", err)
	}
	if !ok {
		r.drop(ctx, value)
		return ErrNotFound
	}
	if !bytes.Equal(old, value) {
		r.drop(ctx, old)
	}
	return nil
}

// DeleteState implements Store.
func (r *Redis) DeleteState(ctx context.Context, sessionID string) error {
	if !validIDs(sessionID) {
		return ErrNotFound
	}
	old, err := r.previous(func() *redis.StringCmd { return r.client.Get(ctx, r.keys(sessionID)[1]) })
	if err != nil {
		return fmt.Errorf("delete state: %w", err)
	}
	ok, err := r.run(ctx, scriptDeleteState, r.keys(sessionID)[:4])
	if err != nil {
		return fmt.Errorf("delete state: %w", err)
	}
	if !ok {
		return ErrNotFound
	}
	r.drop(ctx, old)
	return nil
}

// PutFile implements Store. It returns ErrTooLarge for a size over the store's limit,
// before reading anything. With an object store the content streams to it; without, it
// is read into Redis.
func (r *Redis) PutFile(ctx context.Context, f *File, content io.Reader, size int64) error {
	if !validIDs(f.ID, f.SessionID) {
		return ErrNotFound
	}
	if size > r.maxFile {
		return fmt.Errorf("put file: %d bytes, limit %d: %w", size, r.maxFile, ErrTooLarge)
	}
	rec := newFileRecord(f)
	rec.Size = size
	rec.CreatedAt = normTime(f.CreatedAt, time.Now())
	meta, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	keys := r.keys(f.SessionID)
	old, err := r.previous(func() *redis.StringCmd { return r.client.HGet(ctx, keys[3], f.ID) })
	if err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	value, err := r.upload(ctx, fileObjects+f.SessionID+"/"+f.ID+"/"+kiln.NewID(), content, size)
	if err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	ok, err := r.run(ctx, scriptPutFile, keys[:4], f.ID, meta, value, r.ttlMillis())
	if err != nil {
		return fmt.Errorf("put file: %w", err)
	}
	if !ok {
		r.drop(ctx, value)
		return ErrNotFound
	}
	r.drop(ctx, old)
	f.Size, f.CreatedAt = rec.Size, rec.CreatedAt
	return nil
}

// File implements Store.
func (r *Redis) File(ctx context.Context, sessionID, fileID string) (*File, []byte, error) {
	rec, b, err := r.fileValue(ctx, sessionID, fileID)
	if err != nil {
		return nil, nil, err
	}
	if b, err = r.deref(ctx, b, fileObjects+sessionID+"/"+fileID+"/"); err != nil {
		return nil, nil, fmt.Errorf("get file %s: %w", fileID, err)
	}
	return rec.file(), b, nil
}

// OpenFile returns a file of a session with a reader of its bytes, which streams them
// from the bucket when they are there, so that a download does not hold the whole file.
func (r *Redis) OpenFile(ctx context.Context, sessionID, fileID string) (*File, io.ReadCloser, error) {
	rec, b, err := r.fileValue(ctx, sessionID, fileID)
	if err != nil {
		return nil, nil, err
	}
	rc, err := r.open(ctx, b, fileObjects+sessionID+"/"+fileID+"/")
	if err != nil {
		return nil, nil, fmt.Errorf("get file %s: %w", fileID, err)
	}
	return rec.file(), rc, nil
}

// fileValue reads a file's record and the value kept for its bytes: the bytes, or a
// reference to their object.
func (r *Redis) fileValue(ctx context.Context, sessionID, fileID string) (*fileRecord, []byte, error) {
	if !validIDs(sessionID, fileID) {
		return nil, nil, ErrNotFound
	}
	keys := r.keys(sessionID)
	var meta, data *redis.StringCmd
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGet(ctx, keys[2], fileID)
		data = p.HGet(ctx, keys[3], fileID)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil, ErrNotFound
	} else if err != nil {
		return nil, nil, fmt.Errorf("get file: %w", err)
	}
	rec, err := decodeFileHeader([]byte(meta.Val()))
	if err != nil {
		return nil, nil, fmt.Errorf("get file %s: %w", fileID, err)
	}
	b, _ := data.Bytes() // a successful pipeline means no error here
	return rec, b, nil
}

// Files implements Store.
func (r *Redis) Files(ctx context.Context, sessionID string) ([]*File, error) {
	if !validIDs(sessionID) {
		return nil, ErrNotFound
	}
	keys := r.keys(sessionID)
	var exists *redis.IntCmd
	var metas *redis.StringSliceCmd
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, keys[0])
		metas = p.HVals(ctx, keys[2])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	if exists.Val() == 0 {
		return nil, ErrNotFound
	}
	files := make([]*File, 0, len(metas.Val()))
	for _, m := range metas.Val() {
		rec, err := decodeFileHeader([]byte(m))
		if err != nil {
			return nil, fmt.Errorf("list files: %w", err)
		}
		files = append(files, rec.file())
	}
	sortFiles(files)
	return files, nil
}

// DeleteFile implements Store.
func (r *Redis) DeleteFile(ctx context.Context, sessionID, fileID string) error {
	if !validIDs(sessionID, fileID) {
		return ErrNotFound
	}
	keys := r.keys(sessionID)
	old, err := r.previous(func() *redis.StringCmd { return r.client.HGet(ctx, keys[3], fileID) })
	if err != nil {
		return fmt.Errorf("delete file: %w", err)
	}
	ok, err := r.run(ctx, scriptDeleteFile, keys[:4], fileID)
	if err != nil {
		return fmt.Errorf("delete file: %w", err)
	}
	if !ok {
		return ErrNotFound
	}
	r.drop(ctx, old)
	return nil
}

// Sweep implements Store. Redis expires abandoned keys by itself; Sweep removes
// sessions as soon as they expire by the caller's clock, and clears the expiry index.
// Several processes may sweep at once: each expired session is counted by one.
func (r *Redis) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		n, err := scriptSweep.Run(ctx, r.client, []string{r.prefix + "expiry"},
			micros(now), sweepBatch, r.prefix).Int()
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total += n
		if n < sweepBatch {
			break
		}
	}
	if r.objects != nil && r.objSweeps.due(now) {
		n, err := r.sweepObjects(ctx, now.Add(-objectGrace))
		if n > 0 && r.log != nil {
			r.log.Info("removed objects nothing refers to", "count", n)
		}
		if err != nil {
			return total, fmt.Errorf("sweep objects: %w", err)
		}
	}
	return total, nil
}

// previous returns the value a read of the state or a file's bytes found, when objects
// are on: the reference to drop once it is replaced; nil otherwise, and for nothing.
func (r *Redis) previous(read func() *redis.StringCmd) ([]byte, error) {
	if r.objects == nil {
		return nil, nil
	}
	b, err := read().Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}
