package auth

import (
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// The algorithms a token may be signed with.
const (
	EdDSA = string(jose.EdDSA)
	RS256 = string(jose.RS256)
	HS256 = string(jose.HS256)
)

// Limits LibreChat's tokens keep, and the verifier holds them to.
const (
	MaxSkew     = 30 * time.Second  // clock skew allowed on exp, nbf and iat, at most
	MaxLifetime = 300 * time.Second // exp - iat, at most
)

// Key is a verification key: an ed25519.PublicKey, an *rsa.PublicKey or, for HS256, a
// []byte secret. Alg, when set, is the only algorithm it verifies.
type Key struct {
	Key any
	Alg string
}

// Config is what a Verifier checks.
type Config struct {
	Keys       map[string]Key // by kid
	Issuer     string
	Audience   string
	Algorithms []string // EdDSA, RS256, HS256; HS256 needs a secret among the keys
	Skew       time.Duration
	// DefaultTenant is the tenant of a token without tenant_id (LibreChat's "legacy").
	DefaultTenant string
	Now           func() time.Time
}

// Principal is who a verified token names.
type Principal struct {
	Tenant  string
	Subject string
	Role    string
	Source  string // principal_source: librechat_jwt or openid_reuse
	TokenID string
	// Expires is the last moment the token is accepted: its exp plus the skew allowed. What
	// it opened that lasts (a kernel's WebSocket) ends then.
	Expires time.Time
}

// Error is a refused token; Reason is a short word for the log (never for the client).
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return "token refused: " + e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func refuse(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Verifier checks tokens against its Config.
type Verifier struct {
	cfg  Config
	algs []jose.SignatureAlgorithm
}

// New returns a Verifier, or an error that says what is wrong with cfg.
func New(cfg Config) (*Verifier, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("no verification key")
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("the issuer and the audience must be set")
	}
	if cfg.Skew <= 0 || cfg.Skew > MaxSkew {
		cfg.Skew = MaxSkew
	}
	if cfg.DefaultTenant == "" {
		cfg.DefaultTenant = "legacy"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &Verifier{cfg: cfg}
	for _, a := range cfg.Algorithms {
		switch a {
		case EdDSA, RS256, HS256:
			v.algs = append(v.algs, jose.SignatureAlgorithm(a))
		default:
			return nil, fmt.Errorf("algorithm %q: use EdDSA, RS256 or HS256", a)
		}
	}
	if len(v.algs) == 0 {
		return nil, errors.New("no algorithm allowed")
	}
	for kid, k := range cfg.Keys {
		if err := k.check(); err != nil {
			return nil, fmt.Errorf("key %q: %w", kid, err)
		}
		if k.Alg != "" && !slices.Contains(cfg.Algorithms, k.Alg) {
			return nil, fmt.Errorf("key %q is for %s, which is not among the allowed algorithms", kid, k.Alg)
		}
	}
	return v, nil
}

// check says whether the key can verify its algorithm.
func (k Key) check() error {
	switch key := k.Key.(type) {
	case ed25519.PublicKey:
		if k.Alg != "" && k.Alg != EdDSA {
			return fmt.Errorf("an Ed25519 key cannot verify %s", k.Alg)
		}
	case *rsa.PublicKey:
		if k.Alg != "" && k.Alg != RS256 {
			return fmt.Errorf("an RSA key cannot verify %s", k.Alg)
		}
		if key.N.BitLen() < 2048 {
			return fmt.Errorf("an RSA key of %d bits is too weak", key.N.BitLen())
		}
	case []byte:
		if k.Alg != HS256 {
			return errors.New("a secret verifies HS256 only")
		}
		if len(key) < 32 {
			return errors.New("an HS256 secret must be at least 32 bytes")
		}
	default:
		return fmt.Errorf("unsupported key type %T", k.Key)
	}
	return nil
}

// fits says whether the key verifies tokens signed with alg.
func (k Key) fits(alg string) bool {
	if k.Alg != "" {
		return k.Alg == alg
	}
	switch k.Key.(type) {
	case ed25519.PublicKey:
		return alg == EdDSA
	case *rsa.PublicKey:
		return alg == RS256
	}
	return false
}

// claims are the token's claims kiln reads, as LibreChat mints them.
type claims struct {
	jwt.Claims
	Tenant          *string `json:"tenant_id"`
	Role            string  `json:"role"`
	PrincipalSource string  `json:"principal_source"`
	AuthContextHash string  `json:"auth_context_hash"`
}

// Verify checks a token and returns whom it names. Any refusal is an *Error.
func (v *Verifier) Verify(token string) (Principal, error) {
	tok, err := jwt.ParseSigned(token, v.algs)
	if err != nil {
		if strings.Contains(err.Error(), "unexpected signature algorithm") {
			return Principal{}, refuse("wrong_alg", "%v", err)
		}
		return Principal{}, refuse("malformed", "%v", err)
	}
	if len(tok.Headers) != 1 {
		return Principal{}, refuse("malformed", "%d signatures", len(tok.Headers))
	}
	h := tok.Headers[0]
	if typ, ok := h.ExtraHeaders[jose.HeaderType]; ok && typ != "JWT" {
		return Principal{}, refuse("malformed", "typ %v", typ)
	}
	if h.KeyID == "" {
		return Principal{}, refuse("no_kid", "the token names no key")
	}
	key, ok := v.cfg.Keys[h.KeyID]
	if !ok {
		return Principal{}, refuse("unknown_kid", "kid %q", h.KeyID)
	}
	if !key.fits(h.Algorithm) {
		return Principal{}, refuse("wrong_alg", "kid %q does not verify %s", h.KeyID, h.Algorithm)
	}
	var c claims
	if err := tok.Claims(key.Key, &c); err != nil {
		return Principal{}, refuse("bad_signature", "%v", err)
	}
	return v.check(&c)
}

// check holds the claims to LibreChat's rules.
func (v *Verifier) check(c *claims) (Principal, error) {
	switch {
	case c.Subject == "":
		return Principal{}, refuse("missing_claim", "sub")
	case c.ID == "" || len(c.ID) > 256:
		return Principal{}, refuse("missing_claim", "jti")
	case c.IssuedAt == nil || c.NotBefore == nil || c.Expiry == nil:
		return Principal{}, refuse("missing_claim", "iat, nbf and exp")
	case c.PrincipalSource != "librechat_jwt" && c.PrincipalSource != "openid_reuse":
		return Principal{}, refuse("missing_claim", "principal_source %q", c.PrincipalSource)
	case c.AuthContextHash == "":
		return Principal{}, refuse("missing_claim", "auth_context_hash")
	case c.Tenant != nil && *c.Tenant == "":
		return Principal{}, refuse("missing_claim", "tenant_id is empty")
	case !printable(c.Subject) || (c.Tenant != nil && !printable(*c.Tenant)):
		return Principal{}, refuse("invalid_claims", "sub or tenant_id holds control characters or is over 256 bytes")
	}
	now := v.cfg.Now()
	err := c.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Audience}, Time: now}, v.cfg.Skew)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return Principal{}, refuse("expired", "%v", err)
	case errors.Is(err, jwt.ErrNotValidYet):
		return Principal{}, refuse("not_yet_valid", "%v", err)
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return Principal{}, refuse("future_iat", "%v", err)
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Principal{}, refuse("wrong_issuer", "iss %q", c.Issuer)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Principal{}, refuse("wrong_audience", "aud %v", c.Audience)
	case err != nil:
		return Principal{}, refuse("invalid_claims", "%v", err)
	}
	iat, exp := c.IssuedAt.Time(), c.Expiry.Time()
	if !exp.After(iat) {
		return Principal{}, refuse("invalid_claims", "exp is not after iat")
	}
	if exp.Sub(iat) > MaxLifetime {
		return Principal{}, refuse("too_long", "a lifetime of %s, over %s", exp.Sub(iat), MaxLifetime)
	}
	p := Principal{Tenant: v.cfg.DefaultTenant, Subject: c.Subject, Role: c.Role, Source: c.PrincipalSource, TokenID: c.ID,
		Expires: exp.Add(v.cfg.Skew)}
	if c.Tenant != nil {
		p.Tenant = *c.Tenant
	}
	return p, nil
}

// printable reports whether an identity claim is one kiln can key on: at most 256 bytes,
// no control characters (kiln writes identities with them as separators).
func printable(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
