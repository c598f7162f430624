package soak

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The faults.
const (
	faultSandboxKill   = "sandbox_kill"   // docker kill -s KILL of the instance's sandboxes in use
	faultKilnKill      = "kiln_kill"      // SIGKILL to kiln, started again on the same data and INSTANCE_ID
	faultDaemonRestart = "daemon_restart" // SIGTERM to dockerd, started again with deploy/ensure-docker.sh
	faultRedisRestart  = "redis_restart"  // SIGKILL to redis-server, started again on the same files
)

// readyWithin bounds the recovery from any fault.
const readyWithin = 3 * time.Minute

// faultRecord is one fault: when it was injected, when the part that failed was back,
// and when kiln served again (/health/ready 200 and a run that succeeded).
type faultRecord struct {
	Kind     string    `json:"kind"`
	Start    time.Time `json:"start"`
	Back     time.Time `json:"back"`
	Ready    time.Time `json:"ready"`
	Detail   string    `json:"detail"`
	Problems []string  `json:"problems,omitempty"`
}

// inject causes one fault and waits until kiln serves again.
func (s *soak) inject(kind string) *faultRecord {
	f := &faultRecord{Kind: kind}
	var after func() []string
	var err error
	switch kind {
	case faultSandboxKill:
		after, err = s.killSandboxes(f)
	case faultKilnKill:
		after, err = s.killKiln(f)
	case faultDaemonRestart:
		err = s.restartDaemon(f)
	case faultRedisRestart:
		err = s.restartRedis(f)
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	if err != nil {
		f.Problems = append(f.Problems, err.Error())
		return f
	}
	if err := s.awaitReady(f); err != nil {
		f.Problems = append(f.Problems, err.Error())
		return f
	}
	if after != nil {
		f.Problems = append(f.Problems, after()...)
	}
	return f
}

// awaitReady waits for /health/ready to answer 200 and then for a run in a new
// session (which writes to the store) to succeed.
func (s *soak) awaitReady(f *faultRecord) error {
	deadline := f.Back.Add(readyWithin)
	hc := http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(s.cl.base + "/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/health/ready not 200 within %s of the recovery", readyWithin)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		r := s.cl.exec(map[string]any{"code": "print('probe')", "timeout": 10000})
		if r.done && r.body.Status == "ok" && r.body.Stdout == "probe\n" {
			f.Ready = time.Now()
			return nil
		}
		if time.Now().After(deadline) {
			outcome, _ := classify(r)
			return fmt.Errorf("no run succeeded within %s of the recovery (last: %s)", readyWithin, outcome)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// victim is a run of the fault's own, going when the fault strikes.
type victim chan execResult

// startVictim starts a long run on a stream and returns once it has printed, so that
// it is inside its sandbox.
func (s *soak) startVictim() (victim, error) {
	started := make(chan struct{})
	v := make(victim, 1)
	var once sync.Once
	go func() {
		v <- s.cl.stream(stateless("import time\nprint('victim', flush=True)\ntime.sleep(25)", 40000), func(e kilntest.Event) {
			if e.Name == "stdout" {
				once.Do(func() { close(started) })
			}
		})
	}()
	select {
	case <-started:
		return v, nil
	case r := <-v:
		outcome, _ := classify(r)
		return nil, fmt.Errorf("the fault's own run ended before the fault: %s", outcome)
	case <-time.After(execBound):
		return nil, fmt.Errorf("the fault's own run did not start within %s", execBound)
	}
}

// check waits for the victim's answer, which must show want, and returns the problem
// if it does not.
func (v victim) check(want class) []string {
	select {
	case r := <-v:
		if outcome, cl := classify(r); cl != want {
			return []string{fmt.Sprintf("the run going at the fault answered %s (exit %d), want %s", outcome, r.body.ExitCode, want)}
		}
		return nil
	case <-time.After(execBound):
		return []string{fmt.Sprintf("the run going at the fault did not answer within %s", execBound)}
	}
}

// killSandboxes kills, while a run of its own is going, every sandbox of the instance
// that is not in the pool's ready list (the victim's, any client's in use, the live
// sessions' between their calls, and any warming). The victim must come back
// sandbox_died (or oom) with 137; a live session's next call resumes from its stored state.
func (s *soak) killSandboxes(f *faultRecord) (func() []string, error) {
	v, err := s.startVictim()
	if err != nil {
		return nil, err
	}
	pool, err := s.server().Pool()
	if err != nil {
		return nil, err
	}
	out, err := kilntest.Docker("ps", "-q", "--no-trunc", "--filter", "status=running", "--filter", "label=kiln.instance="+s.instance)
	if err != nil {
		return nil, fmt.Errorf("docker ps: %v: %s", err, out)
	}
	var targets []string
	for _, id := range strings.Fields(out) {
		ready := false
		for _, c := range pool.Containers {
			ready = ready || strings.HasPrefix(id, c.ID)
		}
		if !ready {
			targets = append(targets, id)
		}
	}
	f.Start = time.Now()
	killed := 0
	for _, id := range targets {
		if _, err := kilntest.Docker("kill", "-s", "KILL", id); err == nil {
			killed++
		}
	}
	f.Back = time.Now()
	f.Detail = fmt.Sprintf("%d of %d running sandboxes killed (the rest were ready in the pool)", killed, len(strings.Fields(out)))
	f.Problems = append(f.Problems, v.check(classDied)...)
	return nil, nil
}

// killKiln kills kiln with SIGKILL while a run of its own is going (its stream must
// end without an answer) and starts it again at once on the same data, the same
// INSTANCE_ID and the same address. The new kiln must remove the containers the killed
// one left.
func (s *soak) killKiln(f *faultRecord) (func() []string, error) {
	v, err := s.startVictim()
	if err != nil {
		return nil, err
	}
	left, err := kilntest.Containers(s.instance)
	if err != nil {
		return nil, err
	}
	f.Start = time.Now()
	s.retire()
	f.Problems = append(f.Problems, v.check(classConn)...)
	srv, err := kilntest.Start(kilntest.Options{Key: key, Env: s.env, NoWait: true})
	if err != nil {
		return nil, fmt.Errorf("starting kiln again: %w", err)
	}
	f.Back = time.Now()
	s.setServer(srv)
	f.Detail = fmt.Sprintf("the killed kiln left %d containers", len(left))
	return func() []string {
		now, err := kilntest.Containers(s.instance)
		if err != nil {
			return []string{err.Error()}
		}
		var p []string
		for _, id := range left {
			for _, n := range now {
				if n == id {
					p = append(p, fmt.Sprintf("container %.12s of the killed kiln is still there once the new one is ready", id))
				}
			}
		}
		return p
	}, nil
}

// restartDaemon stops the dockerd of /var/run/docker.pid with SIGTERM while a run of
// its own is going (its sandbox dies with the daemon: it must answer sandbox_died),
// leaves it away for two seconds, and starts it again with deploy/ensure-docker.sh.
func (s *soak) restartDaemon(f *faultRecord) error {
	pid, err := kilntest.DockerdPID()
	if err != nil {
		return err
	}
	v, err := s.startVictim()
	if err != nil {
		return err
	}
	f.Start = time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM dockerd: %w", err)
	}
	for kilntest.Alive(pid) {
		if time.Since(f.Start) > 2*time.Minute {
			return fmt.Errorf("dockerd %d still runs 2m after SIGTERM", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped := time.Since(f.Start)
	f.Problems = append(f.Problems, v.check(classDied)...)
	time.Sleep(2 * time.Second) // calls meet a daemon that is away
	if err := kilntest.EnsureDocker(); err != nil {
		return err
	}
	f.Back = time.Now()
	f.Detail = fmt.Sprintf("dockerd %d took %s to stop", pid, stopped.Round(100*time.Millisecond))
	return nil
}

// closeInherited marks every descriptor this process inherited, beyond stdin, stdout
// and stderr, close-on-exec. flock(1) hands the descriptor of its lock down to the
// command it runs: without this, the dockerd that the soak starts again would hold
// /tmp/kiln-dockerd.lock for its whole life, and every later flock on it would wait.
func closeInherited() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// redisAway is how long Redis stays down: longer than go-redis's own retries, so that
// calls meet the outage.
const redisAway = 5 * time.Second

// restartRedis kills redis-server, leaves it away for redisAway, and starts it again on
// the same port and files.
func (s *soak) restartRedis(f *faultRecord) error {
	if s.redis == nil {
		return fmt.Errorf("no Redis in a %s run", s.store)
	}
	f.Start = time.Now()
	s.redis.kill()
	time.Sleep(redisAway)
	if err := s.redis.start(); err != nil {
		return err
	}
	f.Back = time.Now()
	f.Detail = fmt.Sprintf("SIGKILL, %s away", redisAway)
	return nil
}
