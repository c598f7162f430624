package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// Peers is the directory of replicas, as forwarding uses it; *Directory is the real one.
type Peers interface {
	// Claim makes this replica the owner of key for ttl, unless another replica that is
	// up owns it: then it returns that replica's URL.
	Claim(ctx context.Context, key string, ttl time.Duration) (url, owner string, err error)
	// Owner returns the URL of the replica that owns key when it is another one and up.
	Owner(ctx context.Context, key string) (url, owner string, err error)
	// Peer returns the URL of a replica by instance id, "" when it is not up.
	Peer(ctx context.Context, instance string) (string, error)
	// Release gives up this replica's claim of key.
	Release(ctx context.Context, key string) error
	// TakeOver makes this replica the owner of key if gone, an owner that could not be
	// reached, still holds it.
	TakeOver(ctx context.Context, key, gone string, ttl time.Duration) (bool, error)
}

var _ Peers = (*Directory)(nil)

// Config configures forwarding between replicas; the zero value is a lone kiln, which
// forwards nothing and claims nothing.
type Config struct {
	Peers  Peers
	Secret []byte // PEER_SECRET, shared by every replica
	// SessionTTL is how long a replica owns a session after its last call there: the
	// life of an idle live session.
	SessionTTL time.Duration
	// RunTTL is how long a replica owns a run it started, and the request ids that name
	// it (for cancels and continuations).
	RunTTL time.Duration
	// MCPTTL is how long a replica owns an MCP session after its last message.
	MCPTTL time.Duration
}

// Forwarder is one replica's side of forwarding: it finds the owner of what a request
// is about, claims and releases what this replica holds, hands requests to their owner
// signed, and checks the signature of those handed to it. It is safe for concurrent use.
type Forwarder struct {
	instance  string
	cfg       Config
	transport http.RoundTripper
	nonces    nonces // of the forwards accepted (Verify)
}

// NewForwarder returns the Forwarder of the replica instance.
func NewForwarder(instance string, cfg Config) *Forwarder {
	return &Forwarder{instance: instance, cfg: cfg, transport: newTransport()}
}

// Enabled reports whether replicas share a directory: without one, every request is
// served where it lands.
func (f *Forwarder) Enabled() bool { return f.cfg.Peers != nil }

// Owner returns the URL and instance of the replica that owns o, when it is another one
// and up; empty when it is this one, or nobody. A Claimed o that nobody owns becomes this
// replica's.
func (f *Forwarder) Owner(ctx context.Context, o Owned) (url, instance string, err error) {
	p := f.cfg.Peers
	switch {
	case p == nil:
		return "", "", nil
	case o.instance != "":
		if o.instance == f.instance {
			return "", "", nil
		}
		url, err := p.Peer(ctx, o.instance)
		return url, o.instance, err
	case o.Key() == "":
		return "", "", nil
	case o.claim:
		return p.Claim(ctx, o.Key(), f.cfg.ttl(o.kind))
	default:
		return p.Owner(ctx, o.Key())
	}
}

// Own claims the thing of kind named id for this replica, for its kind's TTL. It
// returns the instance of another replica that holds it instead (it took it between the
// start of this replica's call and now), "" when this one does, or when replicas share
// no directory.
func (f *Forwarder) Own(ctx context.Context, kind Kind, id string) (elsewhere string, err error) {
	if f.cfg.Peers == nil || id == "" {
		return "", nil
	}
	_, owner, err := f.cfg.Peers.Claim(ctx, kind.Key(id), f.cfg.ttl(kind))
	if err != nil || owner == f.instance {
		return "", err
	}
	return owner, nil
}

// Release gives up this replica's claim of the thing of kind named id; another
// replica's claim stays.
func (f *Forwarder) Release(ctx context.Context, kind Kind, id string) error {
	if f.cfg.Peers == nil || id == "" {
		return nil
	}
	return f.cfg.Peers.Release(ctx, kind.Key(id))
}

// TakeOver makes o this replica's when gone, its owner that could not be reached, still
// holds it; only a Claimed o is taken over (what is merely looked up stays as it is).
func (f *Forwarder) TakeOver(ctx context.Context, o Owned, gone string) error {
	if f.cfg.Peers == nil || !o.claim || o.Key() == "" {
		return nil
	}
	_, err := f.cfg.Peers.TakeOver(ctx, o.Key(), gone, f.cfg.ttl(o.kind))
	return err
}

// ErrOwnerGone is the error of a forward to a replica that takes no connections: it died
// since its last announcement, and owns nothing any more.
var ErrOwnerGone = errors.New("owner gone")

// Forward hands r to the replica owner at target, signed, with body as its body, and relays
// the answer; streams (SSE, MCP) pass each event on at once. It returns nil once an
// answer came. Otherwise nothing has been written to w and it returns why: ErrOwnerGone
// (wrapped) when the owner takes no connections (the dial failed, or a kept-alive
// connection broke and a new one is refused), so that the caller serves r itself;
// another error when the owner failed while answering, or r's client went away.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, owner string, target *url.URL, body []byte) error {
	var failed error
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			f.Sign(pr.Out, owner, body)
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ErrorHandler: func(_ http.ResponseWriter, out *http.Request, err error) {
			// No answer came: the handler is called before any byte of one.
			var op *net.OpError
			gone := errors.As(err, &op) && op.Op == "dial"
			if !gone && out.Context().Err() == nil {
				gone = !answers(out.Context(), target.Host)
			}
			if gone {
				err = fmt.Errorf("%w: %w", ErrOwnerGone, err)
			}
			failed = err
		},
	}
	proxy.ServeHTTP(w, r)
	return failed
}

// dialTimeout bounds a connection to another replica: a dead owner is passed over after
// at most this long.
const dialTimeout = 2 * time.Second

// answers reports whether a replica at host takes connections at all.
func answers(ctx context.Context, host string) bool {
	c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// newTransport is the HTTP transport between replicas: no proxy from the environment,
// short dials (a dead owner is passed over quickly), long streams.
func newTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
}
