package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/kilnsh/kiln"
)

// statusOf maps each error code to its HTTP status: the one table of it.
var statusOf = map[kiln.Code]int{
	kiln.CodeInvalid:      http.StatusBadRequest,
	kiln.CodeLanguage:     http.StatusBadRequest,
	kiln.CodeUnauthorized: http.StatusUnauthorized,
	kiln.CodeForbidden:    http.StatusForbidden,
	kiln.CodeNotFound:     http.StatusNotFound,
	kiln.CodeConflict:     http.StatusConflict,
	kiln.CodeBusy:         http.StatusConflict,
	kiln.CodeTooLarge:     http.StatusRequestEntityTooLarge,
	kiln.CodeMediaType:    http.StatusUnsupportedMediaType,
	kiln.CodeRateLimited:  http.StatusTooManyRequests,
	kiln.CodeUnavailable:  http.StatusServiceUnavailable,
	kiln.CodeInternal:     http.StatusInternalServerError,
}

type errorBody struct {
	Error      kiln.Code `json:"error"`
	Message    string    `json:"message"`
	RequestID  string    `json:"request_id"`
	RetryAfter int       `json:"retry_after_seconds,omitempty"`
}

// writeError sends err as the error envelope. An error that is not a *kiln.Error is a
// bug or an outage: the client gets a generic message and the log gets the detail.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *kiln.Error
	if !errors.As(err, &e) {
		logger(r).Error("internal error", "err", err)
		e = &kiln.Error{Code: kiln.CodeInternal, Message: "internal error; see the server log with this request id"}
	}
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if shaped, _ := r.Context().Value(e2bShapeKey{}).(bool); shaped {
		writeJSON(w, status, struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{status, e.Message})
		return
	}
	body := errorBody{Error: e.Code, Message: e.Message, RequestID: requestID(r)}
	if e.Code == kiln.CodeRateLimited || e.Code == kiln.CodeBusy {
		body.RetryAfter = e.RetryAfter
	}
	writeJSON(w, status, body)
}

// writeJSON writes v as the whole response, with its length, so that the response is
// complete once flushed (see withRequest).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		slog.Error("response encode failed", "err", err)
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"internal","message":"response encoding failed"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	if _, err := w.Write(buf.Bytes()); err != nil {
		slog.Debug("response write failed", "err", err)
	}
}
