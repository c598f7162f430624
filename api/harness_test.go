package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/replica"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// The bounds of the tests' servers: small, so that every one can be crossed cheaply.
const (
	TestMaxBody   = 4096     // largest JSON body
	TestMaxUpload = 16 << 10 // largest upload body
	TestMaxFiles  = 3        // files in one upload, and per session
	testTTL       = time.Hour
)

// TestLimits are the executor's limits in the tests' servers.
var TestLimits = executor.Limits{
	MaxCodeBytes:   1024,
	MaxStateBytes:  2048,
	MaxStateRaw:    8 << 10,
	MaxOutputBytes: 1 << 10,
	MaxFileBytes:   1 << 10,
	MaxFiles:       5,
	DefaultTimeout: 30 * time.Second,
	MinTimeout:     100 * time.Millisecond,
	MaxTimeout:     time.Minute,
	MaxTools:       4,
}

// FakeHealth is ready unless Err is set.
type FakeHealth struct{ Err error }

// Ready implements Health.
func (h FakeHealth) Ready(context.Context) error { return h.Err }

// Detailed implements Health.
func (h FakeHealth) Detailed(context.Context) any { return map[string]string{"status": "ok"} }

// refused is what tells the Observer of the session layer's quota refusals, as cmd/kiln
// wires kiln's metrics; nil without an Observer.
func (cfg HarnessConfig) refused() func(string) {
	if cfg.Observer == nil {
		return nil
	}
	return cfg.Observer.QuotaRefused
}

// HarnessConfig is what a test changes of a Harness. The zero value is a server with
// auth off, ready, whose sandboxes print "hi".
type HarnessConfig struct {
	Keys      []string
	Tokens    Tokens
	Health    Health // FakeHealth{} when nil
	RateLimit RateLimit
	// MaxConcurrent is the session layer's execution slots per caller (session.Limits).
	MaxConcurrent int
	Observer      Observer
	Metrics       http.Handler
	Stats         StatsSource
	Profiles      []string // both when nil
	// Run is what the fake sandbox does with each execution. When nil it prints "hi"
	// and hands back the state it was given, as a run that changes nothing does.
	Run func(ctx context.Context, req executor.Request) (*executor.Result, error)
	// Release, when set, is called by every result's Release: where the handler hands
	// the sandbox back.
	Release func()
	// Cancel is what the session layer's cancel does; every execution is unknown
	// when nil.
	Cancel func(id, owner string) error
	// Log, when set, receives the server's JSON log lines; they are discarded when nil.
	Log io.Writer
	// InstanceID and Replicas: see Config.
	InstanceID string
	Replicas   replica.Config
	// AdminKeys and SeparateMonitoring: see Config.
	AdminKeys          []string
	SeparateMonitoring bool
}

// Harness is a Server over a real session.Service, on a disk store in a temporary
// directory, whose sandboxes are the package's one fake runner. It fails the test when
// a result the runner handed out was not released by the end of it.
type Harness struct {
	*Server
	Store store.Store

	mu       sync.Mutex
	reqs     []executor.Request
	results  int
	released int
}

// NewHarness returns a Harness; cfg may be the zero value.
func NewHarness(t *testing.T, cfg HarnessConfig) *Harness {
	t.Helper()
	st, err := store.OpenDisk(t.TempDir(), testTTL)
	if err != nil {
		t.Fatalf("open disk store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if cfg.Health == nil {
		cfg.Health = FakeHealth{}
	}
	if cfg.Run == nil {
		cfg.Run = func(_ context.Context, req executor.Request) (*executor.Result, error) {
			return &executor.Result{
				Status: execution.StatusOK, Stdout: "hi\n", State: req.State,
				QueueWait: time.Millisecond, ExecTime: 2 * time.Millisecond,
			}, nil
		}
	}
	if cfg.Cancel == nil {
		cfg.Cancel = func(id, _ string) error { return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id) }
	}
	h := &Harness{Store: st}
	log := slog.New(slog.DiscardHandler)
	if cfg.Log != nil {
		log = slog.New(slog.NewJSONHandler(cfg.Log, nil))
	}
	sessions := session.New(session.Config{
		Store:    st,
		Runner:   session.RunnerFunc(h.runner(cfg)),
		Validate: executor.New(languages{"bash", "python"}, TestLimits, log).Validate, // Validate asks only for the languages
		CheckState: func(blob []byte) error {
			return executor.CheckState(blob, TestLimits.MaxStateBytes, TestLimits.MaxStateRaw)
		},
		Cancel:  cfg.Cancel,
		Limits:  session.Limits{MaxFileBytes: TestLimits.MaxFileBytes, MaxFilesPerSession: TestMaxFiles, MaxConcurrent: cfg.MaxConcurrent},
		Log:     log,
		Refused: cfg.refused(),
	})
	h.Server = New(Config{
		Keys: NewKeys(cfg.Keys), Tokens: cfg.Tokens, Sessions: sessions, Health: cfg.Health, Log: log,
		MaxFileBytes: TestLimits.MaxFileBytes, MaxStateBytes: TestLimits.MaxStateBytes, MaxBodyBytes: TestMaxBody, MaxUploadBytes: TestMaxUpload, MaxFiles: TestMaxFiles,
		Observer: cfg.Observer, Metrics: cfg.Metrics, Stats: cfg.Stats, RateLimit: cfg.RateLimit,
		Profiles: cfg.Profiles, InstanceID: cfg.InstanceID, Replicas: cfg.Replicas,
		AdminKeys: NewKeys(cfg.AdminKeys), SeparateMonitoring: cfg.SeparateMonitoring,
	})
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.released != h.results {
			t.Errorf("got %d of %d results released, want every one", h.released, h.results)
		}
	})
	return h
}

// runner records each request, answers it with cfg.Run and counts the releases.
func (h *Harness) runner(cfg HarnessConfig) func(context.Context, executor.Request) (*executor.Result, error) {
	return func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		h.mu.Lock()
		h.reqs = append(h.reqs, req)
		h.mu.Unlock()
		res, err := cfg.Run(ctx, req)
		if res == nil {
			return nil, err
		}
		h.mu.Lock()
		h.results++
		h.mu.Unlock()
		res.SetRelease(func() {
			h.mu.Lock()
			h.released++
			h.mu.Unlock()
			if cfg.Release != nil {
				cfg.Release()
			}
		})
		return res, err
	}
}

// Requests returns the executions the runner was asked for, in order.
func (h *Harness) Requests() []executor.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reqs)
}

// LZ4Frame compresses raw into one LZ4 frame: a state blob CheckState accepts.
func LZ4Frame(t *testing.T, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := lz4.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		t.Fatalf("lz4 write: %v", err)
	}
	if err := zw.Close(); err != nil {
		t.Fatalf("lz4 close: %v", err)
	}
	return buf.Bytes()
}

// Observed is one request an Observer was told about.
type Observed struct {
	Route, Method string
	Status        int
}

// ObserverLog is an Observer that keeps what it is told.
type ObserverLog struct {
	mu        sync.Mutex
	seen      []Observed
	forwarded []string
	quotas    []string
}

// QuotaRefused implements Observer.
func (o *ObserverLog) QuotaRefused(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.quotas = append(o.quotas, kind)
}

// QuotasSeen returns the quota refusals observed, by kind, in order.
func (o *ObserverLog) QuotasSeen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.quotas)
}

// Request implements Observer.
func (o *ObserverLog) Request(route, method string, status int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, Observed{Route: route, Method: method, Status: status})
}

// Forwarded implements Observer.
func (o *ObserverLog) Forwarded(route, how string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.forwarded = append(o.forwarded, route+" "+how)
}

// ForwardedSeen returns the crossings observed, each "route how", in order.
func (o *ObserverLog) ForwardedSeen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.forwarded)
}

// Seen returns the requests observed, in the order they finished.
func (o *ObserverLog) Seen() []Observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seen)
}

// SetKeepAlive sets the time between comments on a quiet event stream.
func (h *Harness) SetKeepAlive(d time.Duration) { h.Server.keepAlive = d }

// languages is a pool that only says what its sandboxes run; Validate asks no more.
type languages []string

func (l languages) Languages() ([]string, bool) { return l, true }
func (languages) Checkout(context.Context, string) (sandbox.Sandbox, error) {
	return nil, errors.New("the harness's runner runs without sandboxes")
}
func (languages) CheckoutSized(context.Context, string, int64, int64) (sandbox.Sandbox, error) {
	return nil, errors.New("the harness's runner runs without sandboxes")
}
func (languages) Release(sandbox.Sandbox) {}
func (languages) Keep(sandbox.Sandbox)    {}
