package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// A pool whose image is not there yet (make run builds the polyglot image once Python
// answers) does not keep kiln from starting: Python serves, kiln is ready, the pool's
// languages answer 503 with Retry-After saying what is missing, and once the image is
// there the pool warms and they run.
func TestAPoolWhoseImageIsStillBuildingAnswers503(t *testing.T) {
	if kilntest.Runtime() == "kubernetes" {
		return // the nodes pull images: kiln cannot tell one is missing before a Pod says so
	}
	tag := "kiln-building-" + strings.ToLower(kilntest.NewMarker()) + ":latest"
	s, err := kilntest.Start(kilntest.Options{Key: keyA, Env: []string{"API_KEYS=" + keyA,
		"POOLS=python:1,polyglot:1", "SANDBOX_IMAGES=polyglot=" + tag}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(60 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		_, _ = kilntest.Docker("rmi", tag)
	}()
	post := func(lang, code string) (*http.Response, kilntest.ExecResponse) {
		t.Helper()
		var out kilntest.ExecResponse
		resp, err := s.PostJSON("/exec", map[string]any{"lang": lang, "code": code}, &out)
		if err != nil {
			t.Fatal(err)
		}
		return resp, out
	}
	if resp, out := post("py", "print(6 * 7)"); resp.StatusCode != http.StatusOK || out.Stdout != "42\n" {
		t.Fatalf("python while the polyglot image is missing: %d %q %s", resp.StatusCode, out.Stdout, out.Message)
	}
	start := time.Now()
	resp, out := post("js", "console.log(6 * 7)")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" ||
		!strings.Contains(out.Message, "pool polyglot") || !strings.Contains(out.Message, tag) {
		t.Errorf("js while its image is missing: %d Retry-After %q %q, want 503, 30 and a message naming the pool and %s",
			resp.StatusCode, resp.Header.Get("Retry-After"), out.Message, tag)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the 503 took %v: it should not wait on a pool that cannot start", took)
	}
	if resp, _, err := s.Request(http.MethodGet, "/health/ready", nil, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/health/ready while only the polyglot image is missing: %v %v, want 200", resp, err)
	}
	if _, err := kilntest.Docker("tag", "kiln-polyglot:latest", tag); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, out := post("js", "console.log(6 * 7)")
		if resp.StatusCode == http.StatusOK {
			if out.Status != "ok" || out.Stdout != "42\n" {
				t.Errorf("js once its image is there: %s %q (%s) stderr %q", out.Status, out.Stdout, kilntest.Str(out.Error), out.Stderr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("js still %d %s three minutes after its image came", resp.StatusCode, out.Message)
		}
		time.Sleep(time.Second)
	}
}
