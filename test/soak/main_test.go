// Package soak runs one kiln for minutes under a weighted mix of concurrent requests
// (prints, errors, timeouts, out of memory, fork and thread bombs, output floods,
// uploads and downloads, sessions that carry variables and files, streamed runs and
// cancels) while faults are injected: sandboxes killed from outside, kiln killed with
// SIGKILL and started again on the same data, the Docker daemon restarted, and, with
// the Redis store, Redis restarted. Every answer is checked against what its code must
// produce; every session is read back at the end; kiln's memory, file descriptors and
// goroutines are sampled and checked for growth; no container may be left.
//
// It runs once with the disk store and once with Redis, and writes a table and JSON
// per store under test/results/soak/<store>/.
//
//	go test -count=1 ./test/soak/               # short: about 200 requests, each fault once
//	SOAK=full go test -count=1 -timeout 60m ./test/soak/   # make soak: 1,000+ per store
//
// It restarts the Docker daemon: run it under the exclusive lock
// (flock -x /tmp/kiln-dockerd.lock). SOAK_FAULTS (a comma-separated list of fault
// kinds, or "none") narrows the faults while developing; SOAK_SEED fixes the mix.
package soak

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// plan is the size and the faults of one soak.
type plan struct {
	mode        string
	clients     int
	opsPerSec   float64       // the clients together start at most this many operations a second
	minDuration time.Duration // the mix runs at least this long
	minRequests int64         // and sends at least this many requests
	maxDuration time.Duration // a mix still short of its requests stops here
	warm        time.Duration // fault-free before the first fault
	gap         time.Duration // fault-free between a recovery and the next fault
	tail        time.Duration // fault-free after the last recovery
	maxSessions int           // sessions in use at once
	steps       int           // steps per session before it retires
	sampleEvery time.Duration
	faults      map[string][]string // store → faults, in order
	seed        int64
}

// The short soak (the default, in make test) does the disk store's faults on the disk
// run and restarts Redis on the Redis run: each fault once, both stores, about 200
// requests. The full one (make soak) does every fault with each store.
var plans = map[string]plan{
	"short": {
		mode: "short", clients: 5, opsPerSec: 3, minDuration: 45 * time.Second, minRequests: 100, maxDuration: 3 * time.Minute,
		warm: 8 * time.Second, gap: 8 * time.Second, tail: 15 * time.Second,
		maxSessions: 8, steps: 6, sampleEvery: time.Second,
		faults: map[string][]string{
			"disk":  {faultSandboxKill, faultKilnKill, faultDaemonRestart},
			"redis": {faultRedisRestart},
		},
	},
	"full": {
		mode: "full", clients: 6, opsPerSec: 5, minDuration: 5 * time.Minute, minRequests: 1000, maxDuration: 12 * time.Minute,
		warm: 30 * time.Second, gap: 30 * time.Second, tail: 40 * time.Second,
		maxSessions: 10, steps: 10, sampleEvery: 3 * time.Second,
		faults: map[string][]string{
			"disk":  {faultSandboxKill, faultKilnKill, faultDaemonRestart, faultSandboxKill},
			"redis": {faultSandboxKill, faultRedisRestart, faultKilnKill, faultDaemonRestart, faultRedisRestart},
		},
	},
}

func TestSoak(t *testing.T) {
	if err := closeInherited(); err != nil {
		t.Fatal(err)
	}
	p := loadPlan(t)
	for _, store := range []string{"disk", "redis"} {
		t.Run(store, func(t *testing.T) { runSoak(t, p, store) })
	}
}

// loadPlan reads SOAK (short or full), SOAK_FAULTS and SOAK_SEED.
func loadPlan(t *testing.T) plan {
	t.Helper()
	mode := os.Getenv("SOAK")
	if mode == "" {
		mode = "short"
	}
	p, ok := plans[mode]
	if !ok {
		t.Fatalf("SOAK=%q: want short or full", mode)
	}
	if only := os.Getenv("SOAK_FAULTS"); only != "" {
		keep := strings.Split(only, ",")
		faults := map[string][]string{}
		for store, kinds := range p.faults {
			for _, k := range kinds {
				if slices.Contains(keep, k) {
					faults[store] = append(faults[store], k)
				}
			}
		}
		p.faults = faults
		t.Logf("SOAK_FAULTS=%s: faults narrowed to %v", only, faults)
	}
	p.seed = time.Now().UnixNano()
	if s := os.Getenv("SOAK_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", s, err)
		}
		p.seed = seed
	}
	return p
}
