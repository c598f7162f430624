package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"path"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/store"
)

// Service is the session layer.
type Service struct {
	store      store.Store
	run        Runner
	validate   func(req *executor.Request) error
	checkState func(blob []byte) error
	cancel     func(id, owner string) error
	resume     func(id, owner, token string, results []protocol.ToolResult) error
	live       *Live
	hold       HoldPool
	egress     Egress
	turns      turns
	turnWait   time.Duration
	retryAfter int
	limits     Limits
	log        *slog.Logger

	stateDelay      time.Duration
	rollbackDefault bool
	capture         Runner
	pending         pendingStates
	admission       admission
	refused         func(quota string)
	strict          atomic.Bool // StoreAll was called: every call stores before it answers
	now             func() time.Time
}

// Config is what a Service needs.
type Config struct {
	Store  store.Store
	Runner Runner
	// Validate checks and normalises an execution before any session is touched, so
	// that a request that will be refused leaves nothing behind.
	Validate func(req *executor.Request) error
	// CheckState checks a state blob a client puts into a session, without unpickling it.
	CheckState func(blob []byte) error
	// Cancel interrupts the running execution id when owner (a caller's key) started it.
	Cancel func(id, owner string) error
	// Continue answers the tool calls the running execution id of owner waits on
	// (executor.Executor.Continue).
	Continue func(id, owner, token string, results []protocol.ToolResult) error
	// Egress opens each call's way out of its sandbox (egress.Gate); nil leaves
	// sandboxes without one.
	Egress Egress
	// Live keeps sessions' sandboxes between their calls; nil turns live sessions off.
	Live *Live
	// Hold is where the sandboxes a front end holds for its callers come from (Hold);
	// nil refuses them.
	Hold HoldPool
	// TurnWait is how long a call waits for its session's turn (another call of the
	// session runs), and RetryAfter what it is told to wait when that runs out.
	TurnWait   time.Duration
	RetryAfter int
	Limits     Limits
	Log        *slog.Logger
	// StateSaveDelay, when positive, lets a call in a session's live sandbox answer
	// before its state is captured: the capture follows the answer, before the session's
	// next call, and is stored within this long of the answer (flush.go). Zero stores
	// every call's state before its answer.
	StateSaveDelay time.Duration
	// RollbackOnError is the executor's default for a failed run's state (ROLLBACK_ON_ERROR):
	// a call that rolls back stores its state before it answers.
	RollbackOnError bool
	// Capture runs the captures of live namespaces after their calls' answers
	// (executor.Executor, not observed as executions); Runner when nil.
	Capture Runner
	// Refused, when set, hears of each call or store refused for a per-caller quota
	// (kiln.QuotaConcurrency, kiln.QuotaStorage), whichever front end asked.
	Refused func(quota string)
	// PendingMaxBytes bounds the captured states kiln holds for all sessions together
	// while they wait for their store (StateSaveDelay): a capture past it is stored at
	// once. 0 is no bound.
	PendingMaxBytes int64
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.TurnWait <= 0 {
		cfg.TurnWait = 10 * time.Second
	}
	cfg.RetryAfter = max(cfg.RetryAfter, 1)
	s := &Service{
		store: cfg.Store, run: cfg.Runner, validate: cfg.Validate, checkState: cfg.CheckState, cancel: cfg.Cancel,
		resume: cfg.Continue, live: cfg.Live, hold: cfg.Hold, egress: cfg.Egress, turnWait: cfg.TurnWait, retryAfter: cfg.RetryAfter,
		limits: cfg.Limits, log: cfg.Log, now: time.Now,
		stateDelay: cfg.StateSaveDelay, rollbackDefault: cfg.RollbackOnError, capture: cfg.Capture,
	}
	if s.capture == nil {
		s.capture = cfg.Runner
	}
	s.pending.max = cfg.PendingMaxBytes
	s.admission.max = cfg.Limits.MaxConcurrent
	s.refused = cfg.Refused
	if s.live != nil && s.stateDelay > 0 {
		s.live.SetFlush(s.flushEnding)
	}
	return s
}

// Runner runs one execution; *executor.Executor implements it, and kiln's metrics wrap
// it. A Result it returns holds its sandbox until Result.Release.
type Runner interface {
	Run(ctx context.Context, req executor.Request) (*executor.Result, error)
}

// RunnerFunc adapts a function to a Runner.
type RunnerFunc func(ctx context.Context, req executor.Request) (*executor.Result, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, req executor.Request) (*executor.Result, error) {
	return f(ctx, req)
}

// Egress opens the way out of the sandbox for one call: how its connections are served,
// and the end of its scope.
type Egress interface {
	Open(c egress.Call) (serve func(net.Conn), end func(), err error)
}

// Caller is who asks: the fingerprint of their API key ("" when auth is off) and the
// user id their client named, if any; or, for a signed identity (a LibreChat token), its
// tenant as Key and its subject as User, with Proven set.
type Caller struct {
	Key  string
	User string
	// Tenant is the tenant a signed token named (Key is made from it); empty for a key's
	// callers. The egress policy file picks entries by it.
	Tenant string
	// Proven says the user was verified (a signed token), not named by the client: such
	// a caller sees only what is its user's, exactly.
	Proven bool
	// Admin says the caller is an administrator of its tenant (a token with the ADMIN
	// role): it may delete the agent and skill files another user uploaded.
	Admin bool
	// Expires is the last moment the caller's credential is accepted (a token's); zero
	// for a key. What the caller opened that lasts ends then.
	Expires time.Time
	// Client is the address the caller's connection comes from (an IPv6 /64 for all of
	// its hosts): what the per-caller limits count when it has no key (authentication off).
	Client string
}

// admissionKey is whom the caller's execution slots are counted for: its principal, or,
// with no key (authentication off), the address it comes from.
func (c Caller) admissionKey() string {
	if c.Key == "" {
		return "client\x00" + c.Client
	}
	return "principal\x00" + c.Principal()
}

// owner is how a caller is written into a session.
func (c Caller) owner() string { return c.Key + "\x00" + c.User }

// Owner is how the caller is written into the sessions it makes (store.Session.Owner).
func (c Caller) Owner() string { return c.owner() }

// Owns reports whether the caller may see what a session with the given owner holds
// (store.Session.Owner): the rule of every route, for a front end that keeps a table of
// its own (Jupyter's kernels).
func (c Caller) Owns(owner string) bool { return c.owns(owner) }

// owns reports whether the caller may see a session with the given owner: same key,
// and the same user when both sides name one. A platform that holds a key and sends
// no user id acts for all of its users; a proven caller acts for its user alone.
func (c Caller) owns(owner string) bool {
	key, user, _ := strings.Cut(owner, "\x00")
	if c.Proven {
		return key == c.Key && user == c.User
	}
	return key == c.Key && (c.User == "" || user == "" || user == c.User)
}

// Principal is who may cancel or continue the caller's runs: the key, and the user when it
// was proven (users of one tenant share its key).
func (c Caller) Principal() string {
	if c.Proven {
		return c.owner()
	}
	return c.Key
}

// Limits bound sessions and their files.
type Limits struct {
	MaxFileBytes       int64
	MaxFilesPerSession int
	// MaxStoredBytes bounds what one caller's sessions hold in the store, files and
	// states (QUOTA_STORAGE_MB): uploads and state puts past it are refused. 0 is none.
	MaxStoredBytes int64
	// FixedSize says the runtime cannot resize a running sandbox (sandbox.Traits.Resizes
	// false: gVisor, Kubernetes): a
	// live sandbox serves only the calls that ask for the limits it has (DefaultMilliCPU
	// and DefaultMemoryMB for a call that names none). Another call of its session stores
	// the pending namespace, ends the sandbox, and resumes in one of its own size.
	FixedSize                        bool
	DefaultMilliCPU, DefaultMemoryMB int64
	// MaxConcurrent is the calls one caller may have in flight at once, through every
	// front end together (MAX_CONCURRENT_PER_KEY; Admit). 0 is no bound.
	MaxConcurrent int
}

// refuse is err, a refusal for one of the per-caller quotas (err.Quota), told to
// Config.Refused.
func (s *Service) refuse(err *kiln.Error) error {
	if s.refused != nil {
		s.refused(err.Quota)
	}
	return err
}

// errNotFound is what a caller sees for anything missing or not theirs.
func errNotFound(what string) error {
	return kiln.Errorf(kiln.CodeNotFound, "%s not found", what)
}

// Session returns a session the caller owns.
func (s *Service) Session(ctx context.Context, c Caller, id string) (*store.Session, error) {
	sess, err := s.store.Session(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errNotFound("session")
		}
		return nil, fmt.Errorf("session lookup: %w", err)
	}
	if !c.owns(sess.Owner) || !sess.ExpiresAt.After(s.now()) {
		return nil, errNotFound("session")
	}
	return sess, nil
}

// DeleteSession removes a session the caller owns, with its state, its files and its
// live sandbox, once a call of it that runs has ended.
func (s *Service) DeleteSession(ctx context.Context, c Caller, id string) error {
	err := s.withTurn(ctx, c, id, func(*store.Session) error {
		s.dropLive(id)
		s.pending.discard(id)
		if err := s.store.DeleteSession(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("delete session: %w", err)
		}
		return nil
	})
	if errors.Is(err, errGone) {
		return nil // deleted meanwhile
	}
	return err
}

// newSession creates an empty session with id for the caller.
func (s *Service) newSession(ctx context.Context, c Caller, id, entity string) (*store.Session, error) {
	return s.newSessionBy(ctx, c, "", id, entity)
}

// newSessionBy is newSession, recording creator as the one who made it (a resource's
// session: c is the resource).
func (s *Service) newSessionBy(ctx context.Context, c Caller, creator, id, entity string) (*store.Session, error) {
	now := s.now()
	sess := &store.Session{ID: id, Owner: c.owner(), EntityID: entity, Creator: creator, CreatedAt: now, LastUsedAt: now}
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	return s.store.Session(ctx, sess.ID)
}

// SanitizeName turns a client's file name into a safe one: no directory parts, no
// control characters, no bidirectional formatting characters (U+202E would show
// "\u202egnp.exe" as "exe.png"), valid UTF-8, at most 255 bytes, never empty, "." or "..".
func SanitizeName(name string) string {
	name = strings.ToValidUTF8(name, "")
	name = strings.ReplaceAll(name, "\\", "/")
	name = path.Base(name)
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '/' {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	for len(name) > 255 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	// The cut may end on a space, which a second pass would trim: a name must come out
	// of here as it went in, or a run's write-back would not replace the file.
	name = strings.TrimRightFunc(name, unicode.IsSpace)
	if name == "" || name == "." || name == ".." {
		return "file"
	}
	return name
}

// sanitizePath keeps a relative path under /mnt/data that a run produced (it may have
// directories), cleaned of anything that could leave it.
func sanitizePath(p string) string {
	parts := strings.Split(path.Clean("/"+strings.ReplaceAll(p, "\\", "/")), "/")
	out := parts[:0]
	for _, part := range parts {
		if part == "" || part == "." || part == ".." {
			continue
		}
		out = append(out, SanitizeName(part))
	}
	if len(out) == 0 {
		return "file"
	}
	return strings.Join(out, "/")
}

// ContentType guesses a file's media type from its name.
func ContentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}
