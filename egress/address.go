package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// specialRange is a block of addresses that is not the public internet: reaching one
// from a sandbox means reaching kiln's host, its network or its cloud, so it takes an
// EGRESS_ALLOW_PRIVATE entry that covers it.
type specialRange struct {
	prefix netip.Prefix
	what   string // completes "..., a private address"
}

var specialRanges = func() []specialRange {
	var out []specialRange
	add := func(what string, cidrs ...string) {
		for _, c := range cidrs {
			out = append(out, specialRange{netip.MustParsePrefix(c), what})
		}
	}
	add("a loopback address", "127.0.0.0/8", "::1/128")
	add("an unspecified address", "0.0.0.0/8", "::/128")
	add("a private address", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
	add("a shared (carrier-grade NAT) address", "100.64.0.0/10")
	add("a link-local address", "169.254.0.0/16", "fe80::/10")
	add("a multicast address", "224.0.0.0/4", "ff00::/8")
	// Prefixes that embed an IPv4 address a gateway may translate back into a private one.
	add("an address that embeds an IPv4 address (NAT64, 6to4, Teredo)",
		"64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32")
	add("a reserved address",
		"192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
		"240.0.0.0/4", // includes the broadcast address
		"2001:db8::/32")
	return out
}()

// globalUnicast is where every public IPv6 address lies; the rest of IPv6 (legacy
// IPv4-compatible forms, discard, site-local, unassigned space) is reserved.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// metadataAddrs are the cloud instance metadata services, which hand out credentials
// to whoever asks from the host: AWS, GCP, Azure and Oracle (169.254.169.254), AWS's
// IPv6 endpoint, ECS task metadata, Alibaba Cloud. Covering one with a wider range in
// EGRESS_ALLOW_PRIVATE does not open it; only the address itself does.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("100.100.100.200"),
}

// classify says what kind of special address a is, or "" for a public one.
func classify(a netip.Addr) string {
	a = a.Unmap()
	for _, m := range metadataAddrs {
		if a == m {
			return "the cloud metadata address"
		}
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r.what
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return "a reserved address"
	}
	return ""
}

func isMetadata(a netip.Addr) bool {
	for _, m := range metadataAddrs {
		if a == m {
			return true
		}
	}
	return false
}

// parsePrivate parses EGRESS_ALLOW_PRIVATE: CIDRs, or single addresses.
func parsePrivate(setting string, entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		p, err := parsePrefix(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %w", setting, e, err))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(strings.Trim(s, "[]"))
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("want a CIDR such as 10.0.0.0/8, or one address")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want a CIDR such as 10.0.0.0/8, or one address")
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, errors.New("an IPv4-mapped range: write it as IPv4")
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("host bits are set: did you mean %s?", p.Masked())
	}
	return p, nil
}

// maxResolveAddrs bounds the addresses one name may map to.
const maxResolveAddrs = 16

// parseResolve parses EGRESS_RESOLVE: name=address entries, as curl's --resolve
// without the port. A name given twice maps to every address it is given.
func parseResolve(setting string, entries []string) (map[string][]netip.Addr, error) {
	out := make(map[string][]netip.Addr)
	var errs []error
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, addr, err := parseResolveEntry(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %w", setting, e, err))
			continue
		}
		if !containsAddr(out[name], addr) {
			if len(out[name]) == maxResolveAddrs {
				errs = append(errs, fmt.Errorf("%s: %s: more than %d addresses", setting, name, maxResolveAddrs))
				continue
			}
			out[name] = append(out[name], addr)
		}
	}
	return out, errors.Join(errs...)
}

func parseResolveEntry(e string) (string, netip.Addr, error) {
	nameText, addrText, ok := strings.Cut(e, "=")
	if !ok {
		return "", netip.Addr{}, errors.New("want name=address")
	}
	h, err := ParseHost(strings.TrimSpace(nameText))
	if err != nil {
		return "", netip.Addr{}, err
	}
	if h.Name == "" {
		return "", netip.Addr{}, errors.New("an address needs no mapping: map names only")
	}
	addr, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(addrText), "[]"))
	if err != nil || addr.Zone() != "" {
		return "", netip.Addr{}, fmt.Errorf("%q is not an IP address", addrText)
	}
	return h.Name, addr.Unmap(), nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}
