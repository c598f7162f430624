package fault

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The state bomb of issue 16: a pickle of {"x": b"\0" * 300 MB}, 1.2 MB once LZ4 has
// compressed it. With SANDBOX_MEMORY_MB=512 it used to reach a sandbox (the raw cap
// was 512 MB) and come back as oom; STATE_MAX_RAW_MB now follows the memory (an
// eighth), so both doors refuse it with 413 too_large, at once, and no sandbox is
// lent or made for it. A run that builds a state past the cap gets a clear answer too,
// and its session goes on with the state it had.
func TestStateBombRefusedAtTheDoor(t *testing.T) {
	s := start(t, "SANDBOX_MEMORY_MB=512", "POOL_SIZE=2", "QUEUE_TIMEOUT_SECONDS=120")
	bomb := pickleBomb(t, 300<<20)
	t.Logf("the bomb: %d bytes compressed, 300 MiB decompressed", len(bomb))

	// A session with a state of its own, made before the counts are taken.
	first := execWithin(s, 2*time.Minute, map[string]any{"code": "y = 41"})
	if first.err != nil || first.status != http.StatusOK || first.body.Status != "ok" || !first.body.HasState {
		t.Fatalf("setup run: %d %+v (err %v)", first.status, first.body, first.err)
	}
	sid := first.body.SessionID
	before := idlePool(t, s)

	doors := []struct {
		name string
		send func() (int, kilntest.ErrorBody, error)
	}{
		{"the state of a stateless POST /exec", func() (int, kilntest.ErrorBody, error) {
			r := execWithin(s, time.Minute, map[string]any{"code": "print(len(x))", "state": base64.StdEncoding.EncodeToString(bomb)})
			return r.status, r.envl, r.err
		}},
		{"POST /state/{session_id}", func() (int, kilntest.ErrorBody, error) {
			resp, b, err := s.Request(http.MethodPost, "/state/"+sid, bytes.NewReader(bomb), http.Header{"Content-Type": {"application/octet-stream"}})
			if err != nil {
				return 0, kilntest.ErrorBody{}, err
			}
			var e kilntest.ErrorBody
			_ = jsonUnmarshal(b, &e)
			return resp.StatusCode, e, nil
		}},
	}
	for _, d := range doors {
		t.Run(d.name, func(t *testing.T) {
			begin := time.Now()
			status, envl, err := d.send()
			took := time.Since(begin)
			t.Logf("answered %d %q in %s", status, envl.Error, took.Round(time.Millisecond))
			if err != nil || status != http.StatusRequestEntityTooLarge || envl.Error != "too_large" {
				t.Errorf("got %d %+v (err %v), want 413 too_large", status, envl, err)
			}
			if !strings.Contains(envl.Message, "decompresses past the limit of 67108864 bytes") {
				t.Errorf("message %q does not name the raw limit", envl.Message)
			}
			if took > time.Second {
				t.Errorf("answered in %s, want within 1s: a refusal must not wait on a sandbox", took)
			}
		})
	}
	after := idlePool(t, s)
	if after != before {
		t.Errorf("sandbox counters went from %+v to %+v; want them unchanged: the bomb must cost no sandbox", before, after)
	}
	if got := sessionState(t, s, sid); got != first.body.StateSize {
		t.Errorf("the session's state is %d bytes after the refused upload, want the %d it had", got, first.body.StateSize)
	}

	// A state the run builds in its sandbox. kiln sends its raw cap with the request,
	// and the REPL stops pickling there: the name over the cap is not stored, state_error
	// names it with its size, the names that fit are stored and the run is ok; the live
	// session keeps it in its interpreter meanwhile. 200 MiB would not fit twice in 512 MB:
	// before the REPL's pickle was bounded, the same run ended as oom. The run answers
	// before its state is stored (state_pending); GET /state/{id}/info stores it, and the
	// next answer's state_error says what the stored state leaves out.
	for _, tt := range []struct {
		mb         int
		status     string
		stateError string
	}{
		{100, "ok", "kept only while the session is live (over the state limit of 64.0 MB before compression): x (over 64.0 MB)"},
		{200, "ok", "kept only while the session is live (over the state limit of 64.0 MB before compression): x (over 64.0 MB)"},
	} {
		t.Run("a run that builds "+strconv.Itoa(tt.mb)+" MiB of state", func(t *testing.T) {
			r := execWithin(s, 2*time.Minute, map[string]any{"session_id": sid,
				"code": "x = b'\\0' * (" + strconv.Itoa(tt.mb) + " << 20)\nprint(len(x))"})
			if r.err != nil || r.status != http.StatusOK || r.body.Status != tt.status {
				t.Fatalf("got %d %+v (err %v), want 200 %s", r.status, r.body, r.err, tt.status)
			}
			if r.body.StateSize != first.body.StateSize {
				t.Errorf("state_size %d, want the %d the session had: the same names, x left out", r.body.StateSize, first.body.StateSize)
			}
			if got := sessionState(t, s, sid); got != first.body.StateSize {
				t.Errorf("the stored state is %d bytes, want the %d the session had: x left out", got, first.body.StateSize)
			}
			next := execWithin(s, 2*time.Minute, map[string]any{"session_id": sid, "code": "print(y, 'x' in globals())"})
			if next.err != nil || next.body.Status != "ok" || next.body.Stdout != "41 True\n" {
				t.Errorf("the next run got %d %+v (err %v), want 41 True: y stored, x live", next.status, next.body, next.err)
			}
			if got := kilntest.Str(next.body.StateError); !strings.Contains(got, tt.stateError) {
				t.Errorf("state_error %q, want it to say %q", got, tt.stateError)
			}
			if done := execWithin(s, time.Minute, map[string]any{"session_id": sid, "code": "del x"}); done.err != nil || done.body.Status != "ok" {
				t.Errorf("del x: %+v (err %v)", done.body, done.err)
			}
		})
	}
}

// pickleBomb returns one LZ4 frame holding the pickle (protocol 4) of {"x": bytes(n)}.
func pickleBomb(t *testing.T, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	head := []byte{0x80, 4, '}', 0x94, 0x8c, 1, 'x', 0x94, 0x8e} // PROTO 4, {}, 'x', BINBYTES8
	head = binary.LittleEndian.AppendUint64(head, uint64(n))
	_, err := zw.Write(head)
	zeros := make([]byte, 1<<20)
	for left := n; err == nil && left > 0; left -= int64(len(zeros)) {
		_, err = zw.Write(zeros[:min(left, int64(len(zeros)))])
	}
	if err == nil {
		_, err = zw.Write([]byte{0x94, 's', '.'}) // SETITEM, STOP
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatalf("compressing the bomb: %v", err)
	}
	return buf.Bytes()
}

// sandboxCounts are what a lent or made sandbox moves.
type sandboxCounts struct {
	checkouts, created   float64 // /metrics: kiln_pool_checkouts_total, kiln_sandboxes_created_total
	poolCreated, removed int64   // /health/detailed
}

// idlePool waits until the pool is full and idle, then reads the counts.
func idlePool(t *testing.T, s *kilntest.Server) sandboxCounts {
	t.Helper()
	var p kilntest.Pool
	kilntest.WaitFor(t, 2*time.Minute, "the pool to be full and idle", func() bool {
		p = s.MustPool(t)
		return p.Ready == p.Target && p.Warming == 0 && p.InUse == 0 && p.Waiting == 0
	})
	b := s.Metrics(t)
	return sandboxCounts{
		checkouts:   kilntest.MetricSum(b, "kiln_pool_checkouts_total"),
		created:     kilntest.MetricSum(b, "kiln_sandboxes_created_total"),
		poolCreated: p.Created,
		removed:     p.Removed,
	}
}

// sessionState returns the size of a session's state, from GET /state/{id}/info.
func sessionState(t *testing.T, s *kilntest.Server, sid string) int {
	t.Helper()
	resp, b, err := s.Request(http.MethodGet, "/state/"+sid+"/info", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /state/%s/info: %v %s", sid, err, b)
	}
	var info struct {
		Size int `json:"size"`
	}
	if err := jsonUnmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	return info.Size
}
