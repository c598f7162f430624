package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// Upload is one uploaded file.
type Upload struct {
	Name string
	Data []byte
}

// Upload stores files in a new session of the caller's and returns it with the files.
func (s *Service) Upload(ctx context.Context, c Caller, entity string, uploads []Upload) (*store.Session, []*store.File, error) {
	if len(uploads) == 0 {
		return nil, nil, kiln.Errorf(kiln.CodeInvalid, "no file in the upload: send multipart form fields named file or files")
	}
	if len(uploads) > s.limits.MaxFilesPerSession {
		return nil, nil, kiln.Errorf(kiln.CodeTooLarge, "%d files uploaded; the limit is %d per session", len(uploads), s.limits.MaxFilesPerSession)
	}
	for _, u := range uploads {
		if int64(len(u.Data)) > s.limits.MaxFileBytes {
			return nil, nil, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the limit of %d bytes", SanitizeName(u.Name), s.limits.MaxFileBytes)
		}
	}
	sess, err := s.newSession(ctx, c, kiln.NewID(), entity)
	if err != nil {
		return nil, nil, err
	}
	var files []*store.File
	seen := map[string]bool{}
	for _, u := range uploads {
		name := SanitizeName(u.Name)
		for i := 2; seen[name]; i++ { // two uploads of one name must not overwrite each other in /mnt/data
			name = SanitizeName(fmt.Sprintf("%d_%s", i, SanitizeName(u.Name))) // the prefix may push it past 255 bytes
		}
		seen[name] = true
		f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: name, ContentType: ContentType(name), CreatedAt: s.now()}
		if err := s.store.PutFile(ctx, f, u.Data); err != nil {
			if errors.Is(err, store.ErrTooLarge) {
				return nil, nil, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the store's size limit", name)
			}
			return nil, nil, fmt.Errorf("save upload: %w", err)
		}
		files = append(files, f)
	}
	return sess, files, nil
}

// Files lists a session's files; a session the caller cannot see has none.
func (s *Service) Files(ctx context.Context, c Caller, sid string) ([]*store.File, error) {
	if _, err := s.Session(ctx, c, sid); err != nil {
		if kiln.ErrorCode(err) == kiln.CodeNotFound {
			return []*store.File{}, nil
		}
		return nil, err
	}
	list, err := s.store.Files(ctx, sid)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("list files: %w", err)
	}
	if list == nil {
		list = []*store.File{}
	}
	return list, nil
}

// File returns a file of a session the caller owns, with its bytes.
func (s *Service) File(ctx context.Context, c Caller, sid, fid string) (*store.File, []byte, error) {
	if _, err := s.Session(ctx, c, sid); err != nil {
		return nil, nil, errNotFound("file")
	}
	f, data, err := s.store.File(ctx, sid, fid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, errNotFound("file")
		}
		return nil, nil, fmt.Errorf("load file: %w", err)
	}
	return f, data, nil
}

// DeleteFile removes a file from a session the caller owns.
func (s *Service) DeleteFile(ctx context.Context, c Caller, sid, fid string) error {
	if _, err := s.Session(ctx, c, sid); err != nil {
		return errNotFound("file")
	}
	if err := s.store.DeleteFile(ctx, sid, fid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errNotFound("file")
		}
		return fmt.Errorf("delete file: %w", err)
	}
	return s.store.TouchSession(ctx, sid, s.now())
}
