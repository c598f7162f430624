package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// caller names who asks, for ownership checks: the key from auth, the user from the
// User-Id header (uploads and reads) or the body's user_id (exec).
func caller(r *http.Request, user string) session.Caller {
	if user == "" {
		user = r.Header.Get("User-Id")
	}
	return session.Caller{Key: info(r).owner, User: user}
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

// timeFormat is how every timestamp in the API is written: RFC 3339, UTC, with
// milliseconds and a Z suffix.
const timeFormat = "2006-01-02T15:04:05.000Z"

func timestamp(t time.Time) string { return t.UTC().Format(timeFormat) }

// Timestamp is a time that encodes to JSON in the API's format, for the bodies other
// packages build (the dashboard's /stats).
type Timestamp time.Time

// MarshalJSON implements json.Marshaler.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + timestamp(time.Time(t)) + `"`), nil
}

type uploadedFile struct {
	FileID   string `json:"fileId"`
	Filename string `json:"filename"`
}

// upload handles POST /upload: multipart fields "file" (one) or "files" (repeated).
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		writeError(w, r, kiln.Errorf(kiln.CodeMediaType, "send the upload as multipart/form-data with fields file or files"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "reading the multipart body: %v", err))
		return
	}
	var uploads []session.Upload
	entity := ""
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, r, bodyError(err, s.maxUpload))
			return
		}
		switch part.FormName() {
		case "file", "files":
			if len(uploads) >= s.maxFiles {
				writeError(w, r, kiln.Errorf(kiln.CodeTooLarge, "more than %d files in one upload", s.maxFiles))
				return
			}
			data, err := io.ReadAll(io.LimitReader(part, s.maxFile+1))
			if err != nil {
				writeError(w, r, bodyError(err, s.maxUpload))
				return
			}
			if int64(len(data)) > s.maxFile {
				writeError(w, r, kiln.Errorf(kiln.CodeTooLarge, "file %q is over the limit of %d bytes", session.SanitizeName(part.FileName()), s.maxFile))
				return
			}
			uploads = append(uploads, session.Upload{Name: part.FileName(), Data: data})
		case "entity_id":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			entity = strings.TrimSpace(string(b))
			if entity != "" && !kiln.ValidToken(entity, 40) {
				writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "entity_id must be 1 to 40 characters of A-Z a-z 0-9 _ -"))
				return
			}
		default:
			_, _ = io.Copy(io.Discard, part)
		}
	}
	sess, files, err := s.sessions.Upload(r.Context(), caller(r, ""), entity, uploads)
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
	files := []*store.File{}
	if kiln.ValidID(sid) {
		var err error
		if files, err = s.sessions.Files(r.Context(), caller(r, ""), sid); err != nil {
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
	sid, fid, err := fileIDs(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	f, data, err := s.sessions.File(r.Context(), caller(r, ""), sid, fid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	base := f.Name[strings.LastIndexByte(f.Name, '/')+1:]
	h := w.Header()
	h.Set("Content-Type", f.ContentType)
	h.Set("Content-Length", fmt.Sprint(len(data)))
	h.Set("Content-Disposition", contentDisposition(base))
	h.Set("ETag", `"`+f.ID+`"`)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
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
	sid, fid, err := fileIDs(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sessions.DeleteFile(r.Context(), caller(r, ""), sid, fid); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type fileOutFromStore []*store.File

func (fs fileOutFromStore) out() []fileOut {
	out := make([]fileOut, 0, len(fs))
	for _, f := range fs {
		out = append(out, fileOut{ID: f.ID, Name: f.Name, SessionID: f.SessionID, Size: f.Size, ContentType: f.ContentType})
	}
	return out
}
