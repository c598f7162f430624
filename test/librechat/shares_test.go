package librechat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Two users of one tenant, on a kiln of two sandboxes: while alice floods it with 24
// calls of 2 s, she gets 429 past her share of concurrent runs, and each of bob's calls
// waits at most one turn behind hers, not for her whole queue: while one of his calls is
// under way, at most three of hers finish (the two running when it queued, and the one
// turn), where first come, first served would let all of hers go first.
func TestOneUsersBurstCostsAnotherOneTurn(t *testing.T) {
	s, err := kilntest.Start(kilntest.Options{Key: apiKey, Env: []string{"POOL_SIZE=2", "POOL_WARMERS=2", "DATA_DIR=" + t.TempDir(),
		"API_KEYS=" + apiKey, "JWT_JWKS=" + jwks, "MAX_CONCURRENT_PER_KEY=12", "MAX_QUEUE=32", "QUEUE_TIMEOUT_SECONDS=120"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Minute)
	call := func(u user, code string) (int, http.Header) {
		b, _ := json.Marshal(map[string]any{"lang": "py", "code": code})
		a := sendTo(t, s.URL, http.MethodPost, "/exec", with(u.auth(t), "Content-Type", "application/json"), bytes.NewReader(b))
		return a.status, a.header
	}

	var aliceDone atomic.Int32
	var refused, retryAfter atomic.Int32
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, h := call(alice, "import time\ntime.sleep(2)\nprint('alice')")
			switch status {
			case http.StatusOK:
				aliceDone.Add(1)
			case http.StatusTooManyRequests:
				refused.Add(1)
				if h.Get("Retry-After") != "" {
					retryAfter.Add(1)
				}
			default:
				t.Errorf("alice's call: %d", status)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // her calls are in: two running, the rest waiting
	for i := range 5 {
		before := aliceDone.Load()
		if status, _ := call(bob, "import pandas as pd\nprint(pd.DataFrame({'x': range(1000)}).x.sum())"); status != http.StatusOK {
			t.Fatalf("bob's call %d: %d", i, status)
		}
		if finished := aliceDone.Load() - before; finished > 3 {
			t.Errorf("bob's call %d waited while %d of alice's calls finished, want at most 3 (one turn)", i, finished)
		}
	}
	wg.Wait()
	if refused.Load() != 12 || retryAfter.Load() != 12 || aliceDone.Load() != 12 {
		t.Errorf("alice: %d answered, %d refused (%d with Retry-After); want 12 and 12: her share is 12 at once", aliceDone.Load(), refused.Load(), retryAfter.Load())
	}
	// The operator sees it in the queue's wait by share: alice's calls behind her own
	// waited over her share, and waited longer than the calls within theirs (bob's).
	metrics := string(sendTo(t, s.URL, http.MethodGet, "/metrics", platform(), nil).body)
	series := func(name string) float64 {
		for line := range strings.Lines(metrics) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
				var f float64
				fmt.Sscan(v, &f)
				return f
			}
		}
		t.Fatalf("/metrics has no %s", name)
		return 0
	}
	overN, overSum := series(`kiln_pool_queue_wait_seconds_count{share="over"}`), series(`kiln_pool_queue_wait_seconds_sum{share="over"}`)
	withinN, withinSum := series(`kiln_pool_queue_wait_seconds_count{share="within"}`), series(`kiln_pool_queue_wait_seconds_sum{share="within"}`)
	if overN < 5 || withinN < 5 || overSum/overN <= withinSum/withinN {
		t.Errorf("queue wait by share: over %v waits of %.2f s on average, within %v of %.2f s; want alice's burst over its share, waiting longer",
			overN, overSum/max(overN, 1), withinN, withinSum/max(withinN, 1))
	}
}

// QUOTA_STORAGE_MB under LibreChat's tokens: alice's second 3 MB upload over a 5 MB quota
// is refused with an error that names the quota, and bob, of the same tenant, is not
// charged for hers.
func TestStorageQuotaPerUser(t *testing.T) {
	s, err := kilntest.Start(kilntest.Options{Key: apiKey, Env: []string{"POOL_SIZE=1", "DATA_DIR=" + t.TempDir(),
		"API_KEYS=" + apiKey, "JWT_JWKS=" + jwks, "QUOTA_STORAGE_MB=5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Minute)
	var csv bytes.Buffer
	csv.WriteString("region,day,revenue_cents\\n")
	for i := 0; csv.Len() < 3<<20; i++ {
		fmt.Fprintf(&csv, "%s,2026-%02d-%02d,%d\\n", []string{"north", "south", "east", "west"}[i%4], 1+i%12, 1+i%28, 1000+i*37%90000)
	}
	file := namedFile{"sales.csv", csv.Bytes()}
	uploadTo(t, s.URL, "/upload", alice.auth(t), nil, file)
	a, _ := uploadAt(t, s.URL, "/upload", alice.auth(t), nil, file)
	if a.status != http.StatusRequestEntityTooLarge || !strings.Contains(string(a.body), "QUOTA_STORAGE_MB") {
		t.Errorf("alice's second 3 MB: %d %s, want 413 naming QUOTA_STORAGE_MB", a.status, a.body)
	}
	uploadTo(t, s.URL, "/upload", bob.auth(t), nil, file)
	metrics := sendTo(t, s.URL, http.MethodGet, "/metrics", platform(), nil)
	if !strings.Contains(string(metrics.body), `kiln_quota_refusals_total{kind="storage"} 1`) {
		t.Errorf("/metrics does not count the storage refusal once")
	}
	if a := sendTo(t, s.URL, http.MethodGet, "/metrics", alice.auth(t), nil); a.status != http.StatusForbidden {
		t.Errorf("/metrics with alice's token: %d, want 403 (operators only)", a.status)
	}
}
