package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/e2b"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/health"
	"github.com/kilnsh/kiln/jupyter"
	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/mcp"
	"github.com/kilnsh/kiln/metrics"
	"github.com/kilnsh/kiln/objstore"
	"github.com/kilnsh/kiln/pool"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/replica"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// Main is a running kiln: it owns the sandbox runtime, the pools and the HTTP server, and
// wires them together. Run starts it; Close drains and removes everything it owns.
type Main struct {
	cfg Config
	log *slog.Logger

	runtime sandbox.Runtime
	pools   *pool.Set
	gate    *egress.Gate  // the sandboxes' way out; nil when egress is off
	live    *session.Live // nil when LIVE_SESSIONS is off
	store   store.Store
	// redis is the store when REDIS_URL is set: the replica directory shares its client.
	redis *store.Redis
	// directory is where replicas find each other; nil for a lone kiln.
	directory *replica.Directory
	bg        sync.WaitGroup     // background loops: the session sweeper, the reaper
	bgCtx     context.Context    // governs them
	stopBg    context.CancelFunc // stops them
	exec      *executor.Executor
	sessions  *session.Service
	mcp       *mcp.Handler
	jupyter   *jupyter.Handler
	e2b       *e2b.Handler
	server    *http.Server
	listener  net.Listener
	// monitor serves METRICS_LISTEN_ADDR when it is set.
	monitor         *http.Server
	monitorListener net.Listener
	served          chan error

	closeOnce sync.Once
	closeErr  error
}

// NewMain returns a Main for cfg; nothing starts before Run.
func NewMain(cfg Config, log *slog.Logger) *Main {
	return &Main{cfg: cfg, log: log, served: make(chan error, 1)}
}

// Addr returns the address the server listens on, once Run has returned.
func (m *Main) Addr() string { return m.listener.Addr().String() }

// Run connects to the sandbox runtime (Docker, or Kubernetes), removes this instance's
// orphans, starts the pools and the HTTP server, and returns once the server listens.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.cfg
	limits := m.limits()
	pctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	rt, err := m.newRuntime(pctx, frameLimits(limits, cfg.SandboxDataMB<<20))
	if err != nil {
		return err
	}
	m.runtime = rt
	traits := rt.Traits()
	limits.Resizable = traits.Resizes
	if err := rt.Ping(pctx); err != nil {
		return err
	}
	specs, err := cfg.PoolSpecs()
	if err != nil {
		return err
	}
	// The first pool's image must be there. Another's may still be building (make run
	// builds the polyglot image once Python answers): that pool waits for it, and its
	// languages answer 503 meanwhile.
	awaited := map[string]bool{}
	for i, ps := range specs {
		if _, err := rt.ImageID(pctx, ps.Image); err != nil {
			if i == 0 || !errors.Is(err, sandbox.ErrImageMissing) {
				return fmt.Errorf("sandbox image %s of pool %s: %w", ps.Image, ps.Name, err)
			}
			awaited[ps.Name] = true
		}
	}
	if n, err := rt.RemoveOrphans(pctx); err != nil {
		m.log.Warn("removing orphaned sandboxes failed", "err", err)
	} else if n > 0 {
		m.log.Info("removed orphaned sandboxes of an earlier run", "count", n, "instance", cfg.InstanceID)
	}

	met := metrics.New()
	m.pools = m.newPools(rt, specs, awaited, met)
	met.WatchPools(m.pools)
	m.background(m.pools.Probe)

	if err := m.openStore(ctx); err != nil {
		return err
	}
	m.background(pool.NewReaper(rt, m.pools.Holds, time.Duration(cfg.WarmupTimeoutSecs)*time.Second, m.log).Run)
	m.exec = executor.New(m.pools, limits, m.log)
	var liveHealth health.Live // nil when off, not a nil *session.Live, which would not compare nil
	if cfg.LiveSessions && !cfg.ReplEnabled {
		// Each execution starts its own interpreter: there is none to keep between calls.
		m.log.Info("live sessions are off: REPL_ENABLED=false starts an interpreter per execution")
	}
	if cfg.LiveSessions && cfg.ReplEnabled {
		m.live = live.New(live.Config{
			Max:      cfg.LiveSessionsMax,
			PerOwner: cfg.QuotaLiveSessions,
			Idle:     time.Duration(cfg.LiveSessionIdleSeconds) * time.Second,
			Lifetime: time.Duration(cfg.LiveSessionLifetimeSeconds) * time.Second,
		}, m.pools.Release, m.log)
		// A runtime that cannot see its room (a cluster's nodes) says when a new sandbox
		// finds none: the pool then has an idle live session give up its own, so that live
		// sessions never starve the pool. On Docker, LIVE_SESSIONS_MAX keeps them within
		// the host's memory.
		m.pools.MakeRoomWith(m.live.EvictOldest)
		m.background(m.live.Run)
		met.WatchLive(m.live)
		liveHealth = m.live
	}
	var gate session.Egress // nil when off, not a nil *egress.Gate
	if cfg.egress.On() {
		m.gate = newGate(cfg.egress, met, m.log)
		gate = m.gate
		m.log.Info("egress is on: sandboxes reach what the policy allows through kiln's proxy")
	}
	sessions := session.New(session.Config{
		Egress:     gate,
		Store:      m.store,
		Runner:     met.Observe(m.exec),
		Validate:   m.exec.Validate,
		CheckState: func(blob []byte) error { return executor.CheckState(blob, limits.MaxStateBytes, limits.MaxStateRaw) },
		Cancel:     m.exec.Cancel,
		Continue:   m.exec.Continue,
		Live:       m.live,
		Hold:       m.pools,
		TurnWait:   time.Duration(cfg.QueueTimeoutSeconds * float64(time.Second)),
		RetryAfter: limits.RetryAfter,
		Limits: session.Limits{MaxFileBytes: limits.MaxFileBytes, MaxFilesPerSession: cfg.MaxFilesPerSession,
			MaxStoredBytes: cfg.QuotaStorageMB << 20, MaxConcurrent: cfg.MaxConcurrentPerKey,
			FixedSize: !limits.Resizable, DefaultMilliCPU: limits.DefaultMilliCPU, DefaultMemoryMB: limits.DefaultMemoryMB},
		Log:             m.log,
		StateSaveDelay:  time.Duration(cfg.StateSaveDelayMS) * time.Millisecond,
		RollbackOnError: cfg.StateOnError == execution.OnErrorRollback,
		Capture:         m.exec,
		Refused:         met.QuotaRefused,
		// The captures waiting for their store, all sessions together: four states at
		// their cap, and at least 256 MB, before a capture is stored in its turn.
		PendingMaxBytes: max(256, 4*cfg.StateMaxSizeMB) << 20,
	})
	m.sessions = sessions
	keys := api.NewKeys(cfg.APIKeys)
	verifier, err := cfg.tokens()
	if err != nil {
		return err
	}
	var tokens api.Tokens // nil unless keys are configured: not a nil *auth.Verifier
	if verifier != nil {
		tokens = verifier
		m.log.Info("signed user identities accepted", "issuer", cfg.JWTIssuer, "audience", cfg.JWTAudience, "algorithms", cfg.JWTAlgorithms)
	}
	if !keys.Enabled() && tokens == nil {
		m.log.Warn("no API_KEYS and no JWT keys configured: authentication is off; anyone who reaches this port can run code")
	}
	if least := runtimes[cfg.Runtime].minMemoryMB(cfg); cfg.SandboxMemoryMB < least {
		m.log.Warn("SANDBOX_MEMORY_MB is below what this runtime's sandboxes need; see docs/security.md",
			"memory_mb", cfg.SandboxMemoryMB, "least_mb", least, "runtime", traits.Isolation)
	}
	m.mcp = mcp.New(mcp.Config{
		Sessions:    sessions,
		Caller:      func(r *http.Request) session.Caller { return api.CallerFrom(r.Context()) },
		Log:         m.log,
		IdleTimeout: time.Duration(cfg.MCPIdleMinutes) * time.Minute,
	})
	m.jupyter = jupyter.New(jupyter.Config{
		Sessions:       sessions,
		Caller:         api.CallerOf,
		Log:            m.log,
		CellTimeout:    time.Duration(cfg.MaxTimeoutMS) * time.Millisecond,
		MaxKernels:     cfg.JupyterMaxKernels,
		MaxConnections: cfg.JupyterMaxConnections,
		MaxQueuedBytes: cfg.JupyterMaxQueuedMB << 20,
		// A cell's code at its limit, with room for the message around it.
		MaxCellBytes: int64(cfg.MaxCodeKB)<<10 + 1<<20,
	})
	// No E2B routes without templates; a nil *e2b.Handler would not be a nil api.E2B.
	var e2bFront api.E2B
	if templates, _ := cfg.e2bTemplates(); len(templates) > 0 { // checked by Validate
		m.e2b = e2b.New(e2b.Config{
			Sandboxes:    sessions,
			Caller:       api.CallerOf,
			Log:          m.log,
			Templates:    templates,
			MaxTimeout:   time.Duration(cfg.E2BMaxTimeoutSeconds) * time.Second,
			MaxPerCaller: cfg.E2BMaxSandboxesPerCaller,
			MilliCPU:     int64(cfg.SandboxCPUs * 1000),
			MemoryMB:     cfg.SandboxMemoryMB,
			DiskMB:       cfg.SandboxDataMB,
		})
		e2bFront = m.e2b
	}
	profiles, _ := api.ParseProfiles(cfg.ExecutionProfiles) // checked by Validate
	handler := api.New(api.Config{
		InstanceID: cfg.InstanceID,
		Profiles:   profiles,
		Keys:       keys,
		Tokens:     tokens,
		Sessions:   sessions,
		Health: &health.Checker{
			Runtime: rt, Pool: m.pools, Executor: m.exec, Live: liveHealth,
			Image: specs[0].Image, Images: poolImages(specs), Isolation: traits.Isolation, Repl: cfg.ReplEnabled,
			Store: m.storeKind(), Auth: keys.Enabled() || tokens != nil,
		},
		Log:                m.log,
		MaxFileBytes:       limits.MaxFileBytes,
		MaxStateBytes:      limits.MaxStateBytes,
		MaxBodyBytes:       maxBodyBytes(limits),
		MaxUploadBytes:     cfg.MaxUploadMB << 20,
		SpoolDir:           spoolDir(cfg.DataDir),
		MaxFiles:           cfg.MaxFilesPerSession,
		Observer:           met,
		Metrics:            met.Handler(),
		Stats:              met,
		RateLimit:          api.RateLimit{PerMinute: cfg.RateLimitPerMinute},
		MCP:                m.mcp,
		Jupyter:            m.jupyter,
		E2B:                e2bFront,
		Replicas:           m.replicas(),
		AdminKeys:          api.NewKeys(cfg.AdminKeys),
		SeparateMonitoring: cfg.MetricsAddr != "",
	})
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("listen on METRICS_LISTEN_ADDR %s: %w", cfg.MetricsAddr, err)
		}
		m.monitorListener = mln
		m.monitor = &http.Server{
			Handler: handler.Monitoring(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
			WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
			ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		}
		go func() { _ = m.monitor.Serve(mln) }()
		m.log.Info("monitoring on its own address", "addr", mln.Addr().String(), "admin_keys", len(cfg.AdminKeys) > 0)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		if m.monitor != nil {
			_ = m.monitor.Close()
		}
		return fmt.Errorf("listen on LISTEN_ADDR %s: %w", cfg.Addr, err)
	}
	m.listener = ln
	hardest := time.Duration(cfg.MaxTimeoutMS+cfg.TimeoutGraceMS)*time.Millisecond + time.Duration(cfg.QueueTimeoutSeconds*float64(time.Second))
	m.server = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      hardest + 2*time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	// HTTP/2 without TLS (prior knowledge) as well as HTTP/1.1: envd's Connect clients
	// may speak either, as they do to E2B's own envd.
	m.server.Protocols = new(http.Protocols)
	m.server.Protocols.SetHTTP1(true)
	m.server.Protocols.SetUnencryptedHTTP2(true)
	go func() { m.served <- m.server.Serve(ln) }()
	m.log.Info("kiln listening", "addr", ln.Addr().String(), "pools", fmt.Sprint(specs), "sandboxes", cfg.Runtime, "runtime", traits.Isolation, "instance", cfg.InstanceID)
	return nil
}

// removeWithin bounds the removal of kiln's sandboxes at Close, which ctx does not.
const removeWithin = 30 * time.Second

// Close stops taking executions, lets in-flight ones finish within the shutdown grace
// (ctx ending cuts that short), then removes every sandbox the pool owns. It is
// idempotent.
func (m *Main) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		var errs []error
		if m.server != nil {
			grace := time.Duration(m.cfg.ShutdownGraceSeconds) * time.Second
			sctx, cancel := context.WithTimeout(ctx, grace)
			// The listener stays open while executions finish, so that new ones are
			// answered 503 by the draining executor rather than refused; then Shutdown
			// closes it and waits for the remaining handlers within what is left of
			// the grace.
			m.server.SetKeepAlivesEnabled(false)
			if m.sessions != nil {
				// Calls store their states before they answer from now on, and the pending
				// ones are stored first: the other replicas, or the next kiln, resume these
				// sessions from the store.
				m.sessions.StoreAll(sctx)
			}
			if m.directory != nil {
				// The other replicas stop sending sessions here (they resume them from
				// the store), while this one's runs still get their continuations and
				// cancels until they end.
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				if err := m.directory.Drain(wctx, announceTTL); err != nil {
					m.log.Warn("announcing the drain failed", "err", err)
				}
				wcancel()
			}
			if n := m.exec.Running(); n > 0 {
				m.log.Info("waiting for in-flight executions", "count", n)
			}
			if err := m.exec.Drain(sctx); err != nil {
				m.log.Warn("grace period over with executions still running", "count", m.exec.Running())
			}
			if m.sessions != nil {
				m.sessions.StoreAll(sctx) // what the calls under way at the drain left pending
			}
			// MCP sessions hold event streams open; ending them lets Shutdown finish.
			m.mcp.Close()
			// A held E2B sandbox ends with the process that holds it; its streams end too.
			if m.e2b != nil {
				m.e2b.Close()
			}
			if err := m.jupyter.Close(sctx); err != nil {
				m.log.Warn("grace period over with Jupyter cells still running", "err", err)
			}
			if err := m.server.Shutdown(sctx); err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
				_ = m.server.Close()
			}
			if m.monitor != nil {
				_ = m.monitor.Close() // it serves nothing that must finish
			}
			cancel()
		}
		if m.gate != nil {
			_ = m.gate.Close() // every call has ended: nothing of theirs is left open
		}
		if m.stopBg != nil {
			m.stopBg()
			m.bg.Wait()
		}
		if m.directory != nil {
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			if err := m.directory.Withdraw(wctx); err != nil {
				m.log.Warn("withdrawing from the replica directory failed", "err", err)
			}
			wcancel()
		}
		if m.live != nil {
			m.live.Close() // every call has ended: their sessions' sandboxes go back to their pools
		}
		if m.store != nil {
			errs = append(errs, m.store.Close())
		}
		// The sandboxes go whatever ctx says: a drain cut short (ctx cancelled) still
		// removes them, within a bound of its own.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), removeWithin)
		defer rcancel()
		if m.pools != nil {
			if err := m.pools.Close(rctx); err != nil {
				errs = append(errs, fmt.Errorf("pool close: %w", err))
			}
		}
		if m.runtime != nil {
			// Every sandbox of this instance still there is kiln's to remove now.
			if n, err := m.runtime.RemoveOrphans(rctx); err != nil {
				errs = append(errs, fmt.Errorf("final sweep: %w", err))
			} else if n > 0 {
				// A warm-up cut short by the shutdown mid-create leaves its sandbox unknown to the
				// pool; so does a removal that failed.
				m.log.Info("final sweep removed sandboxes the pools did not know of", "count", n)
			}
			errs = append(errs, m.runtime.Close())
		}
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

// openStore opens Redis when REDIS_URL is set, else the embedded store under
// DATA_DIR, and starts the sweeper of expired sessions.
func (m *Main) openStore(ctx context.Context) error {
	if err := makeSpool(m.cfg.DataDir); err != nil {
		return err
	}
	ttl := time.Duration(m.cfg.SessionTTLHours * float64(time.Hour))
	if m.cfg.RedisURL != "" {
		st, err := store.OpenRedis(ctx, m.cfg.RedisURL, ttl, m.cfg.MaxFileSizeMB<<20)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		if m.cfg.S3Endpoint != "" {
			bucket, err := objstore.Open(ctx, objstore.Config{
				Endpoint: m.cfg.S3Endpoint, Bucket: m.cfg.S3Bucket, Region: m.cfg.AWSRegion,
				AccessKey: m.cfg.AWSKeyID, SecretKey: m.cfg.AWSSecret, PathStyle: m.cfg.S3PathStyle,
			})
			if err != nil {
				return errors.Join(fmt.Errorf("S3_ENDPOINT: %w", err), st.Close())
			}
			st.WithObjects(bucket, m.log)
			m.log.Info("file contents and state blobs in the bucket", "endpoint", m.cfg.S3Endpoint, "bucket", m.cfg.S3Bucket)
		}
		m.store, m.redis = st, st
	} else {
		st, err := store.OpenDisk(m.cfg.DataDir, ttl)
		if err != nil {
			return fmt.Errorf("DATA_DIR %s: %w", m.cfg.DataDir, err)
		}
		m.store = st
	}
	m.background(func(ctx context.Context) { store.RunSweeper(ctx, m.store, time.Minute, m.log) })
	return nil
}

// Replicas announce themselves every announceEvery, for announceTTL: a replica that
// stops (SIGKILL, a lost node) owns nothing once its announcement has expired.
const (
	announceEvery = 3 * time.Second
	announceTTL   = 10 * time.Second
)

// replicas sets up forwarding between replicas when ADVERTISE_URL is set: this replica
// announces itself in the shared Redis until Close withdraws it.
func (m *Main) replicas() replica.Config {
	cfg := m.cfg
	if cfg.AdvertiseURL == "" || m.redis == nil {
		return replica.Config{}
	}
	client, prefix := m.redis.Client()
	m.directory = replica.NewDirectory(client, prefix, cfg.InstanceID, strings.TrimSuffix(cfg.AdvertiseURL, "/"))
	announce := func(ctx context.Context) {
		if err := m.directory.Announce(ctx, announceTTL); err != nil {
			m.log.Warn("announcing this replica failed", "err", err)
		}
	}
	announce(context.Background())
	m.background(func(ctx context.Context) {
		t := time.NewTicker(announceEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				announce(ctx)
			}
		}
	})
	m.log.Info("replica announced", "advertise_url", cfg.AdvertiseURL, "instance", cfg.InstanceID)
	runTTL := time.Duration(cfg.MaxTimeoutMS)*time.Millisecond + time.Duration(cfg.MaxToolRounds*cfg.ToolResultTimeoutSecs)*time.Second
	return replica.Config{
		Peers:      m.directory,
		Secret:     []byte(cfg.PeerSecret),
		SessionTTL: time.Duration(cfg.LiveSessionIdleSeconds) * time.Second,
		RunTTL:     runTTL,
		MCPTTL:     time.Duration(cfg.MCPIdleMinutes) * time.Minute,
	}
}

// background runs loop until Close: every background loop shares one context, which
// Close cancels before it waits for them all.
func (m *Main) background(loop func(ctx context.Context)) {
	if m.stopBg == nil {
		m.bgCtx, m.stopBg = context.WithCancel(context.Background())
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		loop(m.bgCtx)
	}()
}

func (m *Main) storeKind() string {
	switch {
	case m.cfg.RedisURL != "" && m.cfg.S3Endpoint != "":
		return "redis+s3"
	case m.cfg.RedisURL != "":
		return "redis"
	}
	return "disk"
}

// newPools starts a pool per spec, each with its image, in one Set that lends by the
// languages their sandboxes say they run.
func (m *Main) newPools(rt sandbox.Runtime, specs []PoolSpec, awaited map[string]bool, met *metrics.Metrics) *pool.Set {
	cfg := m.cfg
	members := make([]pool.Member, 0, len(specs))
	for _, ps := range specs {
		var await func(context.Context) error
		if awaited[ps.Name] {
			await = func(ctx context.Context) error {
				_, err := rt.ImageID(ctx, ps.Image)
				return err
			}
		}
		p := pool.New(pool.Config{
			Await:           await,
			AwaitRetryAfter: 30 * time.Second,
			Spec:            m.spec(ps.Image),
			Size:            ps.Size,
			Warmers:         cfg.PoolWarmers,
			RefillDelay:     time.Duration(cfg.RefillDelayMS) * time.Millisecond,
			QueueTimeout:    time.Duration(cfg.QueueTimeoutSeconds * float64(time.Second)),
			MaxQueue:        cfg.MaxQueue,
			WarmupTimeout:   time.Duration(cfg.WarmupTimeoutSecs) * time.Second,
			BackoffMin:      500 * time.Millisecond,
			BackoffMax:      5 * time.Second,
		}, rt, m.log.With("pool", ps.Name), met.Pool(ps.Name))
		members = append(members, pool.Member{Name: ps.Name, Pool: p})
	}
	return pool.NewSet(members, time.Duration(cfg.WarmupTimeoutSecs)*time.Second, m.log)
}

func poolImages(specs []PoolSpec) map[string]string {
	out := make(map[string]string, len(specs))
	for _, ps := range specs {
		out[ps.Name] = ps.Image
	}
	return out
}

func (m *Main) limits() executor.Limits {
	c := m.cfg
	return executor.Limits{
		MaxCodeBytes:    c.MaxCodeKB << 10,
		MaxStateBytes:   c.StateMaxSizeMB << 20,
		MaxStateRaw:     c.StateMaxRawMB << 20,
		MaxOutputBytes:  c.MaxOutputKB << 10,
		MaxFileBytes:    c.MaxFileSizeMB << 20,
		MaxFiles:        c.MaxOutputFiles,
		DefaultTimeout:  time.Duration(c.DefaultTimeoutMS) * time.Millisecond,
		MinTimeout:      time.Duration(c.MinTimeoutMS) * time.Millisecond,
		MaxTimeout:      time.Duration(c.MaxTimeoutMS) * time.Millisecond,
		Grace:           time.Duration(c.TimeoutGraceMS) * time.Millisecond,
		InterruptGrace:  time.Duration(c.InterruptGraceMS) * time.Millisecond,
		Figures:         c.AutoFigures,
		RetryAfter:      max(1, int(c.QueueTimeoutSeconds/2)),
		RollbackOnError: c.StateOnError == execution.OnErrorRollback,

		MaxTools:           c.MaxTools,
		MaxToolCallBytes:   c.MaxToolCallBytes,
		MaxToolResultBytes: c.MaxToolResultBytes,
		MaxToolRounds:      c.MaxToolRounds,
		ToolResultTimeout:  time.Duration(c.ToolResultTimeoutSecs) * time.Second,

		DefaultMilliCPU: int64(c.SandboxCPUs * 1000),
		MaxMilliCPU:     int64(c.MaxSandboxCPUs * 1000),
		DefaultMemoryMB: c.SandboxMemoryMB,
		MaxMemoryMB:     c.MaxSandboxMemoryMB,
		ExtraMemoryMB:   c.warmHeapMB(),
	}
}

// frameLimits bound one response frame. Its header holds two capped outputs and a
// result, each at most 6 times its cap once JSON-escaped (\u0000 for one byte), and the
// files' paths; its payloads are the state, the files, raw, and the rich outputs. The
// files come out of /mnt/data, so they are never more than it holds (dataBytes).
func frameLimits(l executor.Limits, dataBytes int64) sandbox.FrameLimits {
	const perPath = 32 << 10 // a path of 4096 bytes, JSON-escaped, and its size
	return sandbox.FrameLimits{
		Header: int(3*6*l.MaxOutputBytes + int64(l.MaxFiles)*perPath + 1<<20),
		Binary: l.MaxStateBytes + min(int64(l.MaxFiles)*l.MaxFileBytes, dataBytes) + protocol.MaxOutputsBytes + 1<<20,
	}
}

// maxBodyBytes bounds a JSON request body: code, a state blob and input files (as
// base64 they grow by a third) plus room for the JSON around them.
func maxBodyBytes(l executor.Limits) int64 {
	return int64(l.MaxCodeBytes) + (l.MaxStateBytes+l.MaxFileBytes)*4/3 + 1<<20
}

// spoolDir is where uploads wait for the store: on the data volume (a container's /tmp
// is memory), or the system's temporary directory without one.
func spoolDir(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "spool")
}

// makeSpool makes the uploads' spool directory at start, so that a DATA_DIR kiln cannot
// write stops it now rather than failing its first upload past 64 KiB, with Redis too.
func makeSpool(dataDir string) error {
	dir := spoolDir(dataDir)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("DATA_DIR %s: uploads past 64 KiB are spooled in %s, which kiln cannot make: %w", dataDir, dir, err)
	}
	return nil
}
