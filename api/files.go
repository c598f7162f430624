package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// caller names who asks, for ownership checks: the key from auth, the user from the
// User-Id header (uploads and reads) or the body's user_id (exec).
func caller(r *http.Request, user string) session.Caller {
	ri := info(r)
	if ri.user != "" {
		return session.Caller{Key: ri.owner, User: ri.user, Tenant: ri.tenant, Proven: true, Admin: ri.admin,
			Expires: ri.expires, Client: ri.client} // the token's user, whatever the body says
	}
	if user == "" {
		user = r.Header.Get("User-Id")
	}
	// Control characters separate the parts of an owner, and "\x01" marks a resource's
	// own identity (session.Caller.In): no client-named user holds one.
	user = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, user)
	return session.Caller{Key: ri.owner, User: user, Client: ri.client}
}

// pathID returns a path parameter that must be a kiln id; anything else is a 404,
// so no client string ever reaches a store path or key.
func pathID(r *http.Request, name string) (string, error) {
	id := chi.URLParam(r, name)
	if !kiln.ValidID(id) {
		return "", kiln.Errorf(kiln.CodeNotFound, "%s not found", strings.ReplaceAll(name, "_", " "))
	}
	return id, nil
}

// fileIDs returns the session and file ids of a /{session_id}/{file_id} path.
func fileIDs(r *http.Request) (sid, fid string, err error) {
	if sid, err = pathID(r, "session_id"); err != nil {
		return "", "", err
	}
	fid, err = pathID(r, "file_id")
	return sid, fid, err
}

// timestamp writes t as every timestamp in the API is written (kiln.TimeFormat).
func timestamp(t time.Time) string { return kiln.Timestamp(t).String() }

type uploadedFile struct {
	FileID   string `json:"fileId"`
	Filename string `json:"filename"`
}

// uploadForm is a multipart upload as read: where it goes, and its files. Fields come
// before the files they are about, as LibreChat sends them; a file part may carry a
// relative path in its filename (pptx/editing.md).
type uploadForm struct {
	to      session.Target
	uploads []session.Upload
	tooBig  map[int]bool // the uploads over the file size limit, by index (their data is not kept)
	capped  bool         // files past the batch's limit were dropped
	spooled []*os.File   // the files' copies on disk, already unlinked: closing them frees them
}

// close frees the form's spooled copies.
func (f *uploadForm) close() {
	for _, sp := range f.spooled {
		_ = sp.Close()
	}
	f.spooled = nil
}

// spoolPast is the size past which an uploaded file waits for the store in a file of
// the spool directory rather than in memory: a body of MAX_UPLOAD_MB then holds at most
// this much per file in memory, whatever its files' sizes.
const spoolPast = 64 << 10

// readFile reads one uploaded file, at most max+1 bytes of it (more than max is too big
// and the rest is left unread): in memory up to spoolPast, past it in a file of the
// spool directory, unlinked at once so that nothing outlives the request, even kiln.
func (s *Server) readFile(form *uploadForm, part io.Reader, max int64) (io.Reader, int64, error) {
	head, err := io.ReadAll(io.LimitReader(part, min(spoolPast, max)+1))
	if err != nil || int64(len(head)) <= spoolPast || int64(len(head)) > max {
		return bytes.NewReader(head), int64(len(head)), err
	}
	sp, err := os.CreateTemp(s.spoolDir, "upload-*") // "": the system's temporary directory
	if errors.Is(err, fs.ErrNotExist) && s.spoolDir != "" {
		if err = os.MkdirAll(s.spoolDir, 0o700); err == nil {
			sp, err = os.CreateTemp(s.spoolDir, "upload-*")
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("spooling an upload: %w", err)
	}
	form.spooled = append(form.spooled, sp)
	if err := os.Remove(sp.Name()); err != nil {
		return nil, 0, fmt.Errorf("spooling an upload: %w", err)
	}
	n, err := io.Copy(sp, io.MultiReader(bytes.NewReader(head), io.LimitReader(part, max+1-int64(len(head)))))
	if err != nil {
		return nil, 0, err
	}
	if _, err := sp.Seek(0, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("spooling an upload: %w", err)
	}
	return sp, n, nil
}

// readUpload reads a multipart upload: the fields entity_id, kind, id, version and
// read_only, and the files in fields "file" or "files": at most MAX_FILES_PER_SESSION of
// them, or, in a batch, the session layer's BatchLimit for the scope. Past the limit, a
// single upload (batch false) is refused and a batch drops the rest; a file over the
// size limit refuses a single upload and is marked in a batch.
//
// The caller closes the form it returns (its spooled files); on an error, readUpload
// closes it.
func (s *Server) readUpload(w http.ResponseWriter, r *http.Request, batch bool) (_ *uploadForm, err error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return nil, kiln.Errorf(kiln.CodeMediaType, "send the upload as multipart/form-data with fields file or files")
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "reading the multipart body: %v", err)
	}
	form := &uploadForm{tooBig: map[int]bool{}}
	defer func(form *uploadForm) {
		if err != nil {
			form.close()
		}
	}(form)
	limit := s.maxFiles
	var kind, id, version string
	scoped := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, bodyError(err, s.maxUpload)
		}
		switch name := part.FormName(); name {
		case "file", "files":
			if !scoped {
				if form.to.Scope, err = session.ParseScope(kind, id, version); err != nil {
					return nil, err
				}
				scoped = true
				if batch {
					limit = s.sessions.BatchLimit(form.to.Scope)
				}
			}
			if len(form.uploads) >= limit {
				if !batch {
					return nil, kiln.Errorf(kiln.CodeTooLarge, "more than %d files in one upload", limit)
				}
				form.capped = true
				_, _ = io.Copy(io.Discard, part)
				continue
			}
			content, size, err := s.readFile(form, part, s.maxFile)
			var spoolErr *fs.PathError
			if errors.As(err, &spoolErr) {
				return nil, err // the spool directory: kiln's fault, not the body's
			} else if err != nil {
				return nil, bodyError(err, s.maxUpload)
			}
			if size > s.maxFile {
				if !batch {
					return nil, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the limit of %d bytes", session.SanitizeName(partFilename(part)), s.maxFile)
				}
				form.tooBig[len(form.uploads)] = true
				_, _ = io.Copy(io.Discard, part)
				content, size = nil, 0
			}
			form.uploads = append(form.uploads, session.Upload{Name: partFilename(part), Size: size, Content: content})
		case "entity_id", "kind", "id", "version", "read_only":
			if scoped && name != "entity_id" {
				return nil, kiln.Errorf(kiln.CodeInvalid, "%s must come before the files it is about", name)
			}
			b, _ := io.ReadAll(io.LimitReader(part, 256))
			v := strings.TrimSpace(string(b))
			switch name {
			case "entity_id":
				if v != "" && !kiln.ValidToken(v, 40) {
					return nil, kiln.Errorf(kiln.CodeInvalid, "entity_id must be 1 to 40 characters of A-Z a-z 0-9 _ -")
				}
				form.to.Entity = v
			case "kind":
				kind = v
			case "id":
				id = v
			case "version":
				version = v
			case "read_only":
				form.to.ReadOnly = strings.EqualFold(v, "true")
			}
		default:
			_, _ = io.Copy(io.Discard, part)
		}
	}
	if !scoped {
		if form.to.Scope, err = session.ParseScope(kind, id, version); err != nil {
			return nil, err
		}
	}
	return form, nil
}

// partFilename is a file part's filename as the client sent it, directories included
// (pptx/editing.md): Part.FileName keeps only the base name. The session layer decides
// what of it to keep (session.Upload).
func partFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return p.FileName()
	}
	return params["filename"]
}

// upload handles POST /upload: multipart fields "file" (one) or "files" (repeated), and
// the fields that say whose they are (kind, id, version) and whether code may change them
// (read_only).
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	form, err := s.readUpload(w, r, false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer form.close()
	sess, files, err := s.sessions.Upload(r.Context(), caller(r, ""), form.to, form.uploads)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]uploadedFile, 0, len(files))
	for _, f := range files {
		out = append(out, uploadedFile{FileID: f.ID, Filename: f.Name})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"message": "success", "session_id": sess.ID, "storage_session_id": sess.ID, "files": out,
	})
}

// batchFile is one file of a batch upload's answer.
type batchFile struct {
	Status   string `json:"status"` // success or error
	Filename string `json:"filename"`
	FileID   string `json:"fileId,omitempty"`
	Error    string `json:"error,omitempty"`
}

// uploadBatch handles POST /upload/batch: up to 200 files into one new session, each kept
// or refused on its own (LibreChat primes a skill's files this way). 200 unless every
// file was refused (400), with the same body.
func (s *Server) uploadBatch(w http.ResponseWriter, r *http.Request) {
	form, err := s.readUpload(w, r, true)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer form.close()
	keep := make([]session.Upload, 0, len(form.uploads))
	for i, u := range form.uploads {
		if !form.tooBig[i] {
			keep = append(keep, u)
		}
	}
	var sess *store.Session
	var results []session.BatchResult
	if len(keep) > 0 {
		if sess, results, err = s.sessions.UploadBatch(r.Context(), caller(r, ""), form.to, keep); err != nil {
			writeError(w, r, err)
			return
		}
	} else if len(form.uploads) == 0 {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "no file in the upload: send multipart form fields named file"))
		return
	}
	files := make([]batchFile, 0, len(form.uploads))
	succeeded := 0
	for i, u := range form.uploads {
		if form.tooBig[i] {
			files = append(files, batchFile{Status: "error", Filename: session.SanitizeName(u.Name),
				Error: fmt.Sprintf("File size limit exceeded (%d bytes)", s.maxFile)})
			continue
		}
		res := results[0]
		results = results[1:]
		if res.Err != nil {
			msg := res.Err.Error()
			var ke *kiln.Error
			if errors.As(res.Err, &ke) {
				msg = ke.Message
			}
			files = append(files, batchFile{Status: "error", Filename: res.Name, Error: msg})
			continue
		}
		succeeded++
		files = append(files, batchFile{Status: "success", Filename: res.Name, FileID: res.File.ID})
	}
	body := map[string]any{"files": files, "succeeded": succeeded, "failed": len(files) - succeeded}
	status, message := http.StatusOK, "success"
	switch {
	case succeeded == 0:
		status, message = http.StatusBadRequest, "error"
	case succeeded < len(files):
		message = "partial_success"
	}
	body["message"] = message
	if sess != nil {
		body["storage_session_id"], body["session_id"] = sess.ID, sess.ID
	}
	if form.capped {
		body["filesLimitReached"], body["maxFiles"] = true, s.sessions.BatchLimit(form.to.Scope)
	}
	writeJSON(w, status, body)
}

func bodyError(err error, limit int64) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return kiln.Errorf(kiln.CodeTooLarge, "request body is over the limit of %d bytes", limit)
	}
	return kiln.Errorf(kiln.CodeInvalid, "reading the body: %v", err)
}

// listFiles handles GET /files/{session_id}?detail=summary|simple|full. A session the
// caller cannot see (or a malformed id) lists as empty, as LibreChat expects.
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	sid := chi.URLParam(r, "session_id")
	c, err := scopedCaller(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	files := []*store.File{}
	if kiln.ValidID(sid) {
		if files, err = s.sessions.Files(r.Context(), c, sid); err != nil {
			writeError(w, r, err)
			return
		}
	}
	out := make([]any, 0, len(files))
	for _, f := range files {
		switch r.URL.Query().Get("detail") {
		case "summary":
			out = append(out, map[string]any{"name": f.SessionID + "/" + f.ID, "lastModified": timestamp(f.CreatedAt)})
		case "simple":
			out = append(out, map[string]any{"id": f.ID, "name": f.Name, "path": "/mnt/data/" + f.Name})
		case "normalized":
			entry := map[string]any{"id": f.ID, "name": f.Name, "storage_session_id": f.SessionID, "size": f.Size,
				"contentType": f.ContentType, "lastModified": timestamp(f.CreatedAt)}
			if f.ReadOnly {
				entry["read_only"] = true
			}
			out = append(out, entry)
		default:
			out = append(out, map[string]any{
				"name": f.SessionID + "/" + f.ID, "id": f.ID, "session_id": f.SessionID, "storage_session_id": f.SessionID,
				"size": f.Size, "lastModified": timestamp(f.CreatedAt), "etag": `"` + f.ID + `"`,
				"contentType": f.ContentType,
				"metadata":    map[string]string{"content-type": f.ContentType, "original-filename": f.Name},
			})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// download handles GET /download/{session_id}/{file_id}.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	sid, fid, c, err := oneFile(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	f, body, err := s.sessions.OpenFile(r.Context(), c, sid, fid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer body.Close()
	base := f.Name[strings.LastIndexByte(f.Name, '/')+1:]
	h := w.Header()
	h.Set("Content-Type", f.ContentType)
	h.Set("Content-Length", fmt.Sprint(f.Size))
	h.Set("Content-Disposition", contentDisposition(base))
	h.Set("ETag", `"`+f.ID+`"`)
	w.WriteHeader(http.StatusOK)
	// From a bucket the bytes stream through; a failure midway cuts the answer short of
	// its Content-Length, which the client sees.
	if n, err := io.Copy(w, body); err != nil && r.Context().Err() == nil {
		logger(r).Warn("download cut short", "file", fid, "sent", n, "size", f.Size, "err", err)
	}
}

// contentDisposition names a download: an ASCII filename for old clients and a UTF-8
// filename* (RFC 6266 / RFC 5987) for the rest.
func contentDisposition(name string) string {
	ascii := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '_'
		}
		return r
	}, name)
	var enc strings.Builder
	for _, b := range []byte(name) {
		if b < 0x80 && (b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("!#$&+-.^_`|~", b) >= 0) {
			enc.WriteByte(b)
		} else {
			fmt.Fprintf(&enc, "%%%02X", b)
		}
	}
	return fmt.Sprintf(`attachment; filename="%s"; filename*=UTF-8''%s`, ascii, enc.String())
}

// deleteFile handles DELETE /files/{session_id}/{file_id}.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	sid, fid, c, scope, err := fileToDelete(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sessions.DeleteScopedFile(r.Context(), c, scope, sid, fid); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// oneFile is what a request for one file names: its session and file ids, and the caller
// as whose files they are read (scopedCaller).
func oneFile(r *http.Request) (sid, fid string, c session.Caller, err error) {
	if sid, fid, err = fileIDs(r); err == nil {
		c, err = scopedCaller(r)
	}
	return sid, fid, c, err
}

// fileToDelete is what a request to delete one file names: its session and file ids, the
// caller itself (not as the scope's: who deletes a resource's file matters), and the scope.
func fileToDelete(r *http.Request) (sid, fid string, c session.Caller, scope session.Scope, err error) {
	if sid, fid, err = fileIDs(r); err != nil {
		return
	}
	q := r.URL.Query()
	scope, err = session.ParseScope(q.Get("kind"), q.Get("id"), q.Get("version"))
	return sid, fid, caller(r, ""), scope, err
}

// scopedCaller is the caller as whose files the request's query names them: its own,
// or, with kind, id and version, an agent's or a skill's (LibreChat's identity query).
func scopedCaller(r *http.Request) (session.Caller, error) {
	q := r.URL.Query()
	scope, err := session.ParseScope(q.Get("kind"), q.Get("id"), q.Get("version"))
	if err != nil {
		return session.Caller{}, err
	}
	return caller(r, "").In(scope), nil
}

// objectInfo handles GET /sessions/{session_id}/objects/{file_id}: a file's metadata, by
// which LibreChat tells whether a primed file is still there and fresh.
func (s *Server) objectInfo(w http.ResponseWriter, r *http.Request) {
	sid, fid, c, err := oneFile(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	f, err := s.sessions.FileInfo(r.Context(), c, sid, fid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": f.SessionID + "/" + f.ID, "originalFilename": f.Name, "size": f.Size, "contentType": f.ContentType,
		"lastModified": timestamp(f.CreatedAt), "etag": `"` + f.ID + `"`, "readOnly": f.ReadOnly,
	})
}

// objectDelete handles DELETE /sessions/{session_id}/objects/{file_id}: 200 with what
// was deleted, 404 once it is gone.
func (s *Server) objectDelete(w http.ResponseWriter, r *http.Request) {
	sid, fid, c, scope, err := fileToDelete(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sessions.DeleteScopedFile(r.Context(), c, scope, sid, fid); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "File deleted successfully", "session_id": sid, "fileId": fid})
}

type fileOutFromStore []*store.File

func (fs fileOutFromStore) out() []fileOut {
	out := make([]fileOut, 0, len(fs))
	for _, f := range fs {
		out = append(out, fileOut{ID: f.ID, Name: f.Name, SessionID: f.SessionID, StorageSessionID: f.SessionID, Size: f.Size,
			ContentType: f.ContentType})
	}
	return out
}
