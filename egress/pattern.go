package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Pattern is one entry of an allow list: a host with an optional port. The host is a
// name (pypi.internal), a wildcard over a name's subdomains (*.github.com), any name (*),
// or an IP address (10.0.0.5, [fd00::5]:443). Without a port a pattern allows 80 and
// 443, the ports of http and https. Patterns are made by ParsePattern, which normalises
// them, so two patterns that allow the same requests are equal.
//
// A wildcard matches subdomains at any depth (api.github.com, a.b.github.com) and never
// the name itself: *.github.com does not allow github.com, which is listed on its own
// when it is meant. Allowing a zone's apex is a separate decision from allowing the
// names under it, and an operator who wrote only the wildcard did not make it.
// The any-name pattern * still matches no IP address: an address is allowed only by
// naming it.
type Pattern struct {
	kind patternKind
	name string     // the normalised name, or the suffix after "*." for a wildcard
	addr netip.Addr // the address of an address pattern
	port uint16     // 0: 80 and 443
}

type patternKind uint8

const (
	kindName patternKind = iota + 1
	kindWildcard
	kindAny
	kindAddr
)

// defaultPorts are the ports a pattern without one allows.
var defaultPorts = [...]uint16{80, 443}

func isDefaultPort(port uint16) bool { return port == defaultPorts[0] || port == defaultPorts[1] }

// ParsePattern parses one allow-list entry. Names are case-insensitive and may be
// internationalised (they are kept as IDNA A-labels); a trailing dot is dropped.
func ParsePattern(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Pattern{}, errors.New("empty pattern")
	}
	host, port, err := splitPatternPort(s)
	if err != nil {
		return Pattern{}, err
	}
	p := Pattern{port: port}
	switch {
	case host == "*":
		p.kind = kindAny
	case strings.HasPrefix(host, "*.") && !strings.Contains(host[2:], "*"):
		name, err := normaliseName(host[2:])
		if err != nil {
			return Pattern{}, err
		}
		p.kind, p.name = kindWildcard, name
	case strings.Contains(host, "*"):
		return Pattern{}, errors.New("a wildcard may only be a whole first label, as in *.example.com")
	case strings.Contains(host, "/"):
		return Pattern{}, errors.New("an address range is not a host: name single addresses here, and ranges in EGRESS_ALLOW_PRIVATE")
	default:
		h, err := ParseHost(host)
		if err != nil {
			return Pattern{}, err
		}
		if h.Addr.IsValid() {
			p.kind, p.addr = kindAddr, h.Addr
		} else {
			p.kind, p.name = kindName, h.Name
		}
	}
	return p, nil
}

// splitPatternPort splits an entry into its host and port. A bare IPv6 address has
// colons and no port; one with a port is written in brackets.
func splitPatternPort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		host, portText, err := net.SplitHostPort(s)
		if err != nil {
			if strings.HasSuffix(s, "]") && strings.Count(s, "]") == 1 {
				return s[1 : len(s)-1], 0, nil
			}
			return "", 0, fmt.Errorf("malformed bracketed address: %w", err)
		}
		if !strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("%q in brackets is not an IPv6 address", host)
		}
		port, err := parsePort(portText)
		return host, port, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil // a bare IPv6 address, checked by ParseHost
	}
	host, portText, found := strings.Cut(s, ":")
	if !found {
		return s, 0, nil
	}
	port, err := parsePort(portText)
	return host, port, err
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s[0] == '0' {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// Host is a host a request names, normalised: either a name or an IP address.
type Host struct {
	Name string     // a normalised DNS name (lower case, A-labels, no trailing dot)
	Addr netip.Addr // set instead of Name for an IP literal
}

// String returns the host as a request would name it.
func (h Host) String() string {
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	return h.Name
}

// ParseHost normalises a host as a request names it, without a port: a DNS name, an
// IPv4 address, or an IPv6 address with or without brackets. An IPv6 zone is refused,
// since it names an interface of kiln's host rather than a destination.
func ParseHost(s string) (Host, error) {
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
		if !strings.Contains(s, ":") {
			return Host{}, fmt.Errorf("%q in brackets is not an IPv6 address", s)
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return Host{}, fmt.Errorf("%q: an IPv6 zone is not a destination", s)
		}
		return Host{Addr: a.Unmap()}, nil
	}
	if strings.Contains(s, ":") {
		return Host{}, fmt.Errorf("%q is not an IP address", s)
	}
	name, err := normaliseName(s)
	if err != nil {
		return Host{}, err
	}
	return Host{Name: name}, nil
}

// maxName is the longest DNS name, in its dotted form without the trailing dot.
const maxName = 253

// normaliseName returns a DNS name in the one form kiln compares: IDNA A-labels in lower
// case, no trailing dot, letters, digits and hyphens only.
func normaliseName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", errors.New("empty name")
	}
	if len(s) > 4*maxName {
		return "", errors.New("name too long")
	}
	if !utf8.ValidString(s) {
		return "", errors.New("a name that is not UTF-8")
	}
	ascii, err := idna.Lookup.ToASCII(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a valid host name", s)
	}
	// IDNA mapping may turn a full stop like U+3002 into a trailing dot.
	ascii = strings.TrimSuffix(ascii, ".")
	// The form kept must be its own normal form, or two spellings of one name could
	// compare unequal.
	if again, err := idna.Lookup.ToASCII(ascii); err != nil || again != ascii {
		return "", fmt.Errorf("%q is not a valid host name", s)
	}
	if len(ascii) > maxName {
		return "", fmt.Errorf("%q is longer than %d characters", s, maxName)
	}
	labels := strings.Split(ascii, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", fmt.Errorf("%q: %w", s, err)
		}
	}
	if allDigits(labels[len(labels)-1]) {
		return "", fmt.Errorf("%q looks like an IP address but is not one", s)
	}
	return ascii, nil
}

func checkLabel(l string) error {
	if l == "" {
		return errors.New("empty label")
	}
	if len(l) > 63 {
		return errors.New("a label is longer than 63 characters")
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("label %q has a character other than a letter, a digit or a hyphen", l)
		}
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// String returns the pattern in the form ParsePattern reads, normalised.
func (p Pattern) String() string {
	var host string
	switch p.kind {
	case kindAny:
		host = "*"
	case kindWildcard:
		host = "*." + p.name
	case kindAddr:
		host = p.addr.String()
		if p.addr.Is6() && p.port != 0 {
			host = "[" + host + "]"
		}
	default:
		host = p.name
	}
	if p.port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(int(p.port))
}

// Matches reports whether the pattern allows a request for host on port.
func (p Pattern) Matches(h Host, port uint16) bool {
	if p.port == 0 && !isDefaultPort(port) || p.port != 0 && p.port != port {
		return false
	}
	if h.Addr.IsValid() {
		return p.kind == kindAddr && p.addr == h.Addr
	}
	switch p.kind {
	case kindAny:
		return h.Name != ""
	case kindName:
		return p.name == h.Name
	case kindWildcard:
		return isSubdomain(h.Name, p.name)
	}
	return false
}

// isSubdomain reports whether name is a strict subdomain of zone.
func isSubdomain(name, zone string) bool {
	return len(name) > len(zone)+1 && strings.HasSuffix(name, zone) && name[len(name)-len(zone)-1] == '.'
}

// intersect returns the pattern that allows exactly the requests both p and q allow, if
// there are any. That this is always one pattern (or none) is what lets a call's
// narrowing be written down as an allow list of its own.
func (p Pattern) intersect(q Pattern) (Pattern, bool) {
	port, ok := intersectPorts(p.port, q.port)
	if !ok {
		return Pattern{}, false
	}
	if p.kind > q.kind { // order the pair by kind: name, wildcard, any, addr
		p, q = q, p
	}
	var out Pattern
	switch {
	case p.kind == kindAddr || q.kind == kindAddr:
		if p.kind != q.kind || p.addr != q.addr {
			return Pattern{}, false
		}
		out = p
	case q.kind == kindAny:
		out = p
	case p.kind == kindName && q.kind == kindName:
		if p.name != q.name {
			return Pattern{}, false
		}
		out = p
	case p.kind == kindName: // and q a wildcard
		if !isSubdomain(p.name, q.name) {
			return Pattern{}, false
		}
		out = p
	default: // two wildcards: the narrower one, when it lies inside the other
		switch {
		case p.name == q.name || isSubdomain(p.name, q.name):
			out = p
		case isSubdomain(q.name, p.name):
			out = q
		default:
			return Pattern{}, false
		}
	}
	out.port = port
	return out, true
}

func intersectPorts(a, b uint16) (uint16, bool) {
	switch {
	case a == b:
		return a, true
	case a == 0 && isDefaultPort(b):
		return b, true
	case b == 0 && isDefaultPort(a):
		return a, true
	}
	return 0, false
}
