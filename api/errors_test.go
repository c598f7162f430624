package api

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/kilnsh/kiln"
)

// TestWriteError holds the one table of error codes to HTTP statuses, and what an
// envelope says of a wait: Retry-After whenever the error has one, retry_after_seconds
// only where a client is told to come back (rate limited, a busy session).
func TestWriteError(t *testing.T) {
	tests := []struct {
		err        *kiln.Error
		status     int
		retryAfter string // the header
		retryField bool   // retry_after_seconds in the body
	}{
		{&kiln.Error{Code: kiln.CodeInvalid}, 400, "", false},
		{&kiln.Error{Code: kiln.CodeLanguage}, 400, "", false},
		{&kiln.Error{Code: kiln.CodeUnauthorized}, 401, "", false},
		{&kiln.Error{Code: kiln.CodeForbidden}, 403, "", false},
		{&kiln.Error{Code: kiln.CodeNotFound}, 404, "", false},
		{&kiln.Error{Code: kiln.CodeConflict}, 409, "", false},
		{&kiln.Error{Code: kiln.CodeBusy, RetryAfter: 3}, 409, "3", true},
		{&kiln.Error{Code: kiln.CodeTooLarge}, 413, "", false},
		{&kiln.Error{Code: kiln.CodeMediaType}, 415, "", false},
		{&kiln.Error{Code: kiln.CodeRateLimited, RetryAfter: 5}, 429, "5", true},
		{&kiln.Error{Code: kiln.CodeUnavailable, RetryAfter: 7}, 503, "7", false},
		{&kiln.Error{Code: kiln.CodeUnavailable}, 503, "", false},
		{&kiln.Error{Code: kiln.CodeInternal}, 500, "", false},
		{&kiln.Error{Code: "not_a_code"}, 500, "", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.err.Code)+"/"+strconv.Itoa(tt.err.RetryAfter), func(t *testing.T) {
			tt.err.Message = "what happened"
			rec := httptest.NewRecorder()
			writeError(rec, httptest.NewRequest("GET", "/", nil), tt.err)
			if rec.Code != tt.status {
				t.Errorf("got status %d, want %d", rec.Code, tt.status)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("got Retry-After %q, want %q", got, tt.retryAfter)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("got body %q: %v", rec.Body, err)
			}
			if body["error"] != string(tt.err.Code) || body["message"] != "what happened" {
				t.Errorf("got %v, want code %s and the message", body, tt.err.Code)
			}
			if _, ok := body["retry_after_seconds"]; ok != tt.retryField {
				t.Errorf("got %v, want retry_after_seconds: %v", body, tt.retryField)
			}
		})
	}
}

// TestWriteJSONUnencodable: a value that cannot be encoded is a 500 with a fixed
// envelope, complete with its length, never half a body.
func TestWriteJSONUnencodable(t *testing.T) {
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]float64{"x": math.NaN()})
	const want = `{"error":"internal","message":"response encoding failed"}` + "\n"
	if rec.Code != http.StatusInternalServerError || rec.Body.String() != want {
		t.Errorf("got %d %q, want 500 %q", rec.Code, rec.Body, want)
	}
	if got := rec.Header().Get("Content-Length"); got != strconv.Itoa(len(want)) {
		t.Errorf("got Content-Length %q, want %d", got, len(want))
	}
}
