package e2b

import (
	"compress/gzip"
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

// signedBy reports whether the signature of a URL that the SDK's downloadUrl or uploadUrl
// made is the box's, expired or not: sha256 of "path:operation:user:token[:expiration]",
// base64 without padding, "v1_" first.
func signedBy(r *http.Request, b *box) bool {
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
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// signatureExpired reports whether a signed URL's signature_expiration has passed.
func signatureExpired(r *http.Request) bool {
	exp := r.URL.Query().Get("signature_expiration")
	if exp == "" {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	return err != nil || time.Now().Unix() > n
}

// onlyGzip reports whether an Accept-Encoding asks for gzip and for nothing else.
func onlyGzip(accept string) bool {
	if strings.Contains(accept, ",") {
		return false
	}
	coding, params, _ := strings.Cut(accept, ";")
	q := strings.ReplaceAll(params, " ", "")
	return strings.EqualFold(strings.TrimSpace(coding), "gzip") && q != "q=0" && q != "q=0.0"
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

// download answers GET /files?path=: the file's bytes as the agent reads them, gzipped
// when gzip is the one encoding asked for (the SDKs' read with gzip: true). A client that
// merely accepts gzip, as fetch and browsers do by default, gets the bytes as they are:
// files are often compressed already, and compressing costs the sandbox's host CPU.
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
	var out io.Writer = w
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
			if onlyGzip(r.Header.Get("Accept-Encoding")) {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				defer zw.Close()
				out = zw
			}
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if _, err := out.Write(e.Data); err != nil {
			return
		}
	}
}

type writeInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataPrefix starts the headers that carry a file's metadata on upload, one per key.
const metadataPrefix = "X-Metadata-"

// metadataOf is an upload's metadata. Go's server has made each header's name canonical
// (X-Metadata-Author), and HTTP/2 sends them in lower case, so keys are lower case.
func metadataOf(hdr http.Header) map[string]string {
	var out map[string]string
	for k, vs := range hdr {
		if key, ok := strings.CutPrefix(k, metadataPrefix); ok && key != "" && len(vs) > 0 {
			if out == nil {
				out = map[string]string{}
			}
			out[strings.ToLower(key)] = vs[0]
		}
	}
	return out
}

// upload answers POST /files: a multipart form of files, each named by the path
// parameter or its own file name, or one file as the body (application/octet-stream).
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	target := r.URL.Query().Get("path")
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "the body is not gzip: %v", err)
			return
		}
		defer zr.Close()
		body = zr
	default:
		writeError(w, http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported: send gzip or none", enc)
		return
	}
	meta := metadataOf(r.Header)
	var out []writeInfo
	switch ct {
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
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
			info, status, err := h.writeFile(r, b, p, part, meta)
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
		info, status, err := h.writeFile(r, b, target, body, meta)
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

// writeFile moves one file into the sandbox in chunks, the last saying so; the first
// replaces the file's metadata with meta.
func (h *Handler) writeFile(r *http.Request, b *box, p string, body io.Reader, meta map[string]string) (writeInfo, int, error) {
	buf := make([]byte, protocol.AgentChunk)
	var offset int64
	for {
		n, err := io.ReadFull(body, buf)
		last := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !last {
			return writeInfo{}, http.StatusBadRequest, err
		}
		chunk := buf[:n]
		args := map[string]any{"path": p, "offset": offset, "last": last}
		if offset == 0 && meta != nil {
			args["metadata"] = meta
		}
		end, werr := h.unary(r.Context(), b, "file.write", args, chunk)
		if werr != nil {
			return writeInfo{}, fileStatus(werr), werr
		}
		offset += int64(n)
		if last {
			var res struct {
				Entry agentEntry `json:"entry"`
			}
			if err := decode(end, &res); err != nil {
				return writeInfo{}, http.StatusInternalServerError, err
			}
			return writeInfo{Name: res.Entry.Name, Type: "file", Path: res.Entry.Path, Metadata: res.Entry.Metadata}, 0, nil
		}
	}
}
