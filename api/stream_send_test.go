package api

import (
	"math"
	"net/http/httptest"
	"testing"
	"time"
)

// TestEventStreamUnencodable: an event whose data cannot be encoded goes out as an
// error event, whole, never as half an event.
func TestEventStreamUnencodable(t *testing.T) {
	rec := httptest.NewRecorder()
	st := newEventStream(rec, time.Hour)
	st.send("done", map[string]float64{"total_ms": math.Inf(1)})
	st.send("stdout", map[string]string{"text": "a"})
	want := "event: error\ndata: {\"error\":\"internal\",\"message\":\"event encoding failed\"}\n\n" +
		"event: stdout\ndata: {\"text\":\"a\"}\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("got stream %q, want %q", got, want)
	}
}
