// Package kiln holds the domain shared by kiln's packages: the application error with
// its machine codes, the reasons a sandbox could not serve, the identifiers the API
// hands out and the format of its timestamps.
package kiln

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
)

// Code is a machine-readable error code, as sent in the "error" field of an API error body.
type Code string

// The error codes of the HTTP API (see docs/api.md). The HTTP status for each lives in
// one table in package api.
const (
	CodeInvalid      Code = "invalid_request"
	CodeLanguage     Code = "unsupported_language"
	CodeUnauthorized Code = "unauthorized"
	CodeForbidden    Code = "forbidden"
	CodeNotFound     Code = "not_found"
	CodeConflict     Code = "conflict"
	CodeBusy         Code = "session_busy"
	CodeTooLarge     Code = "too_large"
	CodeMediaType    Code = "unsupported_media_type"
	CodeRateLimited  Code = "rate_limited"
	CodeUnavailable  Code = "unavailable"
	CodeInternal     Code = "internal"
)

// Error is kiln's application error: a code for machines, a message for people.
// Anything that is not an *Error reaching the API edge is reported as CodeInternal,
// with its detail kept for the log.
type Error struct {
	Code    Code
	Message string
	// RetryAfter, in seconds, is sent as Retry-After for unavailable and rate_limited.
	RetryAfter int
	// Quota names the per-caller quota the refusal is for (QuotaRate, ...), or "".
	Quota string
}

// The per-caller quotas a refusal can be for (Error.Quota): kiln_quota_refusals_total's
// kinds.
const (
	QuotaRate        = "rate"        // RATE_LIMIT_PER_MINUTE
	QuotaConcurrency = "concurrency" // MAX_CONCURRENT_PER_KEY
	QuotaStorage     = "storage"     // QUOTA_STORAGE_MB
)

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err's *Error, or CodeInternal when there is none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// IDLength is the length of every identifier kiln hands out.
const IDLength = 21

// IDAlphabet is the symbols of an identifier, in the order of their values 0 to 63.
const IDAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"

// NewID returns a fresh 21-character identifier from [A-Za-z0-9_-], drawn from a CSPRNG.
// The alphabet has 64 symbols, so each byte's low six bits pick one without bias.
func NewID() string {
	var b [IDLength]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("kiln: reading random bytes: %v", err)) // crypto/rand does not fail on Linux
	}
	for i := range b {
		b[i] = IDAlphabet[b[i]&63]
	}
	return string(b[:])
}

// ValidID reports whether s has the shape of a kiln identifier. It is what keeps
// client-supplied ids out of file paths and Redis key patterns.
func ValidID(s string) bool {
	if len(s) != IDLength {
		return false
	}
	return ValidToken(s, IDLength)
}

// ValidToken reports whether s is 1 to max characters of [A-Za-z0-9_-] (entity ids).
func ValidToken(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Why a sandbox could not serve. The packages that make sandboxes (the runtimes, sandbox, pool) wrap
// these; the ones that report on them (executor, metrics) classify with errors.Is, so
// that neither side depends on the other's wording or internals.
var (
	// ErrSandboxExited: the sandbox's REPL ended (or its stream broke) before it answered.
	ErrSandboxExited = errors.New("sandbox exited")
	// ErrWarmupTimeout: a sandbox did not say it was ready within the warm-up timeout.
	ErrWarmupTimeout = errors.New("sandbox not ready in time")
	// ErrRuntime: the sandbox runtime (the Docker daemon, or the Kubernetes API server)
	// refused or failed an operation.
	ErrRuntime = errors.New("sandbox runtime")
	// ErrQueueFull: every sandbox is busy and too many requests already wait.
	ErrQueueFull = errors.New("queue full")
	// ErrQueueTimeout: no sandbox became free within the queue timeout.
	ErrQueueTimeout = errors.New("no sandbox within the queue timeout")
	// ErrShuttingDown: kiln is draining and takes no new executions.
	ErrShuttingDown = errors.New("shutting down")
	// ErrUnsupportedLanguage: no pool's sandboxes run the language asked for.
	ErrUnsupportedLanguage = errors.New("no pool serves this language")
	// ErrSizedFull: as many sandboxes of requests' own sizes as the pool keeps warm are in
	// use (a runtime that cannot resize a warm one starts one per such request).
	ErrSizedFull = errors.New("every sandbox of a request's own size is in use")
)

// callerKey is the context key of WithCaller.
type callerKey struct{}

// WithCaller returns ctx carrying the principal of the caller a piece of work is for (a
// user under signed tokens, else a key): what the pools share fairly among when they run
// short (pool.Pool serves waiting checkouts round-robin across callers).
func WithCaller(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, callerKey{}, principal)
}

// CallerOf is the principal WithCaller put in ctx, or "".
func CallerOf(ctx context.Context) string {
	p, _ := ctx.Value(callerKey{}).(string)
	return p
}
