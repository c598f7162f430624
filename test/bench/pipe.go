package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// pipeDriver starts REPLs as subprocesses inside a sandbox container and times their
// first request over pipes; see the file's docstring.
//
//go:embed pipe_driver.py
var pipeDriver string

// pipeRoundTrips runs pipeDriver in one container of the image with kiln's hardening
// and returns the first print(1) and the first ping of fresh REPLs, timed inside the
// container: the exchange with no Docker in between.
func pipeRoundTrips(ctx context.Context, image string, execs, pings int) (execRow, pingRow Summary, err error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, "docker", hardening(image, nil, "python3", "-c", pipeDriver, strconv.Itoa(execs), strconv.Itoa(pings))...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	execs1, pings1, parseErr := parseDriver(stdout.String())
	note := "REPL subprocess inside a sandbox container, first request over its pipes, timed by the driver"
	execRow = summarize("floor: pipes in container, first print(1)", execs1, execs-len(execs1), note)
	pingRow = summarize("floor: pipes in container, first ping", pings1, pings-len(pings1), note)
	if runErr != nil {
		return execRow, pingRow, fmt.Errorf("pipe driver: %w: %s", runErr, lastLines(stderr.String(), 3))
	}
	return execRow, pingRow, parseErr
}

// parseDriver reads the driver's "first <op> <ms>" lines into round trips per op.
func parseDriver(out string) (execs, pings []time.Duration, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || f[0] != "first" {
			return execs, pings, fmt.Errorf("pipe driver: unexpected line %q", line)
		}
		ms, err := strconv.ParseFloat(f[2], 64)
		if err != nil || ms < 0 {
			return execs, pings, fmt.Errorf("pipe driver: bad time in %q", line)
		}
		d := time.Duration(ms * float64(time.Millisecond))
		switch f[1] {
		case "exec":
			execs = append(execs, d)
		case "ping":
			pings = append(pings, d)
		default:
			return execs, pings, fmt.Errorf("pipe driver: unknown op in %q", line)
		}
	}
	return execs, pings, nil
}

// lastLines returns the last n non-empty lines of s, joined with " | ".
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
