package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/kilnsh/kiln"
)

// ErrNotFound is returned for any unknown session, file or state, and for any id that
// is not a valid kiln id.
var ErrNotFound = errors.New("not found")

// ErrExists is returned by CreateSession when a session with that id already exists.
var ErrExists = errors.New("already exists")

// ErrTooLarge is returned when a file is over the store's size limit.
var ErrTooLarge = errors.New("too large")

// Session is what a store keeps about a session, apart from its state blob and files.
type Session struct {
	ID string
	// Owner names who created the session (API key and user); the caller compares it.
	Owner    string
	EntityID string
	// Creator names who made a session owned by a resource (an agent's or a skill's
	// files: Owner is the resource): the one caller, with the tenant's admins, who may
	// delete its files. Empty for a caller's own sessions.
	Creator string
	// CreatedAt and LastUsedAt are set by the caller; zero values become the current time.
	CreatedAt  time.Time
	LastUsedAt time.Time
	// ExpiresAt is LastUsedAt plus the store's TTL. The store fills it on every read
	// and ignores it on CreateSession.
	ExpiresAt time.Time

	// The state fields describe the current state blob. Only PutState and DeleteState
	// change them; CreateSession ignores them.
	HasState       bool
	StateSize      int64
	StateSHA256    string // lower-case hex
	StateCreatedAt time.Time
}

// File is what a store keeps about a file of a session, apart from its bytes.
type File struct {
	ID        string
	SessionID string
	// Name is the file's name as the user sees it. The store never uses it as a path.
	Name        string
	ContentType string
	// Size is set by PutFile from the size of the content.
	Size int64
	// CreatedAt is set by the caller; a zero value becomes the current time.
	CreatedAt time.Time
	// ReadOnly marks an input that code may read but never change: a run that changes
	// it hands back the original (inherited), not a new file.
	ReadOnly bool
}

// Store keeps sessions, their state blobs and their files.
//
// Every method reports an invalid or unknown id as ErrNotFound. PutState and PutFile
// need the session to exist.
type Store interface {
	// CreateSession stores a new session. It fills zero CreatedAt and LastUsedAt in s.
	// It returns ErrExists when the id is taken.
	CreateSession(ctx context.Context, s *Session) error
	// Session returns the session with that id.
	Session(ctx context.Context, id string) (*Session, error)
	// LatestSession returns the most recently used session created by owner for entityID.
	LatestSession(ctx context.Context, owner, entityID string) (*Session, error)
	// OwnerSessions returns up to limit sessions created by owner, newest first (by
	// CreatedAt, then ID, both descending), after skipping offset of them.
	OwnerSessions(ctx context.Context, owner string, offset, limit int) ([]*Session, error)
	// TouchSession records a use of the session at the given time, which extends its
	// expiry. LastUsedAt never moves backwards.
	TouchSession(ctx context.Context, id string, at time.Time) error
	// DeleteSession removes the session with its state and files.
	DeleteSession(ctx context.Context, id string) error

	// State returns the session's state blob; ErrNotFound when it has none.
	State(ctx context.Context, sessionID string) ([]byte, error)
	// PutState replaces the session's state blob atomically.
	PutState(ctx context.Context, sessionID string, blob []byte) error
	// DeleteState removes the session's state blob; ErrNotFound when it has none.
	DeleteState(ctx context.Context, sessionID string) error

	// PutFile stores a file in session f.SessionID under f.ID, its size bytes read from
	// content, replacing any file with that id. It sets f.Size and fills a zero
	// f.CreatedAt. Content of another length than size is an error, and nothing is kept.
	PutFile(ctx context.Context, f *File, content io.Reader, size int64) error
	// File returns a file of a session with its bytes.
	File(ctx context.Context, sessionID, fileID string) (*File, []byte, error)
	// Files lists the files of a session, sorted by CreatedAt, then Name, then ID.
	Files(ctx context.Context, sessionID string) ([]*File, error)
	// DeleteFile removes a file from a session.
	DeleteFile(ctx context.Context, sessionID, fileID string) error

	// Sweep removes the sessions that expired at or before now, with their state and
	// files, and returns how many it removed.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// Close releases the store's resources. It is idempotent.
	Close() error
}

// validIDs reports whether every id is a valid kiln id.
func validIDs(ids ...string) bool {
	for _, id := range ids {
		if !kiln.ValidID(id) {
			return false
		}
	}
	return true
}

// normTime is how stores keep times: UTC, to the microsecond (which Redis scores and
// Lua numbers hold exactly), with zero replaced by now.
func normTime(t, now time.Time) time.Time {
	if t.IsZero() {
		t = now
	}
	return t.UTC().Truncate(time.Microsecond)
}

// sha256Hex returns the lower-case hex SHA-256 of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sortFiles puts files in the order Files promises.
func sortFiles(files []*File) {
	slices.SortFunc(files, func(a, b *File) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
}
