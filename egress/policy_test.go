package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParsePolicyNamesEachSetting(t *testing.T) {
	_, err := ParsePolicy(Settings{
		Allow:        []string{"ok.example", "not ok"},
		Resolve:      []string{"pypi.internal", "x.example=300.1.1.1", "10.0.0.1=10.0.0.1"},
		AllowPrivate: []string{"10.0.0.5/8", "nonsense"},
		MaxBytes:     -1,
	})
	if err == nil {
		t.Fatal("got no error, want one per malformed entry")
	}
	for _, want := range []string{
		`EGRESS_ALLOW: "not ok"`,
		`EGRESS_RESOLVE: "pypi.internal": want name=address`,
		`EGRESS_RESOLVE: "x.example=300.1.1.1"`,
		`EGRESS_RESOLVE: "10.0.0.1=10.0.0.1": an address needs no mapping`,
		`EGRESS_ALLOW_PRIVATE: "10.0.0.5/8": host bits are set: did you mean 10.0.0.0/8?`,
		`EGRESS_ALLOW_PRIVATE: "nonsense"`,
		`negative`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("got error %q, want it to mention %q", err, want)
		}
	}
}

func TestParsePolicyDefaults(t *testing.T) {
	p := mustPolicy(t, Settings{Allow: SplitList(" pypi.internal, ,*.github.com,")})
	if got, want := len(p.Allow()), 2; got != want {
		t.Errorf("got %d patterns, want %d", got, want)
	}
	if got, want := p.Limits(), (Limits{DefaultMaxConnections, DefaultMaxBytes}); got != want {
		t.Errorf("got limits %+v, want %+v", got, want)
	}
	if (Policy{}).CheckHost(Host{Name: "a.example"}, 443).Allowed() {
		t.Error("the zero Policy allowed a host")
	}
	if !(Policy{}).Off() {
		t.Error("the zero Policy is not off")
	}
}

func TestCheckHost(t *testing.T) {
	p := mustPolicy(t, Settings{Allow: []string{"pypi.internal", "*.github.com", "api.example.com:443"}})
	for _, tc := range []struct {
		host       string
		port       uint16
		wantReason string
	}{
		{"pypi.internal", 443, "egress allowed"},
		{"PYPI.internal.", 80, "egress allowed"},
		{"api.github.com", 443, "egress allowed"},
		{"github.com", 443, "egress denied: github.com not allowed"},
		{"other.example", 443, "egress denied: other.example not allowed"},
		{"api.example.com", 80, "egress denied: api.example.com not allowed"},
		{"pypi.internal", 8080, "egress denied: pypi.internal:8080 not allowed"},
		{"10.0.0.5", 443, "egress denied: 10.0.0.5 not allowed"},
		{"fd00::5", 22, "egress denied: [fd00::5]:22 not allowed"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			d := p.CheckHost(mustHost(t, tc.host), tc.port)
			if d.Reason != tc.wantReason {
				t.Errorf("got %q, want %q", d.Reason, tc.wantReason)
			}
			if d.Allowed() != (d.Code == CodeAllowed) || !d.Allowed() && d.Code != CodeHost {
				t.Errorf("got code %q for %q", d.Code, d.Reason)
			}
		})
	}
}

func TestCheckAddr(t *testing.T) {
	open := mustPolicy(t, Settings{AllowPrivate: []string{"127.0.0.0/8", "10.1.0.0/16", "169.254.0.0/16", "fd00::/8", "0.0.0.0/0"}})
	metadata := mustPolicy(t, Settings{AllowPrivate: []string{"169.254.169.254/32", "fd00:ec2::254"}})
	closed := mustPolicy(t, Settings{})
	name := Host{Name: "pypi.internal"}
	for _, tc := range []struct {
		policy Policy
		host   Host
		addr   string
		want   string // "" for allowed
	}{
		{closed, name, "93.184.215.14", ""},
		{closed, name, "2606:2800:21f:cb07:6820:80da:af6b:8b2c", ""},
		{closed, name, "10.0.0.5", "egress denied: pypi.internal resolves to 10.0.0.5, a private address"},
		{closed, Host{Addr: netip.MustParseAddr("10.0.0.5")}, "10.0.0.5", "egress denied: 10.0.0.5 is a private address"},
		{closed, name, "127.0.0.1", "a loopback address"},
		{closed, name, "::1", "a loopback address"},
		{closed, name, "::ffff:127.0.0.1", "127.0.0.1, a loopback address"},
		{closed, name, "0.0.0.0", "an unspecified address"},
		{closed, name, "::", "an unspecified address"},
		{closed, name, "172.20.1.1", "a private address"},
		{closed, name, "192.168.1.1", "a private address"},
		{closed, name, "fd12::1", "a private address"},
		{closed, name, "100.64.0.1", "carrier-grade NAT"},
		{closed, name, "169.254.1.1", "a link-local address"},
		{closed, name, "fe80::1", "a link-local address"},
		{closed, name, "224.0.0.1", "a multicast address"},
		{closed, name, "ff02::1", "a multicast address"},
		{closed, name, "255.255.255.255", "a reserved address"},
		{closed, name, "64:ff9b::a00:5", "embeds an IPv4 address"},
		{closed, name, "2002:a00:5::1", "embeds an IPv4 address"},
		{closed, name, "::a00:5", "a reserved address"},
		{closed, name, "169.254.169.254", "egress denied: pypi.internal resolves to 169.254.169.254, the cloud metadata address"},
		{closed, name, "fd00:ec2::254", "the cloud metadata address"},
		{open, name, "127.0.0.1", ""},
		{open, name, "10.1.2.3", ""},
		{open, name, "10.2.0.1", ""}, // 0.0.0.0/0 opens every IPv4 range
		{open, name, "fd00::5", ""},
		{open, name, "169.254.1.1", ""},
		{open, name, "169.254.169.254", "the cloud metadata address"},
		{open, name, "100.100.100.200", "the cloud metadata address"},
		{open, name, "fd00:ec2::254", "the cloud metadata address"},
		{metadata, name, "169.254.169.254", ""},
		{metadata, name, "fd00:ec2::254", ""},
		{metadata, name, "169.254.169.253", "a link-local address"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			d := tc.policy.CheckAddr(tc.host, netip.MustParseAddr(tc.addr))
			if tc.want == "" {
				if !d.Allowed() {
					t.Errorf("got %q, want allowed", d.Reason)
				}
				return
			}
			if d.Allowed() || !strings.Contains(d.Reason, tc.want) {
				t.Errorf("got %q (%s), want a refusal mentioning %q", d.Reason, d.Code, tc.want)
			}
			if strings.Contains(tc.want, "metadata") != (d.Code == CodeMetadata) {
				t.Errorf("got code %q for %q", d.Code, d.Reason)
			}
		})
	}
}

func TestParseResolve(t *testing.T) {
	p := mustPolicy(t, Settings{Resolve: []string{
		"PyPI.Internal.=10.0.0.5", "pypi.internal=10.0.0.6", "pypi.internal=10.0.0.5", "v6.internal=[fd00::5]",
	}})
	got, _ := p.mapped("pypi.internal")
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")}; !equalAddrs(got, want) {
		t.Errorf("pypi.internal maps to %v, want %v", got, want)
	}
	got, _ = p.mapped("v6.internal")
	if want := []netip.Addr{netip.MustParseAddr("fd00::5")}; !equalAddrs(got, want) {
		t.Errorf("v6.internal maps to %v, want %v", got, want)
	}
	if _, ok := p.mapped("other.internal"); ok {
		t.Error("an unmapped name is mapped")
	}
}

func equalAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mustPolicy(t *testing.T, s Settings) Policy {
	t.Helper()
	p, err := ParsePolicy(s)
	if err != nil {
		t.Fatalf("ParsePolicy(%+v): %v", s, err)
	}
	return p
}

func mustHost(t *testing.T, s string) Host {
	t.Helper()
	h, err := ParseHost(s)
	if err != nil {
		t.Fatalf("ParseHost(%q): %v", s, err)
	}
	return h
}
