package egress

import (
	"strings"
	"testing"
)

// FuzzParseAllow parses any EGRESS_ALLOW value. Whatever it accepts is normal: each
// pattern reads back from its String unchanged, holds only ASCII, and a name pattern
// matches its own name on each port it allows and no other port.
func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{
		"pypi.internal", "*.github.com, api.example.com:443", "*", "*:8443", "PyPI.Internal.",
		"bücher.example", "xn--bcher-kva.example", "10.0.0.5", "[fd00::5]:443", "fd00::5",
		"::ffff:10.0.0.5", "a..b", "*.", "a.*.b", "example.com:0", "example.com:65536", "[a.b]:1",
		"fe80::1%eth0", "10.0.0.0/8", "127.1", "a_b.example", "ａ．ｂ", "a\u3002b", "x\u200dy.example",
		"[::1", "::1]", "*.*", ":443", "[]:443",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, setting string) {
		patterns, err := ParseAllow(SplitList(setting)...)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "EGRESS_ALLOW: ") {
				t.Fatalf("error %q does not name EGRESS_ALLOW", err)
			}
			return
		}
		for _, p := range patterns {
			s := p.String()
			for _, r := range s {
				if r > 0x7e || r < 0x21 {
					t.Fatalf("pattern %q is not printable ASCII", s)
				}
			}
			again, err := ParsePattern(s)
			if err != nil || again != p {
				t.Fatalf("%q reads back as %q, %v", s, again, err)
			}
			if p.kind != kindName {
				continue
			}
			h := Host{Name: p.name}
			for _, port := range []uint16{80, 443, 8443} {
				want := p.port == port || p.port == 0 && isDefaultPort(port)
				if got := p.Matches(h, port); got != want {
					t.Fatalf("%s matches its own name on port %d: got %v, want %v", s, port, got, want)
				}
			}
		}
	})
}
