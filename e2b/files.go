package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/kilnsh/kiln/protocol"
)

// validSignature checks the signature of a URL the SDK's downloadUrl or uploadUrl made:
// sha256 of "path:operation:user:token[:expiration]", base64 without padding, "v1_" first.
func validSignature(r *http.Request, b *box) bool {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + b.token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return false
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// fileStatus is the HTTP status envd answers for an agent's failure on /files.
func fileStatus(err error) int {
	var ae *agentError
	if !errors.As(err, &ae) {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable {
			return http.StatusBadGateway
		}
		return http.StatusInternalServerError
	}
	switch ae.code {
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return http.StatusBadRequest
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeAlreadyExists:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// download answers GET /files?path=: the file's bytes as the agent reads them.
func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "path is required")
		return
	}
	st, err := h.call(r.Context(), b, "file.read", map[string]any{"path": p}, nil)
	if err != nil {
		writeError(w, fileStatus(err), "%v", err)
		return
	}
	defer st.Close()
	started := false
	for {
		e, err := st.Next(r.Context())
		if err != nil {
			if !started {
				err = h.gone(b, err)
				writeError(w, fileStatus(err), "%v", err)
			}
			return // a download cut short: the client sees the connection end early
		}
		if e.End {
			if e.Code != "" {
				if !started {
					writeError(w, fileStatus(&agentError{code: codeOf(e.Code), message: e.Error}), "%s", e.Error)
				}
				return
			}
			if !started {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusOK)
			}
			return
		}
		if !started {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if _, err := w.Write(e.Data); err != nil {
			return
		}
	}
}

type writeInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// upload answers POST /files: a multipart form of files, each named by the path
// parameter or its own file name, or one file as the body (application/octet-stream).
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	target := r.URL.Query().Get("path")
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Header.Get("Content-Encoding") != "" && r.Header.Get("Content-Encoding") != "identity" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported", r.Header.Get("Content-Encoding"))
		return
	}
	var out []writeInfo
	switch ct {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, "the multipart body could not be read: %v", err)
				return
			}
			if part.FormName() != "file" {
				continue
			}
			p := target
			if p == "" {
				// Not part.FileName, which keeps only the last element of a path.
				_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				p = cd["filename"]
			}
			if p == "" {
				writeError(w, http.StatusBadRequest, "a file needs a path: the path parameter, or the part's file name")
				return
			}
			info, status, err := h.writeFile(r, b, p, part)
			if err != nil {
				writeError(w, status, "%v", err)
				return
			}
			out = append(out, info)
		}
	case "application/octet-stream":
		if target == "" {
			writeError(w, http.StatusBadRequest, "path is required")
			return
		}
		info, status, err := h.writeFile(r, b, target, r.Body)
		if err != nil {
			writeError(w, status, "%v", err)
			return
		}
		out = append(out, info)
	default:
		writeError(w, http.StatusUnsupportedMediaType, "POST /files takes multipart/form-data or application/octet-stream, not %q", ct)
		return
	}
	if len(out) == 0 {
		writeError(w, http.StatusBadRequest, "no file in the request")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// writeFile moves one file into the sandbox in chunks, the last saying so.
func (h *Handler) writeFile(r *http.Request, b *box, p string, body io.Reader) (writeInfo, int, error) {
	buf := make([]byte, protocol.AgentChunk)
	var offset int64
	for {
		n, err := io.ReadFull(body, buf)
		last := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !last {
			return writeInfo{}, http.StatusBadRequest, err
		}
		chunk := buf[:n]
		end, werr := h.unary(r.Context(), b, "file.write", map[string]any{"path": p, "offset": offset, "last": last}, chunk)
		if werr != nil {
			return writeInfo{}, fileStatus(werr), werr
		}
		offset += int64(n)
		if last {
			var res struct {
				Entry struct {
					Name string `json:"name"`
					Path string `json:"path"`
				} `json:"entry"`
			}
			if err := decode(end, &res); err != nil {
				return writeInfo{}, http.StatusInternalServerError, err
			}
			return writeInfo{Name: res.Entry.Name, Type: "file", Path: res.Entry.Path}, 0, nil
		}
	}
}
