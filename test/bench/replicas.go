package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The replicas rows: two kilns on one Redis that forward to each other, and one live
// session held by the first. The same print(1) of that session goes to its owner
// (direct) and to the other replica, which forwards it (forwarded), one after the other,
// so that the machine's drift hits both rows alike. Their ratio is what a client behind
// a round-robin balancer pays for the hop.
const (
	directRow    = "replicas: live print(1), sent to the session's replica"
	forwardedRow = "replicas: live print(1), forwarded by another replica"
)

func (b *bench) replicaPhase(ctx context.Context, res *Results) error {
	redisURL, stopRedis, err := startRedis(b.tmp)
	if err != nil {
		return fmt.Errorf("replicas: %w", err)
	}
	defer stopRedis()
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	var clients [2]*client
	for i := range clients {
		port, err := freePort()
		if err != nil {
			return err
		}
		srv, k, err := b.start(ctx, []string{"REDIS_URL=" + redisURL, "LISTEN_ADDR=127.0.0.1:" + port,
			"ADVERTISE_URL=http://127.0.0.1:" + port, "PEER_SECRET=" + hex.EncodeToString(secret)}, 2)
		if err != nil {
			return fmt.Errorf("start replica %d: %w", i, err)
		}
		defer stop(srv)
		k.instance = srv.Instance
		clients[i] = k
	}
	owner, other := clients[0], clients[1]
	sid, err := newSession(ctx, owner, "print(1)", "1")
	if err != nil {
		res.Latency = append(res.Latency, summarize(forwardedRow, nil, 1, "setup failed: "+err.Error()))
		return nil
	}
	var direct, forwarded []time.Duration
	fails := 0
	for range b.counts.liveCalls {
		for _, k := range []*client{owner, other} {
			r, err := k.exec(ctx, map[string]any{"code": "print(1)", "session_id": sid})
			if err == nil {
				err = liveAnswer(r, "1")
			}
			if err != nil {
				log.Printf("replicas: %v", err)
				fails++
				continue
			}
			if k == owner {
				direct = append(direct, r.Took)
			} else {
				forwarded = append(forwarded, r.Took)
			}
		}
	}
	note := "one live session held by the first of two replicas on one Redis; its calls alternate between the two"
	res.Latency = append(res.Latency, summarize(directRow, direct, 0, note), summarize(forwardedRow, forwarded, fails, note))
	return nil
}

// replicaRatios sets the forwarded call against the direct one.
func replicaRatios(r *Results) []Ratio {
	d, f := r.summary(directRow), r.summary(forwardedRow)
	if d.N == 0 || f.N == 0 || d.P50 <= 0 {
		return nil
	}
	return []Ratio{{Case: forwardedRow, KilnMS: f.P50, FloorMS: d.P50, Ratio: round(f.P50/d.P50, 2), Target: forwardTarget,
		Basis: "forwarded p50 / p50 of the same call sent to the session's replica"}}
}

// forwardTarget bounds what the hop may add to a live print(1): one more HTTP exchange
// on loopback.
const forwardTarget = 1.3

// startRedis runs a private redis-server on a free loopback port, with no persistence.
func startRedis(dir string) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server is not on PATH (deploy/ensure-redis.sh installs it): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stopIt := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			return "redis://127.0.0.1:" + port + "/0", stopIt, nil
		}
	}
	stopIt()
	out, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	return "", nil, fmt.Errorf("redis-server did not listen: %s", out)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
