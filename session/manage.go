package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// NewSession creates an empty session of the caller's (a Jupyter kernel's, an MCP
// client's). A caller whose sessions hold its whole storage quota gets none: a new
// session could only add to what it stores.
func (s *Service) NewSession(ctx context.Context, c Caller, entity string) (*store.Session, error) {
	if err := s.checkRoom(ctx, c); err != nil {
		return nil, err
	}
	return s.newSession(ctx, c, kiln.NewID(), entity)
}

// Sessions lists the caller's live sessions, newest first: up to limit of them after
// skipping offset, and whether more follow. Sessions are listed by the exact owner a
// run wrote, so a caller that names a user id sees that user's sessions, and one that
// names none sees the sessions made without one.
func (s *Service) Sessions(ctx context.Context, c Caller, offset, limit int) ([]*store.Session, bool, error) {
	list, err := s.store.OwnerSessions(ctx, c.owner(), offset, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list sessions: %w", err)
	}
	now := s.now()
	out := make([]*store.Session, 0, len(list))
	for _, sess := range list {
		if sess.ExpiresAt.After(now) {
			out = append(out, sess)
		}
	}
	more := len(list) > limit
	if len(out) > limit {
		out = out[:limit]
	}
	return out, more, nil
}

// Fork creates a new session of the caller's that holds a copy of another session's
// state and files, so that the two can go separate ways.
func (s *Service) Fork(ctx context.Context, c Caller, sid string) (*store.Session, []*store.File, error) {
	src, err := s.Stored(ctx, c, sid) // a state waiting for its store is stored first: the fork has the newest
	if err != nil {
		return nil, nil, err
	}
	var blob []byte
	if src.HasState {
		if blob, err = s.store.State(ctx, sid); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, fmt.Errorf("load state: %w", err)
		}
	}
	files, err := s.store.Files(ctx, sid)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, nil, fmt.Errorf("list files: %w", err)
	}
	// Once the copy exists, a failure must not leave half of it behind.
	dst, err := s.newSession(ctx, c, kiln.NewID(), src.EntityID)
	if err != nil {
		return nil, nil, err
	}
	copied, err := s.copyInto(ctx, dst.ID, blob, files)
	if err != nil {
		return nil, nil, errors.Join(err, s.store.DeleteSession(context.WithoutCancel(ctx), dst.ID))
	}
	if dst, err = s.store.Session(ctx, dst.ID); err != nil {
		return nil, nil, fmt.Errorf("reload session: %w", err)
	}
	return dst, copied, nil
}

// copyInto puts a state blob and copies of files into session dst.
func (s *Service) copyInto(ctx context.Context, dst string, blob []byte, files []*store.File) ([]*store.File, error) {
	if blob != nil {
		if err := s.store.PutState(ctx, dst, blob); err != nil {
			return nil, fmt.Errorf("copy state: %w", err)
		}
	}
	out := []*store.File{}
	for _, f := range files {
		stored, rc, err := s.open(ctx, f.SessionID, f.ID)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("load file: %w", err)
		}
		nf := &store.File{ID: kiln.NewID(), SessionID: dst, Name: f.Name, ContentType: f.ContentType, CreatedAt: f.CreatedAt}
		err = s.store.PutFile(ctx, nf, rc, stored.Size)
		if err = errors.Join(err, rc.Close()); err != nil {
			return nil, fmt.Errorf("copy file: %w", err)
		}
		out = append(out, nf)
	}
	return out, nil
}

// AddFile stores an uploaded file in a session the caller owns, replacing a file of
// the same name, within the session's file limit.
func (s *Service) AddFile(ctx context.Context, c Caller, sid string, u Upload) (*store.File, error) {
	if _, err := s.Session(ctx, c, sid); err != nil {
		return nil, err
	}
	if u.Size > s.limits.MaxFileBytes {
		return nil, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the limit of %d bytes", SanitizeName(u.Name), s.limits.MaxFileBytes)
	}
	name := SanitizeName(u.Name)
	existing, err := s.store.Files(ctx, sid)
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	var old []string
	for _, f := range existing {
		if f.Name == name {
			old = append(old, f.ID)
		}
	}
	if len(existing)-len(old) >= s.limits.MaxFilesPerSession {
		return nil, kiln.Errorf(kiln.CodeTooLarge, "the session holds %d files; the limit is %d", len(existing), s.limits.MaxFilesPerSession)
	}
	f := &store.File{ID: kiln.NewID(), SessionID: sid, Name: name, ContentType: ContentType(name), CreatedAt: s.now()}
	if err := s.store.PutFile(ctx, f, u.Content, u.Size); err != nil {
		if errors.Is(err, store.ErrTooLarge) {
			return nil, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the store's size limit", name)
		}
		return nil, fmt.Errorf("save upload: %w", err)
	}
	for _, id := range old {
		if err := s.store.DeleteFile(ctx, sid, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("replace file: %w", err)
		}
	}
	return f, s.store.TouchSession(ctx, sid, s.now())
}
