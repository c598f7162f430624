package egress

import (
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"pypi.internal", "pypi.internal"},
		{"PyPI.Internal.", "pypi.internal"},
		{" api.example.com:443 ", "api.example.com:443"},
		{"*.GitHub.com", "*.github.com"},
		{"*.github.com:8443", "*.github.com:8443"},
		{"*", "*"},
		{"*:443", "*:443"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"ＡＢＣ.example", "abc.example"},
		{"10.0.0.5", "10.0.0.5"},
		{"10.0.0.5:8080", "10.0.0.5:8080"},
		{"::ffff:10.0.0.5", "10.0.0.5"},
		{"fd00::5", "fd00::5"},
		{"[fd00::5]", "fd00::5"},
		{"[FD00::5]:443", "[fd00::5]:443"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParsePattern(tc.in)
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tc.in, err)
			}
			if got := p.String(); got != tc.want {
				t.Errorf("ParsePattern(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParsePatternRefuses(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: a part of the error
	}{
		{"", "empty"},
		{"*.", "empty name"},
		{"a..example", "empty label"},
		{"foo*.example", "wildcard"},
		{"a.*.example", "wildcard"},
		{"**.example", "wildcard"},
		{"*.*.example", "wildcard"},
		{"example.com:0", "port"},
		{"example.com:65536", "port"},
		{"example.com:08", "port"},
		{"example.com:", "port"},
		{"example.com:https", "port"},
		{"under_score.example", "not a valid host name"},
		{"-a.example", "not a valid host name"},
		{"a b.example", "not a valid host name"},
		{"10.0.0.0/8", "EGRESS_ALLOW_PRIVATE"},
		{"127.1", "looks like an IP address"},
		{"[a.example]:443", "not an IPv6 address"},
		{"fe80::1%eth0", "zone"},
		{"fd00::g", "not an IP address"},
		{strings.Repeat("a", 64) + ".example", "63"},
		{strings.Repeat("abcdefghi.", 26) + "example", "longer than 253"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParsePattern(tc.in)
			if err == nil {
				t.Fatalf("ParsePattern(%q) = %q, want an error", tc.in, p)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParsePattern(%q): got error %q, want it to mention %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestParseAllowNamesTheSetting(t *testing.T) {
	_, err := ParseAllow("ok.example", "bad one", "*.", "also.ok")
	if err == nil {
		t.Fatal("got no error, want one per malformed entry")
	}
	for _, want := range []string{`EGRESS_ALLOW: "bad one"`, `EGRESS_ALLOW: "*."`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("got error %q, want it to mention %q", err, want)
		}
	}
}

func TestPatternMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		port          uint16
		want          bool
	}{
		{"pypi.internal", "pypi.internal", 443, true},
		{"pypi.internal", "pypi.internal", 80, true},
		{"pypi.internal", "pypi.internal", 8080, false},
		{"pypi.internal", "files.pypi.internal", 443, false},
		{"api.example.com:443", "api.example.com", 443, true},
		{"api.example.com:443", "api.example.com", 80, false},
		{"api.example.com:8443", "api.example.com", 8443, true},
		{"*.github.com", "api.github.com", 443, true},
		{"*.github.com", "a.b.github.com", 443, true},
		{"*.github.com", "github.com", 443, false},
		{"*.github.com", "evilgithub.com", 443, false},
		{"*.github.com", "github.com.evil.example", 443, false},
		{"*", "anything.example", 443, true},
		{"*", "127.0.0.1", 443, false},
		{"10.0.0.5", "10.0.0.5", 80, true},
		{"10.0.0.5", "10.0.0.6", 80, false},
		{"10.0.0.5", "::ffff:10.0.0.5", 80, true},
		{"[fd00::5]:443", "[fd00::5]", 443, true},
		{"fd00::5", "fd00::5", 8443, false},
	} {
		t.Run(tc.pattern+" "+tc.host, func(t *testing.T) {
			p := mustPattern(t, tc.pattern)
			h, err := ParseHost(tc.host)
			if err != nil {
				t.Fatalf("ParseHost(%q): %v", tc.host, err)
			}
			if got := p.Matches(h, tc.port); got != tc.want {
				t.Errorf("%s matches %s port %d: got %v, want %v", tc.pattern, tc.host, tc.port, got, tc.want)
			}
		})
	}
}

func TestPatternIntersect(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want string // "" for none
	}{
		{"a.example", "a.example", "a.example"},
		{"a.example", "b.example", ""},
		{"a.example:443", "a.example", "a.example:443"},
		{"a.example:8443", "a.example", ""},
		{"a.example:8443", "a.example:8443", "a.example:8443"},
		{"x.a.example", "*.a.example", "x.a.example"},
		{"a.example", "*.a.example", ""},
		{"*.a.example", "*.x.a.example", "*.x.a.example"},
		{"*.a.example", "*.a.example:443", "*.a.example:443"},
		{"*.a.example", "*.b.example", ""},
		{"*", "*.a.example", "*.a.example"},
		{"*", "a.example:80", "a.example:80"},
		{"*", "10.0.0.5", ""},
		{"10.0.0.5", "10.0.0.5:443", "10.0.0.5:443"},
		{"10.0.0.5", "a.example", ""},
	} {
		t.Run(tc.a+" "+tc.b, func(t *testing.T) {
			a, b := mustPattern(t, tc.a), mustPattern(t, tc.b)
			for _, pair := range [][2]Pattern{{a, b}, {b, a}} {
				got, ok := pair[0].intersect(pair[1])
				switch {
				case tc.want == "" && ok:
					t.Errorf("%s ∩ %s = %s, want nothing", pair[0], pair[1], got)
				case tc.want != "" && (!ok || got.String() != tc.want):
					t.Errorf("%s ∩ %s = %s (%v), want %s", pair[0], pair[1], got, ok, tc.want)
				}
			}
		})
	}
}

func mustPattern(t *testing.T, s string) Pattern {
	t.Helper()
	p, err := ParsePattern(s)
	if err != nil {
		t.Fatalf("ParsePattern(%q): %v", s, err)
	}
	return p
}
