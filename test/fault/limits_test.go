package fault

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The per-key limits, end to end: RATE_LIMIT_PER_MINUTE on the data routes and
// MAX_CONCURRENT_PER_KEY on /exec, each answered 429 rate_limited with
// retry_after_seconds and Retry-After; another key is not held back.
func TestPerKeyLimits(t *testing.T) {
	const other = "fault-key-2"
	s := start(t, "POOL_SIZE=2", "API_KEYS="+key+","+other, "RATE_LIMIT_PER_MINUTE=4", "MAX_CONCURRENT_PER_KEY=1")
	get := func(k string) (*http.Response, kilntest.ErrorBody) {
		t.Helper()
		resp, b, err := s.Request(http.MethodGet, "/v1/files/unknown-session", nil, http.Header{"X-Api-Key": {k}})
		if err != nil {
			t.Fatal(err)
		}
		var e kilntest.ErrorBody
		_ = jsonUnmarshal(b, &e)
		return resp, e
	}

	// One run in flight: a second one of the same key is refused at once.
	slow := make(chan result, 1)
	go func() { slow <- execWithin(s, time.Minute, map[string]any{"code": "import time\ntime.sleep(2)"}) }()
	kilntest.WaitFor(t, 20*time.Second, "the run to start", func() bool { return s.MustPool(t).InUse == 1 })
	second := execWithin(s, 10*time.Second, map[string]any{"code": "print(1)"})
	if second.status != http.StatusTooManyRequests || second.envl.Error != "rate_limited" ||
		second.envl.RetryAfterSeconds < 1 || second.header.Get("Retry-After") == "" {
		t.Errorf("a second concurrent run got %d %+v Retry-After %q, want 429 rate_limited with a retry delay",
			second.status, second.envl, second.header.Get("Retry-After"))
	}
	if r := <-slow; r.status != http.StatusOK {
		t.Errorf("the first run got %d, want 200", r.status)
	}
	// Two of the four requests of the minute are spent; two more pass, then 429.
	for i := range 2 {
		if resp, e := get(key); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d within the limit: %d %+v", i+3, resp.StatusCode, e)
		}
	}
	resp, e := get(key)
	if resp.StatusCode != http.StatusTooManyRequests || e.Error != "rate_limited" || e.RetryAfterSeconds < 1 ||
		resp.Header.Get("Retry-After") == "" {
		t.Errorf("the fifth request got %d %+v Retry-After %q, want 429 rate_limited with a retry delay",
			resp.StatusCode, e, resp.Header.Get("Retry-After"))
	}
	if resp, _ := get(other); resp.StatusCode != http.StatusOK {
		t.Errorf("another key got %d, want 200", resp.StatusCode)
	}
	if readyStatus(s) != http.StatusOK {
		t.Errorf("/health/ready is limited too")
	}
}

// A slowloris client that trickles its headers is cut off by ReadHeaderTimeout (10s)
// while a normal client is still served.
func TestSlowHeadersCutOff(t *testing.T) {
	s := start(t, "POOL_SIZE=1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	begin := time.Now()
	if _, err := io.WriteString(conn, "POST /exec HTTP/1.1\r\nHost: kiln\r\n"); err != nil {
		t.Fatal(err)
	}
	// The answer, if any, is read to its end: the connection must close after it.
	closed := make(chan string, 1)
	go func() {
		br := bufio.NewReader(conn)
		line, _ := br.ReadString('\n')
		_, _ = io.Copy(io.Discard, br)
		closed <- line
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		select {
		case line := <-closed:
			took := time.Since(begin)
			t.Logf("cut off after %s (answer %q)", took.Round(time.Millisecond), strings.TrimSpace(line))
			if took < 9*time.Second || took > 15*time.Second {
				t.Errorf("cut off after %s, want about 10s", took)
			}
			// Go's server may say 400 or 408 before it closes, or just close.
			if line != "" && !strings.HasPrefix(line, "HTTP/1.1 4") {
				t.Errorf("answered %q, want nothing or a 4xx", line)
			}
			return
		case <-tick.C:
			// One more header byte a second: the read deadline is for the whole header.
			_, _ = io.WriteString(conn, "X")
			if i == 5 {
				if resp, _, err := s.Request(http.MethodGet, "/health", nil, nil); err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("a normal client during the trickle: %v", err)
				}
			}
		case <-deadline:
			t.Fatal("the connection was still open after 30s of trickled headers")
		}
	}
}
