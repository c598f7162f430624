package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RefillCPU is the CPU one ready sandbox costs, in CPU-seconds, split by who spends it:
// the container (the REPL's warm-up, and the one print(1) it then serves), the daemon
// side (dockerd, containerd, the shims and the runc processes they reap), kiln itself and,
// for docker run, the docker CLI.
type RefillCPU struct {
	Case      string  `json:"case"`
	N         int     `json:"n"`
	Seconds   float64 `json:"seconds"`
	Container float64 `json:"container_cpu_s"`
	Daemon    float64 `json:"daemon_cpu_s"`
	Kiln      float64 `json:"kiln_cpu_s"`
	Client    float64 `json:"client_cpu_s"`
	Total     float64 `json:"total_cpu_s"`
	Note      string  `json:"note"`
}

// Names of the refill CPU rows; the report sets the second against the first.
const (
	refillCPUKiln   = "kiln warm-up (refill after print(1))"
	refillCPUDocker = "docker run --rm (pre-imports + print(1))"
)

// refillCPU measures the CPU per ready sandbox of kiln's refill and of back-to-back
// docker runs of the same work, in alternating rounds of n sandboxes each. A kiln
// round starts with the pool full and idle, makes n print(1) calls one after the other
// and ends when the pool is full and idle again, so that it holds exactly n warm-ups.
func (b *bench) refillCPU(ctx context.Context, k *client, res *Results) error {
	containers, err := openContainerCPU()
	if err != nil {
		log.Printf("refill CPU: %v; phase skipped", err)
		return nil
	}
	// Sized on the cold docker runs' count: 8 sandboxes a round, twice; 4, once with -quick.
	n, rounds := 2*b.counts.cold+2, min(b.counts.cold, 2)
	// The figures cover the whole daemon: they are kiln's only on a daemon that runs
	// nothing else, which the note lets a reader check.
	others := fmt.Sprintf("%d containers on the daemon at the start, the pool's included", containers.count())
	var kiln, docker RefillCPU
	for round := range rounds {
		log.Printf("refill CPU round %d/%d: %d kiln warm-ups, then %d docker runs", round+1, rounds, n, n)
		if err := kilnRefillRound(ctx, k, containers, n, &kiln); err != nil {
			return fmt.Errorf("refill CPU: %w", err)
		}
		if err := dockerRunRound(ctx, b.image, containers, n, &docker); err != nil {
			return fmt.Errorf("refill CPU: %w", err)
		}
	}
	kiln.Case, kiln.Note = refillCPUKiln, fmt.Sprintf("%d rounds of %d; kiln's CPU less its /metrics polls; %s", rounds, n, others)
	docker.Case, docker.Note = refillCPUDocker, fmt.Sprintf("%d rounds of %d, one after the other, same image and hardening, REPL --once", rounds, n)
	res.RefillCPU = append(res.RefillCPU, kiln.perSandbox(), docker.perSandbox())
	return nil
}

// kilnRefillRound adds one kiln round's totals to sum.
func kilnRefillRound(ctx context.Context, k *client, containers containerCPU, n int, sum *RefillCPU) error {
	if err := k.waitQuiet(ctx); err != nil {
		return err
	}
	daemon := startDaemonMeter()
	ctr0, err := containers.read()
	if err != nil {
		daemon.stop()
		return err
	}
	kilnCPU := k.cpu()
	start := time.Now()
	for range n {
		r, err := k.exec(ctx, printBody)
		if err == nil && r.Status != "ok" {
			err = fmt.Errorf("print(1): status %q", r.Status)
		}
		if err != nil {
			daemon.stop()
			return err
		}
	}
	werr := k.waitQuiet(ctx)
	elapsed := time.Since(start)
	ctr1, cerr := containers.read()
	daemonS := daemon.stop()
	if err := errors.Join(werr, cerr); err != nil {
		return err
	}
	sum.N += n
	sum.Seconds += elapsed.Seconds()
	sum.Container += ctr1 - ctr0
	sum.Daemon += daemonS
	sum.Kiln += kilnCPU.perRequest(1) / 1000
	return nil
}

// dockerRunRound adds n back-to-back docker runs' totals to sum.
func dockerRunRound(ctx context.Context, image string, containers containerCPU, n int, sum *RefillCPU) error {
	daemon := startDaemonMeter()
	ctr0, err := containers.read()
	if err != nil {
		daemon.stop()
		return err
	}
	start := time.Now()
	var client time.Duration
	for range n {
		cmd := exec.CommandContext(ctx, "docker", hardening(image, nil, "", "--once")...)
		cmd.Stdin = bytes.NewBufferString(printFrame)
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		if cmd.ProcessState != nil {
			client += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		if err == nil && !bytes.Contains(out.Bytes(), []byte(`"stdout":"1\n"`)) {
			err = fmt.Errorf("unexpected answer %.200q", out.String())
		}
		if err != nil {
			daemon.stop()
			return fmt.Errorf("docker run: %w", err)
		}
	}
	elapsed := time.Since(start)
	ctr1, cerr := containers.read()
	daemonS := daemon.stop()
	if cerr != nil {
		return cerr
	}
	sum.N += n
	sum.Seconds += elapsed.Seconds()
	sum.Container += ctr1 - ctr0
	sum.Daemon += daemonS
	sum.Client += client.Seconds()
	return nil
}

// perSandbox turns a row of totals into CPU-seconds per sandbox.
func (r RefillCPU) perSandbox() RefillCPU {
	if r.N == 0 {
		return r
	}
	per := func(x float64) float64 { return round(x/float64(r.N), 3) }
	r.Container, r.Daemon, r.Kiln, r.Client = per(r.Container), per(r.Daemon), per(r.Kiln), per(r.Client)
	r.Total = round(r.Container+r.Daemon+r.Kiln+r.Client, 3)
	r.Seconds = round(r.Seconds, 1)
	return r
}

// containerCPU reads the CPU of every container the daemon runs, from the parent cgroup
// Docker's cgroupfs driver puts them in: it keeps what removed containers used.
type containerCPU struct {
	path string
	v2   bool
}

func openContainerCPU() (containerCPU, error) {
	for _, c := range []containerCPU{
		{path: "/sys/fs/cgroup/cpuacct/docker/cpuacct.usage"},
		{path: "/sys/fs/cgroup/cpu,cpuacct/docker/cpuacct.usage"},
		{path: "/sys/fs/cgroup/docker/cpu.stat", v2: true},
	} {
		if _, err := c.read(); err == nil {
			return c, nil
		}
	}
	return containerCPU{}, errors.New("no docker parent cgroup with CPU accounting (the cgroupfs driver's /docker)")
}

// count returns how many containers the parent cgroup holds now: its child cgroups
// with a process in them. A daemon restart can leave empty ones behind (the soak's left
// 209), which hold nothing and use no CPU.
func (c containerCPU) count() int {
	dir := filepath.Dir(c.path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		procs, err := os.ReadFile(filepath.Join(dir, e.Name(), "cgroup.procs"))
		if err == nil && len(bytes.TrimSpace(procs)) > 0 {
			n++
		}
	}
	return n
}

// read returns the CPU-seconds the containers used so far.
func (c containerCPU) read() (float64, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return 0, err
	}
	if !c.v2 {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return float64(ns) / 1e9, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return float64(us) / 1e6, err
		}
	}
	return 0, fmt.Errorf("%s: no usage_usec", c.path)
}

// daemonMeter follows the CPU of the daemon side of Docker from /proc while it runs:
// dockerd, containerd and every containerd shim. A shim's own time includes the runc
// processes it reaped (cutime). Shims live only as long as their container, so the meter
// samples each one until it is gone and keeps its last reading; what a shim spends in its
// last sampling interval is lost.
type daemonMeter struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	// base is each process's CPU when the meter first saw it (0 for one that started
	// later); last is its latest reading.
	base, last map[int]float64
	ignored    map[int]bool
}

// daemonComms are the command names (as /proc truncates them) of the daemon side.
var daemonComms = map[string]bool{"dockerd": true, "containerd": true, "containerd-shim": true}

// daemonSample is how often the meter reads the daemon's processes.
const daemonSample = 20 * time.Millisecond

func startDaemonMeter() *daemonMeter {
	m := &daemonMeter{done: make(chan struct{}), base: map[int]float64{}, last: map[int]float64{}, ignored: map[int]bool{}}
	m.sample(true)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(daemonSample)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				m.sample(false)
			}
		}
	}()
	return m
}

// stop ends the sampling and returns the CPU-seconds the daemon side used meanwhile.
func (m *daemonMeter) stop() float64 {
	close(m.done)
	m.wg.Wait()
	m.sample(false)
	var sum float64
	for pid, t := range m.last {
		sum += t - m.base[pid]
	}
	return sum
}

func (m *daemonMeter) sample(first bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || m.ignored[pid] {
			continue
		}
		comm, t, err := procCPU(pid)
		if err != nil {
			continue // gone: its last reading stays
		}
		if !daemonComms[comm] {
			m.ignored[pid] = true
			continue
		}
		if first {
			m.base[pid] = t
		}
		m.last[pid] = t
	}
}

// procCPU returns a process's command name and the CPU-seconds it and the children it
// reaped used (utime, stime, cutime, cstime).
func procCPU(pid int) (string, float64, error) {
	comm, f, err := procStat(pid)
	if err != nil {
		return "", 0, err
	}
	var ticks int64
	for _, x := range f[11:15] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return "", 0, err
		}
		ticks += n
	}
	return comm, float64(ticks) / userHZ, nil
}

// refillCPUText is the report's section on CPU per ready sandbox, as text or markdown.
func refillCPUText(r *Results, md bool) string {
	if len(r.RefillCPU) == 0 {
		return ""
	}
	var b strings.Builder
	if md {
		b.WriteString("\n| CPU-seconds per ready sandbox | n | container | daemon side | kiln | docker CLI | total | note |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	} else {
		fmt.Fprintf(&b, "\n%-44s %5s %9s %9s %9s %9s %9s  %s\n", "CPU-seconds per ready sandbox", "n", "container", "daemon", "kiln", "CLI", "total", "note")
	}
	for _, x := range r.RefillCPU {
		if md {
			fmt.Fprintf(&b, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %s |\n", x.Case, x.N, x.Container, x.Daemon, x.Kiln, x.Client, x.Total, x.Note)
		} else {
			fmt.Fprintf(&b, "%-44s %5d %9.3f %9.3f %9.3f %9.3f %9.3f  %s\n", x.Case, x.N, x.Container, x.Daemon, x.Kiln, x.Client, x.Total, x.Note)
		}
	}
	kiln, docker := r.refillCPURow(refillCPUKiln), r.refillCPURow(refillCPUDocker)
	if kiln.Total > 0 && docker.Total > 0 {
		line := fmt.Sprintf("docker run / kiln, CPU per sandbox: %.2f (container %.2f, daemon side %.2f)", docker.Total/kiln.Total,
			ratioOr0(docker.Container, kiln.Container), ratioOr0(docker.Daemon, kiln.Daemon))
		if md {
			fmt.Fprintf(&b, "\n%s.\n", line)
		} else {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func (r *Results) refillCPURow(name string) RefillCPU {
	for _, x := range r.RefillCPU {
		if x.Case == name {
			return x
		}
	}
	return RefillCPU{}
}

func ratioOr0(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 2)
}
