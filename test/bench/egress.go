package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
	"github.com/kilnsh/kiln/test/testca"
)

// The egress rows: code in a sandbox reaching a host through kiln's proxy (the REPL's
// port, net frames on the channel, kiln's proxy, the upstream on loopback), each set
// against the same Python code run by a host process straight to the upstream. Both
// time the requests inside the code, so that what is compared is the way out alone.
const (
	egressDownloadRow      = "egress: 50 MB download in a call (urllib, timed in the code)"
	egressDownloadFloorRow = "floor: the same download by a host process"
	egressGetRow           = "egress: small HTTPS GET in a call (urllib, new connection, timed in the code)"
	egressGetFloorRow      = "floor: the same GET by a host process, plus a bare attach ping"
	egressDownloadTarget   = 2.0 // at least half the host's throughput
	egressGetTarget        = 1.5
	egressResumeRow        = "egress: resumed call of a session that pip installed a small wheel"
	egressResumeFloorRow   = "egress: resumed call of the same session without the install"
	egressResumeTarget     = 1.3
	benchPackage           = "kilnbench"
)

// egressDownload prints the bytes of the URL in argv[1] and the milliseconds they took.
const egressDownload = `import sys, time, urllib.request
t = time.perf_counter(); n = 0
with urllib.request.urlopen(sys.argv[1], timeout=120) as r:
    while chunk := r.read(1 << 20):
        n += len(chunk)
print(n, (time.perf_counter() - t) * 1000)
`

// egressGets prints the milliseconds of each of argv[2] GETs of argv[1], the first left out.
const egressGets = `import sys, time, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=30).read()
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    urllib.request.urlopen(sys.argv[1], timeout=30).read()
    print((time.perf_counter() - t) * 1000)
`

func (b *bench) egressPhase(ctx context.Context, res *Results) error {
	log.Printf("egress: downloads and GETs through kiln's proxy, against a host process")
	ca, err := testca.New("secure.test", "localhost")
	if err != nil {
		return err
	}
	caFile := filepath.Join(b.tmp, "egress-ca.pem")
	if err := os.WriteFile(caFile, []byte(ca.PEM), 0o644); err != nil {
		return err
	}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	secure, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.Leaf}})
	if err != nil {
		plain.Close()
		return err
	}
	wheel, err := kilntest.Wheel(benchPackage, "1.0", "VALUE = 42\n\nclass Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n")
	if err != nil {
		return err
	}
	handler := upstreamHandler()
	kilntest.PackageIndex(handler, benchPackage, "1.0", wheel)
	up := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go up.Serve(plain)
	go up.Serve(secure)
	defer up.Close()
	pp, sp := plain.Addr().(*net.TCPAddr).Port, secure.Addr().(*net.TCPAddr).Port

	srv, k, err := b.start(ctx, []string{
		fmt.Sprintf("EGRESS_ALLOW=download.test:%d,secure.test:%d", pp, sp),
		"EGRESS_RESOLVE=download.test=127.0.0.1,secure.test=127.0.0.1", "EGRESS_ALLOW_PRIVATE=127.0.0.1/32",
		"EGRESS_CA_BUNDLE=" + ca.PEM, "MAX_QUEUE=64", "QUEUE_TIMEOUT_SECONDS=60",
		fmt.Sprintf("PIP_INDEX_URL=https://secure.test:%d/simple/", sp),
	}, 2)
	if err != nil {
		return fmt.Errorf("start kiln with egress: %w", err)
	}
	defer stop(srv)

	const size = 50 << 20
	reps, gets := b.counts.egress, 20
	var inKiln, onHost []time.Duration
	fails := 0
	for range reps {
		if d, err := kilnTimed(ctx, k, egressDownload, fmt.Sprintf("http://download.test:%d/bytes?n=%d", pp, size)); err != nil {
			log.Printf("egress download in kiln: %v", err)
			fails++
		} else {
			inKiln = append(inKiln, d...)
		}
		if d, err := hostTimed(ctx, k, egressDownload, caFile, fmt.Sprintf("http://127.0.0.1:%d/bytes?n=%d", pp, size)); err != nil {
			log.Printf("egress download on the host: %v", err)
		} else {
			onHost = append(onHost, d...)
		}
	}
	res.Latency = append(res.Latency, summarize(egressDownloadRow, inKiln, fails, ""),
		summarize(egressDownloadFloorRow, onHost, 0, ""))

	inKiln, onHost, fails = nil, nil, 0
	if d, err := kilnTimed(ctx, k, egressGets, fmt.Sprintf("https://secure.test:%d/hello", sp), strconv.Itoa(gets)); err != nil {
		log.Printf("egress GETs in kiln: %v", err)
		fails++
	} else {
		inKiln = d
	}
	if d, err := hostTimed(ctx, k, egressGets, caFile, fmt.Sprintf("https://localhost:%d/hello", sp), strconv.Itoa(gets)); err != nil {
		log.Printf("egress GETs on the host: %v", err)
	} else {
		onHost = d
	}
	res.Latency = append(res.Latency, summarize(egressGetRow, inKiln, fails, ""),
		summarize(egressGetFloorRow, onHost, 0, "the host's GET alone; the ratio adds the floor's bare attach ping"))

	// Two sessions alike but for the install; each call resumes after the session's
	// sandbox died, so that its state (and in one, the package) is written back.
	with, without := resumedCalls(ctx, k, 2*reps, true), resumedCalls(ctx, k, 2*reps, false) // a few ms apart: more calls for a steadier p50
	res.Latency = append(res.Latency, with, without)
	return nil
}

// resumedCalls times calls that resume a session (a DataFrame, and with install a
// package it installed and imported) after its sandbox died.
func resumedCalls(ctx context.Context, k *client, reps int, install bool) Summary {
	name, setup := egressResumeFloorRow, "import pandas as pd\ndf = pd.DataFrame({'a': range(1000)})"
	if install {
		name = egressResumeRow
		setup = "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '" + benchPackage +
			"'], check=True)\nimport " + benchPackage + "\n" + setup
	}
	first, err := k.exec(ctx, map[string]any{"lang": "py", "code": setup})
	if err != nil || first.Status != "ok" {
		return summarize(name, nil, 1, fmt.Sprintf("setup failed: %v %+v", err, first))
	}
	var took []time.Duration
	fails := 0
	for range reps {
		if _, err := k.exec(ctx, map[string]any{"lang": "py", "session_id": first.SessionID, "code": "import os\nos.kill(os.getpid(), 9)"}); err != nil {
			fails++
			continue
		}
		start := time.Now()
		r, err := k.exec(ctx, map[string]any{"lang": "py", "session_id": first.SessionID, "code": "len(df)"})
		if err != nil || r.Status != "ok" || r.RuntimeStatus != "resumed" {
			fails++
			continue
		}
		took = append(took, time.Since(start))
	}
	return summarize(name, took, fails, "the whole call as the client sees it, after the session's sandbox died")
}

// upstreamHandler serves n bytes (kilntest.Bytes) and a greeting.
func upstreamHandler() *http.ServeMux {
	mux := http.NewServeMux()
	kilntest.Bytes(mux)
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) })
	return mux
}

// kilnTimed runs code in a fresh sandbox, once the pool is full and idle, and reads the
// milliseconds it printed: the last figure of each line.
func kilnTimed(ctx context.Context, k *client, code string, args ...string) ([]time.Duration, error) {
	if err := settle(ctx, k); err != nil {
		return nil, err
	}
	r, err := k.exec(ctx, map[string]any{"lang": "py", "code": code, "args": args, "capture_state": false})
	if err != nil {
		return nil, err
	}
	if r.Status != "ok" {
		return nil, fmt.Errorf("status %s: %s", r.Status, kilntest.Str(r.Error))
	}
	return timings(r.Stdout)
}

// settle waits until kiln's pool is full and idle: no sandbox warms beside what is timed
// (each call of kilnTimed leaves one to replace), in kiln or on the host.
func settle(ctx context.Context, k *client) error {
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	defer cancel()
	return k.waitQuiet(wctx)
}

// hostTimed runs code with the host's python3, straight to the upstream, once kiln's
// pool is full and idle.
func hostTimed(ctx context.Context, k *client, code, caFile string, args ...string) ([]time.Duration, error) {
	if err := settle(ctx, k); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "python3", append([]string{"-c", code}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SSL_CERT_FILE=" + caFile, "NO_PROXY=*"}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	return timings(string(out))
}

func timings(out string) ([]time.Duration, error) {
	var d []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		ms, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("not a timing: %q", line)
		}
		d = append(d, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(d) == 0 {
		return nil, fmt.Errorf("no timing in %q", out)
	}
	return d, nil
}

// egressRatios sets the egress rows against the host's, and the resume with packages
// against the one without.
func egressRatios(r *Results) []Ratio {
	var out []Ratio
	if w, wo := r.summary(egressResumeRow), r.summary(egressResumeFloorRow); w.N > 0 && wo.N > 0 && wo.P50 > 0 {
		out = append(out, Ratio{Case: egressResumeRow, KilnMS: w.P50, FloorMS: wo.P50, Ratio: round(w.P50/wo.P50, 2),
			Target: egressResumeTarget, Basis: "p50 / p50 of the same resume without the install"})
	}
	if k, h := r.summary(egressDownloadRow), r.summary(egressDownloadFloorRow); k.N > 0 && h.N > 0 && h.P50 > 0 {
		out = append(out, Ratio{Case: egressDownloadRow, KilnMS: k.P50, FloorMS: h.P50, Ratio: round(k.P50/h.P50, 2),
			Target: egressDownloadTarget, Basis: "p50 in a sandbox / p50 of the host process: 2.0 is half the host's throughput"})
	}
	k, h := r.summary(egressGetRow), r.summary(egressGetFloorRow)
	if r.Floor != nil && k.N > 0 && h.N > 0 && r.Floor.BarePing.N > 0 {
		floor := h.P50 + r.Floor.BarePing.P50
		out = append(out, Ratio{Case: egressGetRow, KilnMS: k.P50, FloorMS: round(floor, 2), Ratio: round(k.P50/floor, 2),
			Target: egressGetTarget, Basis: fmt.Sprintf("p50 in a sandbox / (host p50 %.2f + bare attach ping p50 %.2f)", h.P50, r.Floor.BarePing.P50)})
	}
	return out
}
