package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// Upload is one uploaded file: its Size bytes are read from Content (once), which may
// be a copy the upload spooled to disk, so that they are never held whole. Its name may
// hold directories (pptx/editing.md).
type Upload struct {
	Name    string
	Size    int64
	Content io.Reader
}

// BytesUpload is an upload of bytes already in memory.
func BytesUpload(name string, data []byte) Upload {
	return Upload{Name: name, Size: int64(len(data)), Content: bytes.NewReader(data)}
}

// Target is where an upload goes: a new session of the scope's owner (the caller's, or
// a resource's), tagged with the entity. ReadOnly files are inputs code may not change.
type Target struct {
	Entity   string
	Scope    Scope
	ReadOnly bool
}

// MaxBatchFiles is the most files one batch upload takes (LibreChat's skill priming).
const MaxBatchFiles = 200

// Upload stores files in a new session of the target's owner and returns it with the
// files. It is all or nothing: a file over a limit refuses the whole upload.
func (s *Service) Upload(ctx context.Context, c Caller, to Target, uploads []Upload) (*store.Session, []*store.File, error) {
	if len(uploads) == 0 {
		return nil, nil, kiln.Errorf(kiln.CodeInvalid, "no file in the upload: send multipart form fields named file or files")
	}
	if len(uploads) > s.limits.MaxFilesPerSession {
		return nil, nil, kiln.Errorf(kiln.CodeTooLarge, "%d files uploaded; the limit is %d per session", len(uploads), s.limits.MaxFilesPerSession)
	}
	for _, u := range uploads {
		if u.Size > s.limits.MaxFileBytes {
			return nil, nil, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the limit of %d bytes", uploadName(u.Name), s.limits.MaxFileBytes)
		}
	}
	results, sess, err := s.storeUploads(ctx, c, to, uploads)
	if err != nil {
		return nil, nil, err
	}
	var files []*store.File
	for _, r := range results {
		if r.Err != nil {
			if sess != nil {
				if err := s.store.DeleteSession(ctx, sess.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return nil, nil, errors.Join(r.Err, fmt.Errorf("drop the refused upload: %w", err))
				}
			}
			return nil, nil, r.Err
		}
		files = append(files, r.File)
	}
	return sess, files, nil
}

// BatchResult is one file of a batch upload: stored, or why not.
type BatchResult struct {
	Name string
	File *store.File
	Err  error
}

// BatchLimit is the most files a batch upload to scope takes: MaxBatchFiles for a
// resource's (a skill's files, which runs only read), the session file limit for the
// caller's own (a session its runs may continue and add to).
func (s *Service) BatchLimit(sc Scope) int {
	if sc.shared() {
		return MaxBatchFiles
	}
	return min(MaxBatchFiles, s.limits.MaxFilesPerSession)
}

// UploadBatch stores up to BatchLimit files in one new session of the target's owner,
// each on its own: a file over a limit is refused and the others are kept. The session
// is nil when none was kept.
func (s *Service) UploadBatch(ctx context.Context, c Caller, to Target, uploads []Upload) (*store.Session, []BatchResult, error) {
	if len(uploads) == 0 {
		return nil, nil, kiln.Errorf(kiln.CodeInvalid, "no file in the upload: send multipart form fields named file")
	}
	if limit := s.BatchLimit(to.Scope); len(uploads) > limit {
		return nil, nil, kiln.Errorf(kiln.CodeTooLarge, "%d files uploaded; a batch of these takes at most %d", len(uploads), limit)
	}
	results, sess, err := s.storeUploads(ctx, c, to, uploads)
	return sess, results, err
}

// storeUploads makes the upload's session and stores each file that fits in it.
func (s *Service) storeUploads(ctx context.Context, c Caller, to Target, uploads []Upload) ([]BatchResult, *store.Session, error) {
	var adding int64
	for _, u := range uploads {
		if u.Size <= s.limits.MaxFileBytes {
			adding += u.Size
		}
	}
	if err := s.checkQuota(ctx, c, adding, 0); err != nil {
		return nil, nil, err
	}
	owner, creator := c.In(to.Scope), ""
	if to.Scope.shared() {
		creator = c.owner()
	}
	sess, err := s.newSessionBy(ctx, owner, creator, kiln.NewID(), to.Entity)
	if err != nil {
		return nil, nil, err
	}
	results := make([]BatchResult, 0, len(uploads))
	seen := map[string]bool{}
	kept := 0
	for _, u := range uploads {
		name := uniqueName(uploadName(u.Name), seen)
		r := BatchResult{Name: name}
		if u.Size > s.limits.MaxFileBytes {
			r.Err = kiln.Errorf(kiln.CodeTooLarge, "file %q is over the limit of %d bytes", name, s.limits.MaxFileBytes)
			results = append(results, r)
			continue
		}
		f := &store.File{ID: kiln.NewID(), SessionID: sess.ID, Name: name, ContentType: ContentType(name), CreatedAt: s.now(),
			ReadOnly: to.ReadOnly || to.Scope.shared()}
		switch err := s.store.PutFile(ctx, f, u.Content, u.Size); {
		case errors.Is(err, store.ErrTooLarge):
			r.Err = kiln.Errorf(kiln.CodeTooLarge, "file %q is over the store's size limit", name)
		case err != nil:
			return nil, nil, fmt.Errorf("save upload: %w", err)
		default:
			r.File = f
			kept++
		}
		results = append(results, r)
	}
	if kept == 0 {
		if err := s.store.DeleteSession(ctx, sess.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, fmt.Errorf("drop the empty upload session: %w", err)
		}
		sess = nil
	}
	return results, sess, nil
}

// uploadName is where an uploaded file goes under /mnt/data: the relative path a client
// gives with forward slashes (LibreChat's skill files: pptx/editing.md), or the last part
// of a path from the client's own machine (C:\Users\me\report.pdf, /home/me/a.csv).
func uploadName(raw string) string {
	if strings.Contains(raw, `\`) || strings.HasPrefix(raw, "/") || strings.Contains(strings.SplitN(raw, "/", 2)[0], ":") {
		return SanitizeName(raw)
	}
	return sanitizePath(raw)
}

// uniqueName is name, or name with a number in front when an earlier file of the same
// upload took it: two uploads of one name must not overwrite each other in /mnt/data.
func uniqueName(name string, seen map[string]bool) string {
	unique := name
	dir, base := path.Split(name)
	for i := 2; seen[unique]; i++ {
		unique = dir + SanitizeName(fmt.Sprintf("%d_%s", i, base)) // the prefix may push it past 255 bytes
	}
	seen[unique] = true
	return unique
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

// fileOpener is a store that hands a file's bytes out as a stream (store.Redis, whose
// bytes may be in a bucket).
type fileOpener interface {
	OpenFile(ctx context.Context, sessionID, fileID string) (*store.File, io.ReadCloser, error)
}

// OpenFile returns a file of a session the caller owns with a reader of its bytes, which
// the caller closes: a stream from the store when it can give one, so that a download
// does not hold the whole file in memory.
func (s *Service) OpenFile(ctx context.Context, c Caller, sid, fid string) (*store.File, io.ReadCloser, error) {
	if _, err := s.Session(ctx, c, sid); err != nil {
		return nil, nil, errNotFound("file")
	}
	f, rc, err := s.open(ctx, sid, fid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, errNotFound("file")
		}
		return nil, nil, fmt.Errorf("load file: %w", err)
	}
	return f, rc, nil
}

// open returns a stored file, its Size set, with a reader of its bytes: a stream where
// the store gives one.
func (s *Service) open(ctx context.Context, sid, fid string) (*store.File, io.ReadCloser, error) {
	if opener, ok := s.store.(fileOpener); ok {
		return opener.OpenFile(ctx, sid, fid)
	}
	f, data, err := s.store.File(ctx, sid, fid)
	if err != nil {
		return nil, nil, err
	}
	f.Size = int64(len(data))
	return f, io.NopCloser(bytes.NewReader(data)), nil
}

// FileInfo returns a file of a session the caller owns, without its bytes.
func (s *Service) FileInfo(ctx context.Context, c Caller, sid, fid string) (*store.File, error) {
	list, err := s.Files(ctx, c, sid)
	if err != nil {
		return nil, err
	}
	for _, f := range list {
		if f.ID == fid {
			return f, nil
		}
	}
	return nil, errNotFound("file")
}

// DeleteScopedFile removes a file of scope's (the caller's own, or an agent's or a
// skill's, Caller.In): a resource's file only for the caller who uploaded it or an admin
// of its tenant; any other caller of the tenant, who may read it, gets 403. Files uploaded
// before kiln recorded their uploader may be deleted by any caller of the tenant.
func (s *Service) DeleteScopedFile(ctx context.Context, c Caller, scope Scope, sid, fid string) error {
	if !scope.shared() {
		return s.DeleteFile(ctx, c, sid, fid)
	}
	owner := c.In(scope)
	sess, err := s.Session(ctx, owner, sid)
	if err != nil {
		return errNotFound("file")
	}
	if sess.Creator != "" && sess.Creator != c.owner() && !c.Admin {
		return kiln.Errorf(kiln.CodeForbidden, "the %s's files are deleted only by the caller who uploaded them, or an admin", scope.Kind)
	}
	return s.DeleteFile(ctx, owner, sid, fid)
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
