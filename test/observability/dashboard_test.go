package observability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// chromium finds a headless-capable browser: $CHROMIUM, or one on PATH
// (deploy/ensure-chromium.sh installs Debian's).
func chromium() string {
	if c := os.Getenv("CHROMIUM"); c != "" {
		return c
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browse loads url in headless Chromium, lets its scripts run for a few seconds of
// virtual time and returns the DOM; with a screenshot path it saves a PNG instead.
func browse(t *testing.T, url, screenshot string) string {
	t.Helper()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,900", "--virtual-time-budget=5000",
	}
	if screenshot != "" {
		args = append(args, "--screenshot="+screenshot)
	} else {
		args = append(args, "--dump-dom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(), append(args, url)...)
	var stderr lockedLog
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// dashboard checks that the page shows the pool's target, the executions run so far
// and the live sessions, that it asks for a key without one, and saves a screenshot to
// look at.
func dashboard(t *testing.T, s *kilntest.Server) {
	if chromium() == "" {
		t.Skip("no Chromium on PATH (deploy/ensure-chromium.sh installs it); set CHROMIUM to use another")
	}
	page := s.URL + "/dashboard/"

	dom := browse(t, page+"#key="+s.Key, "")
	for id, want := range map[string]string{
		"pool-target": "3",
		"exec-total":  "5",
		"status":      "(ok|degraded)",
		"live-idle":   "[1-9][0-9]*",
		"live-max":    "8",
		"live-reused": "1",
		"live-new":    "4",
		"live-memory": `[0-9.]+ (KiB|MiB|GiB)`,
		"live-ended":  "ended since start: none",
	} {
		re := regexp.MustCompile(fmt.Sprintf(`id="%s"[^>]*>%s<`, id, want))
		if !re.MatchString(dom) {
			t.Errorf("dashboard: #%s does not show %s", id, want)
		}
	}
	for _, want := range []string{"ZeroDivisionError", `class="status-ok">ok<`, `<td class="mono">python</td>`, `<td>python bash</td>`} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(dom) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
	if regexp.MustCompile(`division by zero`).MatchString(dom) {
		t.Error("dashboard shows the exception's message, which may carry user data")
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	locked := browse(t, page, "")
	if !regexp.MustCompile(`Authentication is on`).MatchString(locked) {
		t.Errorf("without a key the dashboard does not ask for one:\n%s", locked)
	}

	dir := filepath.Join(kilntest.Root(), "test", "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "dashboard.png")
	browse(t, page+"#key="+s.Key, shot)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10<<10 {
		t.Errorf("screenshot %s missing or tiny: %v", shot, err)
	}
	t.Logf("dashboard screenshot: %s", shot)
}
