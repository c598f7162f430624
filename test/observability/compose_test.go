package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestComposeDeployment brings deploy/docker-compose.yml up under a project name and a
// loopback port of its own, with an image built from the test's kiln binary, runs
// print(1) through it and takes everything down again, volumes included.
func TestComposeDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and runs Compose; skipped with -short")
	}
	root := kilntest.Root()
	if out, err := exec.Command(filepath.Join(root, "deploy/ensure-compose.sh")).CombinedOutput(); err != nil {
		t.Skipf("no Docker Compose: %v\n%s", err, out)
	}
	bin, err := kilntest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1e9)
	project, instance, image := "kilntest"+suffix, "compose-test-"+suffix, "kiln:compose-test-"+suffix
	const key = "compose-test-key"
	envFile := filepath.Join(t.TempDir(), "kiln.env")
	vars := "API_KEYS=" + key + "\nPOOL_SIZE=1\nQUEUE_TIMEOUT_SECONDS=60\nLOG_LEVEL=debug\nSANDBOX_IMAGE=kiln-python:latest\n"
	if err := os.WriteFile(envFile, []byte(vars), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	env := append(os.Environ(),
		"KILN_PROJECT="+project, "KILN_ENV_FILE="+envFile, "KILN_IMAGE="+image, "KILN_BINARY="+bin,
		"KILN_PUBLISH=127.0.0.1:"+port, "INSTANCE_ID="+instance)
	compose := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy/compose.sh"), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := compose("down", "-v", "--timeout", "60"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
		_, _ = kilntest.Docker("image", "rm", image)
		for _, filter := range []string{"label=kiln.instance=" + instance, "label=com.docker.compose.project=" + project} {
			if out, _ := kilntest.Docker("ps", "-aq", "--filter", filter); strings.TrimSpace(out) != "" {
				t.Errorf("containers left behind (%s): %s", filter, out)
			}
		}
	})
	if out, err := compose("up"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}

	url := "http://127.0.0.1:" + port
	if !waitStatus(&http.Client{Timeout: 5 * time.Second}, url+"/health/ready", http.StatusOK, 2*time.Minute) {
		logs, _ := compose("logs", "--tail", "50", "kiln")
		t.Fatalf("kiln in Compose not ready within 2 minutes\n%s", logs)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/exec", strings.NewReader(`{"code":"print(1)","lang":"py"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out kilntest.ExecResponse
	if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != http.StatusOK || out.Status != "ok" || out.Stdout != "1\n" {
		t.Fatalf("exec print(1) in Compose = %d %s, want 200 ok with stdout 1", resp.StatusCode, body)
	}
	// The sandbox ran on the host daemon, labelled with the instance compose fixed.
	if ids, err := kilntest.Containers(instance); err != nil || len(ids) == 0 {
		t.Errorf("no sandbox labelled kiln.instance=%s on the host daemon (%v)", instance, err)
	}
	// The image's HEALTHCHECK (kiln healthcheck) must pass against the same server.
	id, err := kilntest.Docker("ps", "-q", "--filter", "label=com.docker.compose.project="+project)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, id)
	}
	if out, err := kilntest.Docker("exec", strings.TrimSpace(id), "/usr/local/bin/kiln", "healthcheck"); err != nil {
		t.Errorf("kiln healthcheck in the container: %v\n%s", err, out)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
