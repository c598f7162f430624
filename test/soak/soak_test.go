package soak

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The kiln under soak. Limits are set here because the checks depend on them.
const (
	key         = "soak-key"
	poolSize    = 3
	pidsLimit   = 64
	memoryMB    = 256
	maxOutputKB = 64
)

// soak is one run against one kiln (one store), with the state its clients, its
// sampler and its faults share.
type soak struct {
	t        *testing.T
	plan     plan
	store    string
	env      []string
	instance string
	cl       *client
	redis    *redisServer
	rec      *recorder
	sessions *registry
	results  string // the directory of the report

	mu      sync.Mutex
	srv     *kilntest.Server // nil between a kill and the restart
	lives   []time.Time      // when each kiln process started
	samples []sample
	done    chan struct{}    // closed when the mix stops
	pace    <-chan time.Time // a tick per operation the clients may start
}

func runSoak(t *testing.T, p plan, store string) {
	s := newSoak(t, p, store)
	srv, err := kilntest.Start(kilntest.Options{Key: key, Env: s.env})
	if err != nil {
		t.Fatal(err)
	}
	s.setServer(srv)
	t.Cleanup(s.cleanup)
	t.Logf("%s soak, %s store: kiln %s (instance %s), seed %d", p.mode, store, s.cl.base, s.instance, p.seed)

	began := time.Now()
	pace := time.NewTicker(time.Duration(float64(time.Second) / p.opsPerSec))
	defer pace.Stop()
	s.pace = pace.C
	var wg sync.WaitGroup
	wg.Add(1)
	go s.sample(&wg)
	for i := range p.clients {
		w := &worker{s: s, rng: rand.New(rand.NewSource(p.seed + int64(i)))}
		wg.Add(1)
		go w.loop(&wg)
	}
	faults, enough := s.runFaults(began)
	close(s.done)
	wg.Wait()
	r := &result{plan: p, store: store, began: began, took: time.Since(began), faults: faults, enough: enough,
		requests: s.rec.list()}

	r.settled = s.settle()
	r.verified = s.verifyAll()
	if srv := s.server(); srv != nil {
		if err := srv.Stop(60 * time.Second); err != nil {
			r.stopErr = err.Error()
		}
		s.writeLog(len(s.lives)-1, srv)
	}
	left, err := kilntest.Containers(s.instance)
	if err != nil {
		r.stopErr += fmt.Sprintf(" (docker ps: %v)", err)
	}
	r.left = len(left)
	r.samples, r.lives = s.samples, s.lives
	r.finish(t, s.results, s.env)
}

func newSoak(t *testing.T, p plan, store string) *soak {
	results := filepath.Join(kilntest.Root(), "test", "results", "soak", store)
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, plan: p, store: store, instance: "soak-" + store + "-" + fmt.Sprint(p.seed%100000),
		rec: &recorder{}, sessions: &registry{max: p.maxSessions, steps: p.steps}, results: results,
		done: make(chan struct{})}
	addr := "127.0.0.1:" + kilntest.FreePort(t)
	s.cl = newClient("http://"+addr, key)
	s.env = []string{
		"API_KEYS=" + key, "INSTANCE_ID=" + s.instance, "LISTEN_ADDR=" + addr, "DATA_DIR=" + t.TempDir(),
		fmt.Sprint("POOL_SIZE=", poolSize), "POOL_WARMERS=2", "PRELOAD_MODULES=none",
		fmt.Sprint("SANDBOX_MEMORY_MB=", memoryMB), fmt.Sprint("SANDBOX_PIDS_LIMIT=", pidsLimit),
		"SANDBOX_CPUS=1", "SANDBOX_TMP_MB=32", "SANDBOX_DATA_MB=64",
		fmt.Sprint("MAX_OUTPUT_KB=", maxOutputKB), "MAX_FILE_SIZE_MB=1",
		"DEFAULT_TIMEOUT_MS=10000", "MAX_TIMEOUT_MS=60000", "TIMEOUT_GRACE_MS=1000", "INTERRUPT_GRACE_MS=2000",
		"QUEUE_TIMEOUT_SECONDS=20", "MAX_QUEUE=16", "REPL_WARMUP_TIMEOUT_SECONDS=20",
		"SHUTDOWN_GRACE_SECONDS=20", "LOG_LEVEL=info",
		// The sessions' model holds every answered state as stored, across kills of kiln
		// with SIGKILL: the strict order, in which nothing answered is lost.
		"STATE_SAVE_DELAY_MS=0",
	}
	if store == "redis" {
		s.redis = startRedis(t)
		s.env = append(s.env, "REDIS_URL="+s.redis.url())
	}
	return s
}

func (s *soak) server() *kilntest.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// setServer makes srv the kiln under soak: a new process life begins.
func (s *soak) setServer(srv *kilntest.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv = srv
	s.lives = append(s.lives, time.Now())
}

// retire kills the kiln under soak with SIGKILL and keeps its log.
func (s *soak) retire() {
	s.mu.Lock()
	srv, life := s.srv, len(s.lives)-1
	s.srv = nil
	s.mu.Unlock()
	srv.Kill()
	s.writeLog(life, srv)
}

func (s *soak) writeLog(life int, srv *kilntest.Server) {
	name := filepath.Join(s.results, fmt.Sprintf("%s-kiln-%d.log", s.plan.mode, life))
	if err := os.WriteFile(name, []byte(srv.Logs()), 0o644); err != nil {
		s.t.Errorf("writing the kiln log: %v", err)
	}
}

// next waits for the pace to allow one more operation; false means the mix is over.
func (s *soak) next() bool {
	select {
	case <-s.done:
		return false
	case <-s.pace:
		return true
	}
}

// sample reads the kiln process every plan.sampleEvery until the mix stops.
func (s *soak) sample(wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(s.plan.sampleEvery)
	defer tick.Stop()
	for {
		s.mu.Lock()
		srv, life := s.srv, len(s.lives)-1
		s.mu.Unlock()
		if srv != nil {
			if x, err := read(srv.PID(), s.cl); err == nil {
				x.Life = life
				s.mu.Lock()
				s.samples = append(s.samples, x)
				s.mu.Unlock()
			}
		}
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
	}
}

// runFaults injects the plan's faults for this store, spread over the mix and each
// after a fault-free gap, then lets the mix run until it is long and large enough. It
// reports whether the mix reached its size.
func (s *soak) runFaults(began time.Time) ([]*faultRecord, bool) {
	kinds := s.plan.faults[s.store]
	var faults []*faultRecord
	calm := began.Add(s.plan.warm) // the earliest the next fault may come
	for i, kind := range kinds {
		at := began.Add(s.plan.minDuration * time.Duration(i+1) / time.Duration(len(kinds)+1))
		time.Sleep(time.Until(later(at, calm)))
		s.t.Logf("%5.1fs: %s after %d requests", time.Since(began).Seconds(), kind, s.rec.n.Load())
		f := s.inject(kind)
		faults = append(faults, f)
		if f.Ready.IsZero() {
			s.t.Errorf("%s: kiln did not recover: %v", kind, f.Problems)
			return faults, false
		}
		s.t.Logf("%5.1fs: ready again %.1fs after the %s", time.Since(began).Seconds(), f.Ready.Sub(f.Start).Seconds(), kind)
		calm = f.Ready.Add(s.plan.gap)
	}
	end := later(began.Add(s.plan.minDuration), calm.Add(s.plan.tail-s.plan.gap))
	for {
		if !time.Now().Before(end) && s.rec.n.Load() >= s.plan.minRequests {
			return faults, true
		}
		if time.Since(began) > s.plan.maxDuration {
			return faults, false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settle waits until only the pool's own containers are left: the reaper takes what
// the faults left behind. It returns what it saw last.
func (s *soak) settle() string {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		srv := s.server()
		if srv == nil {
			return "no kiln"
		}
		p, perr := srv.Pool()
		ids, err := kilntest.Containers(s.instance)
		if perr == nil && err == nil && p.Ready == p.Target && p.InUse == 0 && p.Warming == 0 && len(ids) == p.Target+p.Kept {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("after 2m: pool %+v (err %v), %d containers (err %v)", p, perr, len(ids), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// verifyAll reads every session back, three at a time.
func (s *soak) verifyAll() *recorder {
	rec := &recorder{}
	models := s.sessions.all()
	work := make(chan *model)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				verify(s.cl, rec, m)
			}
		}()
	}
	for _, m := range models {
		work <- m
	}
	close(work)
	wg.Wait()
	return rec
}

// cleanup leaves nothing behind when the run stopped early: the daemon up, no kiln,
// no container of the instance.
func (s *soak) cleanup() {
	if err := kilntest.EnsureDocker(); err != nil {
		s.t.Errorf("the Docker daemon is not back: %v", err)
	}
	if srv := s.server(); srv != nil {
		select {
		case <-srv.Exited():
		default:
			srv.Kill()
			s.writeLog(len(s.lives)-1, srv)
		}
	}
	if ids, err := kilntest.Containers(s.instance); err == nil && len(ids) > 0 {
		_, _ = kilntest.Docker(append([]string{"rm", "-f"}, ids...)...)
	}
}
