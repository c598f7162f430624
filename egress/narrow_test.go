package egress

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// operator is the operator's policy the narrowing tests start from.
var operator = Settings{
	Allow:        []string{"pypi.internal", "*.github.com", "api.example.com:443", "10.0.0.5"},
	Resolve:      []string{"pypi.internal=10.0.0.5"},
	AllowPrivate: []string{"10.0.0.5"},
}

// TestNarrowCannotWiden sends calls that try to reach more than the operator allows,
// and checks that each request the call names is refused, or allowed only where the
// operator allowed it already.
func TestNarrowCannotWiden(t *testing.T) {
	base := mustPolicy(t, operator)
	for _, tc := range []struct {
		name  string
		allow []string
		host  string
		port  uint16
		want  string // "" for allowed
	}{
		{"a broader wildcard", []string{"*.example.com"}, "other.example.com", 443, "other.example.com not allowed"},
		{"a broader wildcard keeps the operator's part", []string{"*.example.com"}, "api.example.com", 443, ""},
		{"any name", []string{"*"}, "other.example", 443, "other.example not allowed"},
		{"any name keeps the operator's names", []string{"*"}, "pypi.internal", 443, ""},
		{"the apex of a wildcard", []string{"github.com"}, "github.com", 443, "github.com not allowed"},
		{"another port", []string{"api.example.com:8443"}, "api.example.com", 8443, "api.example.com:8443 not allowed"},
		{"port 80 of a port-443 entry", []string{"api.example.com"}, "api.example.com", 80, "api.example.com not allowed"},
		{"another port on a wildcard", []string{"*.github.com:22"}, "api.github.com", 22, "api.github.com:22 not allowed"},
		{"a private address", []string{"10.0.0.6"}, "10.0.0.6", 443, "10.0.0.6 not allowed"},
		{"loopback", []string{"127.0.0.1"}, "127.0.0.1", 80, "127.0.0.1 not allowed"},
		{"the metadata address", []string{"169.254.169.254"}, "169.254.169.254", 80, "169.254.169.254 not allowed"},
		{"a host left out", []string{"pypi.internal"}, "api.github.com", 443, "api.github.com not allowed for this call"},
		{"an empty list", []string{}, "pypi.internal", 443, "pypi.internal not allowed for this call"},
		{"a narrower wildcard", []string{"*.api.github.com"}, "x.api.github.com", 443, ""},
		{"outside the narrower wildcard", []string{"*.api.github.com"}, "raw.github.com", 443, "raw.github.com not allowed for this call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := base.Narrow(&Network{Allow: tc.allow})
			if err != nil {
				t.Fatalf("Narrow(%v): %v", tc.allow, err)
			}
			d := p.CheckHost(mustHost(t, tc.host), tc.port)
			if tc.want == "" {
				if !d.Allowed() {
					t.Errorf("got %q, want allowed", d.Reason)
				}
				return
			}
			if d.Allowed() || d.Reason != "egress denied: "+tc.want {
				t.Errorf("got %q, want %q", d.Reason, "egress denied: "+tc.want)
			}
			for _, pat := range p.Allow() {
				if !coveredBy(pat, base.Allow()) {
					t.Errorf("the narrowed list holds %s, which the operator's does not cover", pat)
				}
			}
		})
	}
}

// coveredBy reports whether p allows nothing outside list.
func coveredBy(p Pattern, list []Pattern) bool {
	for _, q := range list {
		if both, ok := p.intersect(q); ok && both == p {
			return true
		}
	}
	return false
}

func TestNarrowKeepsTheOperatorsResolution(t *testing.T) {
	p, err := mustPolicy(t, operator).Narrow(&Network{Allow: []string{"pypi.internal:443"}})
	if err != nil {
		t.Fatal(err)
	}
	if addrs, ok := p.mapped("pypi.internal"); !ok || len(addrs) != 1 {
		t.Errorf("pypi.internal maps to %v, want the operator's address", addrs)
	}
	if d := p.CheckAddr(Host{Name: "pypi.internal"}, addrs1(t, p, "pypi.internal")); !d.Allowed() {
		t.Errorf("the mapped private address is refused after narrowing: %s", d.Reason)
	}
	if got, want := p.Limits(), mustPolicy(t, operator).Limits(); got != want {
		t.Errorf("got limits %+v, want the operator's %+v", got, want)
	}
}

func addrs1(t *testing.T, p Policy, name string) netip.Addr {
	t.Helper()
	addrs, _ := p.mapped(name)
	if len(addrs) == 0 {
		t.Fatalf("%s is not mapped", name)
	}
	return addrs[0]
}

func TestNarrowOff(t *testing.T) {
	p, err := mustPolicy(t, operator).Narrow(&Network{Off: true})
	if err != nil {
		t.Fatal(err)
	}
	d := p.CheckHost(Host{Name: "pypi.internal"}, 443)
	if d.Allowed() || d.Code != CodeOff || d.Reason != "egress denied: network is off for this call" {
		t.Errorf("got %s %q, want the network off", d.Code, d.Reason)
	}
	// Narrowing again cannot open it.
	p, err = p.Narrow(&Network{Allow: []string{"pypi.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.CheckHost(Host{Name: "pypi.internal"}, 443); d.Allowed() {
		t.Error("a second narrowing reopened a closed network")
	}
	if !p.Off() {
		t.Error("Off() is false")
	}
}

func TestNarrowNilKeepsThePolicy(t *testing.T) {
	p, err := mustPolicy(t, operator).Narrow(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.CheckHost(Host{Name: "pypi.internal"}, 443); !d.Allowed() {
		t.Errorf("got %q, want allowed", d.Reason)
	}
}

func TestNarrowRefusesMalformed(t *testing.T) {
	_, err := mustPolicy(t, operator).Narrow(&Network{Allow: []string{"pypi.internal", "bad pattern"}})
	if err == nil || !strings.Contains(err.Error(), `network.allow: "bad pattern"`) {
		t.Errorf("got error %v, want one naming network.allow", err)
	}
	many := make([]string, maxCallPatterns+1)
	for i := range many {
		many[i] = "a.example"
	}
	if _, err := mustPolicy(t, operator).Narrow(&Network{Allow: many}); err == nil {
		t.Error("got no error for too many patterns")
	}
}

func TestNetworkJSON(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Network
		wantErr bool
	}{
		{in: `false`, want: Network{Off: true}},
		{in: ` {"allow": ["pypi.internal"]} `, want: Network{Allow: []string{"pypi.internal"}}},
		{in: `{"allow": []}`, want: Network{Allow: []string{}}},
		{in: `true`, wantErr: true},
		{in: `{}`, wantErr: true},
		{in: `{"allow": null}`, wantErr: true},
		{in: `{"allowed": ["x"]}`, wantErr: true},
		{in: `{"allow": ["x"], "extra": 1}`, wantErr: true},
		{in: `["x"]`, wantErr: true},
		{in: `"x"`, wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var n Network
			err := json.Unmarshal([]byte(tc.in), &n)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %+v, want an error", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Off != tc.want.Off || strings.Join(n.Allow, ",") != strings.Join(tc.want.Allow, ",") {
				t.Errorf("got %+v, want %+v", n, tc.want)
			}
			out, err := json.Marshal(n)
			if err != nil {
				t.Fatal(err)
			}
			var back Network
			if err := json.Unmarshal(out, &back); err != nil || back.Off != n.Off || len(back.Allow) != len(n.Allow) {
				t.Errorf("%s does not read back: %+v, %v", out, back, err)
			}
		})
	}
	// A request body without the field leaves the pointer nil: the policy as it is.
	var req struct {
		Network *Network `json:"network"`
	}
	if err := json.Unmarshal([]byte(`{}`), &req); err != nil || req.Network != nil {
		t.Errorf("got %+v, %v, want no network", req.Network, err)
	}
}
