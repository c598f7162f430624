package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"time"
)

// hardening is the docker run form of what docker/spec.go asks the Engine API for
// (with kiln's default sizes), so that a cold run pays for the same sandbox.
func hardening(image string, env []string, entrypoint string, args ...string) []string {
	return append([]string{"run", "--rm"}, sandboxFlags(image, env, entrypoint, args...)...)
}

// sandboxFlags are the flags of hardening, shared by docker run and docker create, then
// the image and its arguments.
func sandboxFlags(image string, env []string, entrypoint string, args ...string) []string {
	a := []string{"-i", "--init", "--network", "none", "--read-only",
		"--hostname", "sandbox", "--workdir", "/mnt/data", "--user", "10001:10001",
		"--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m,nr_inodes=4096,mode=1777",
		"--tmpfs", "/mnt/data:rw,exec,nosuid,nodev,size=256m,nr_inodes=4096,uid=10001,gid=10001",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges=true", "--ipc", "private",
		"--pids-limit", "128", "--memory", "512m", "--memory-swap", "512m", "--cpus", "1",
		"--ulimit", "nofile=1024:1024", "--ulimit", "fsize=268435456:268435456", "--ulimit", "core=0:0",
		"--log-driver", "none", "--label", "kiln.bench=true",
		"--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--env", "HOME=/tmp", "--env", "LANG=C.UTF-8",
		"--env", "PYTHONDONTWRITEBYTECODE=1"}
	for _, e := range env {
		a = append(a, "--env", e)
	}
	if entrypoint != "" {
		a = append(a, "--entrypoint", entrypoint)
	}
	return append(append(a, image), args...)
}

// printFrame is one framed print(1) request for a REPL started with --once
// (protocol 2: the header's first member is the payload length).
const printFrame = ">>> REQUEST_START <<<\n" +
	`{"binary":0,"id":"b1","op":"exec","lang":"python","code":"print(1)"}` +
	"\n>>> REQUEST_END <<<\n"

// coldRun starts a fresh container of image that pre-imports as the pool's do, sends it
// print(1) and returns how long the whole docker run took.
func coldRun(ctx context.Context, image string, env []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "docker", hardening(image, env, "", "--once")...)
	cmd.Stdin = bytes.NewBufferString(printFrame)
	var out bytes.Buffer
	cmd.Stdout = &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("docker run: %w", err)
	}
	if !bytes.Contains(out.Bytes(), []byte(`"stdout":"1\n"`)) && !bytes.Contains(out.Bytes(), []byte(`"stdout":"1\\n"`)) {
		return took, fmt.Errorf("docker run: unexpected answer %.200q", out.String())
	}
	return took, nil
}

// trivialRun times a container of the same image and flags whose process is `true`:
// the daemon's and the runtime's share of a warm-up, without Python.
func trivialRun(ctx context.Context, image string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "docker", hardening(image, nil, "true")...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("docker run true: %v: %s", err, out)
	}
	return time.Since(start), nil
}

// interpreterRun times the same container running `python3 -c pass`: the daemon plus a
// bare interpreter start.
func interpreterRun(ctx context.Context, image string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "docker", hardening(image, nil, "python3", "-c", "pass")...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("docker run python3: %v: %s", err, out)
	}
	return time.Since(start), nil
}

// backToBack runs cold containers in `loops` sequential loops until d has passed (each
// loop finishes the run it is in) and returns how many completed and how long it took.
func backToBack(ctx context.Context, image string, loops int, d time.Duration) (n int, elapsed time.Duration, err error) {
	start := time.Now()
	end := start.Add(d)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				_, rerr := coldRun(ctx, image, nil)
				mu.Lock()
				if rerr != nil && err == nil {
					err = rerr
				}
				if rerr == nil {
					n++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n, time.Since(start), err
}
