package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Settings are the operator's egress settings as plain values: what cmd/ reads from
// EGRESS_ALLOW, EGRESS_RESOLVE and EGRESS_ALLOW_PRIVATE (SplitList turns each into
// entries), and what each entry of a policy file holds.
type Settings struct {
	// Allow lists the host patterns calls may reach (see Pattern). Empty: none.
	Allow []string `json:"allow"`
	// Resolve maps names to addresses, name=address, ahead of DNS. A mapped name is
	// not trusted: it must still be allowed, and its address checked like any other.
	Resolve []string `json:"resolve"`
	// AllowPrivate lists the CIDRs of private, loopback, link-local and other special
	// addresses that may be reached; nothing else opens them.
	AllowPrivate []string `json:"allow_private"`
	// MaxConnections and MaxBytes are the caps of one call; zero takes the default.
	MaxConnections int   `json:"max_connections"`
	MaxBytes       int64 `json:"max_bytes"`
}

// Limits are the caps of one scope (one call): see Scope.
type Limits struct {
	// MaxConnections counts what a call opens through the proxy over its whole life:
	// each CONNECT and each plain HTTP request whose host is allowed is one, whether
	// or not the host then answers. A cap on the total rather than on what is open at
	// once also bounds a call that scans ports or hosts one at a time.
	MaxConnections int
	// MaxBytes bounds the payload carried both ways together: the bytes of tunnels
	// after their 200, and the bodies of plain HTTP requests and responses.
	MaxBytes int64
}

// The limits a policy takes when its settings leave them at zero.
const (
	DefaultMaxConnections = 256
	DefaultMaxBytes       = 1 << 30
)

// Policy is an egress policy: which hosts may be reached, how names resolve, which
// special addresses are open, and the caps of each call. The zero Policy refuses
// everything. A Policy is a value; Narrow returns a new one.
type Policy struct {
	allow    []Pattern
	wide     []Pattern // the allow list before a call narrowed it, to say why a host is refused
	narrowed bool
	off      bool
	resolve  map[string][]netip.Addr
	private  []netip.Prefix
	limits   Limits
}

// settingNames are what errors call each setting: environment variables, or a place in
// a policy file.
type settingNames struct{ allow, resolve, private, limits string }

var envNames = settingNames{"EGRESS_ALLOW", "EGRESS_RESOLVE", "EGRESS_ALLOW_PRIVATE", "egress limits"}

// ParsePolicy parses the operator's settings, reporting every malformed entry at once,
// each error naming its setting (EGRESS_ALLOW, ...).
func ParsePolicy(s Settings) (Policy, error) { return parsePolicy(s, envNames) }

func parsePolicy(s Settings, names settingNames) (Policy, error) {
	allow, errAllow := parseAllow(names.allow, s.Allow)
	resolve, errResolve := parseResolve(names.resolve, s.Resolve)
	private, errPrivate := parsePrivate(names.private, s.AllowPrivate)
	limits, errLimits := parseLimits(names.limits, s.MaxConnections, s.MaxBytes)
	if err := errors.Join(errAllow, errResolve, errPrivate, errLimits); err != nil {
		return Policy{}, err
	}
	return Policy{allow: allow, resolve: resolve, private: private, limits: limits}, nil
}

func parseLimits(setting string, conns int, bytes int64) (Limits, error) {
	if conns < 0 || bytes < 0 {
		return Limits{}, fmt.Errorf("%s: a cap is negative", setting)
	}
	l := Limits{MaxConnections: conns, MaxBytes: bytes}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l, nil
}

// ParseAllow parses EGRESS_ALLOW's entries, reporting every malformed one.
func ParseAllow(entries ...string) ([]Pattern, error) { return parseAllow(envNames.allow, entries) }

// maxPatterns bounds an allow list, the operator's or a call's.
const maxPatterns = 1024

func parseAllow(setting string, entries []string) ([]Pattern, error) {
	var out []Pattern
	var errs []error
	for _, e := range entries {
		if strings.TrimSpace(e) == "" {
			continue
		}
		p, err := ParsePattern(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %w", setting, e, err))
			continue
		}
		out = addPattern(out, p)
	}
	if len(out) > maxPatterns {
		errs = append(errs, fmt.Errorf("%s: more than %d patterns", setting, maxPatterns))
	}
	return out, errors.Join(errs...)
}

func addPattern(list []Pattern, p Pattern) []Pattern {
	for _, q := range list {
		if q == p {
			return list
		}
	}
	return append(list, p)
}

// SplitList splits a comma-separated setting into its entries, trimmed, dropping empty
// ones: EGRESS_ALLOW="pypi.internal, *.github.com" is two.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Allow returns the policy's allow list, narrowed when a call narrowed it.
func (p Policy) Allow() []Pattern { return append([]Pattern(nil), p.allow...) }

// Off reports whether the policy refuses every host: a call sent network false, or
// narrowed the operator's list to nothing, or the operator allowed nothing.
func (p Policy) Off() bool { return p.off || len(p.allow) == 0 }

// Limits returns the caps of each call under the policy.
func (p Policy) Limits() Limits { return p.limits }

// Code classifies a decision with a low-cardinality label, for metrics and for the
// status of a refusal.
type Code string

// The codes of a Decision. Only CodeAllowed lets a connection through.
const (
	CodeAllowed     Code = "allowed"
	CodeOff         Code = "off"         // the call's network is off
	CodeHost        Code = "host"        // the host and port are not allowed
	CodeAddress     Code = "address"     // a special address EGRESS_ALLOW_PRIVATE does not open
	CodeMetadata    Code = "metadata"    // the cloud metadata address
	CodeConnections Code = "connections" // the call's connection cap is spent
	CodeBytes       Code = "bytes"       // the call's byte cap is spent
	CodeSNI         Code = "sni"         // the TLS server name is not the CONNECT host
	CodeEnded       Code = "ended"       // the call is over
	CodeMalformed   Code = "malformed"   // not a request this proxy serves
	CodeResolve     Code = "resolve"     // the name did not resolve
	CodeDial        Code = "dial"        // no address of the host answered
	CodeTimeout     Code = "timeout"     // the upstream sent nothing for the idle timeout
)

// Decision is the outcome of checking one connection or request: a code, and a
// one-line reason meant for the user of the sandbox, such as
// "egress denied: other.example not allowed".
type Decision struct {
	Code   Code
	Reason string
}

// Allowed reports whether the decision lets the connection through.
func (d Decision) Allowed() bool { return d.Code == CodeAllowed }

var allowed = Decision{Code: CodeAllowed, Reason: "egress allowed"}

func denied(code Code, format string, args ...any) Decision {
	return Decision{Code: code, Reason: "egress denied: " + fmt.Sprintf(format, args...)}
}

// hostPort writes a destination as a reason names it: the port only when it is not
// one a pattern without a port allows.
func hostPort(h Host, port uint16) string {
	if isDefaultPort(port) {
		return h.String()
	}
	return net.JoinHostPort(h.String(), strconv.Itoa(int(port)))
}

// CheckHost decides whether a request for h on port may go further, before anything
// is resolved or dialled.
func (p Policy) CheckHost(h Host, port uint16) Decision {
	if p.off {
		return denied(CodeOff, "network is off for this call")
	}
	for _, pat := range p.allow {
		if pat.Matches(h, port) {
			return allowed
		}
	}
	if p.narrowed {
		for _, pat := range p.wide {
			if pat.Matches(h, port) {
				return denied(CodeHost, "%s not allowed for this call", hostPort(h, port))
			}
		}
	}
	return denied(CodeHost, "%s not allowed", hostPort(h, port))
}

// CheckAddr decides whether an address h resolved to may be dialled: a special
// address only when EGRESS_ALLOW_PRIVATE opens it, the cloud metadata address only
// when it is named there itself.
func (p Policy) CheckAddr(h Host, a netip.Addr) Decision {
	a = a.Unmap()
	what := classify(a)
	if what == "" {
		return allowed
	}
	for _, pr := range p.private {
		if isMetadata(a) && pr == netip.PrefixFrom(a, a.BitLen()) || !isMetadata(a) && pr.Contains(a) {
			return allowed
		}
	}
	code := CodeAddress
	if isMetadata(a) {
		code = CodeMetadata
	}
	if h.Addr.IsValid() {
		return denied(code, "%s is %s", a, what)
	}
	return denied(code, "%s resolves to %s, %s", h.Name, a, what)
}

// mapped returns the addresses EGRESS_RESOLVE gives name, if it gives any.
func (p Policy) mapped(name string) ([]netip.Addr, bool) {
	addrs, ok := p.resolve[name]
	return addrs, ok
}
