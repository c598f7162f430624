package egress

import (
	"strings"
	"testing"
)

const policyFile = `{
  "default": {"allow": ["pypi.internal"], "resolve": ["pypi.internal=10.0.0.5"], "allow_private": ["10.0.0.5"]},
  "tenants": {"t1": {"allow": ["*.github.com"], "max_bytes": 1048576}, "t2": {"allow": []}},
  "keys":    {"k1": {"allow": ["api.example.com:443"], "max_connections": 2}}
}`

func TestPoliciesSelect(t *testing.T) {
	ps, err := ParsePolicies([]byte(policyFile))
	if err != nil {
		t.Fatal(err)
	}
	base := mustPolicy(t, Settings{Allow: []string{"env.example"}})
	for _, tc := range []struct {
		name, tenant, key string
		allowed           string // a host the selected policy allows
		refused           string // and one it refuses
	}{
		{"the key's entry beats the tenant's", "t1", "k1", "api.example.com", "api.github.com"},
		{"the tenant's entry beats the default", "t1", "k9", "api.github.com", "pypi.internal"},
		{"the default beats the environment", "t9", "k9", "pypi.internal", "env.example"},
		{"no tenant and no key take the default", "", "", "pypi.internal", "env.example"},
		{"an entry is taken whole", "t1", "", "api.github.com", "pypi.internal"},
		{"an empty list closes", "t2", "", "", "pypi.internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ps.Select(base, tc.tenant, tc.key)
			if tc.allowed != "" {
				if d := p.CheckHost(Host{Name: tc.allowed}, 443); !d.Allowed() {
					t.Errorf("%s: got %q, want allowed", tc.allowed, d.Reason)
				}
			}
			if d := p.CheckHost(Host{Name: tc.refused}, 443); d.Allowed() {
				t.Errorf("%s: allowed, want refused", tc.refused)
			}
		})
	}
	if got := ps.Select(base, "t1", "k1").Limits().MaxConnections; got != 2 {
		t.Errorf("k1's max_connections: got %d, want 2", got)
	}
	if got := ps.Select(base, "t1", "").Limits(); got.MaxBytes != 1048576 || got.MaxConnections != DefaultMaxConnections {
		t.Errorf("t1's limits: got %+v, want max_bytes 1048576 and the default connections", got)
	}
	// Without a default the environment's policy applies to everyone without an entry.
	ps, err = ParsePolicies([]byte(`{"tenants": {"t1": {"allow": ["a.example"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := ps.Select(base, "t9", "").CheckHost(Host{Name: "env.example"}, 443); !d.Allowed() {
		t.Errorf("got %q, want the environment's policy", d.Reason)
	}
	var none *Policies
	if d := none.Select(base, "t1", "k1").CheckHost(Host{Name: "env.example"}, 443); !d.Allowed() {
		t.Errorf("a nil Policies: got %q, want the environment's policy", d.Reason)
	}
}

func TestParsePoliciesRefuses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`{"tenants": {"t1": {"allow": ["bad one"]}}, "keys": {"k1": {"allow_private": ["10.0.0.1/8"]}}}`,
			[]string{`tenants.t1.allow: "bad one"`, `keys.k1.allow_private: "10.0.0.1/8"`}},
		{`{"default": {"resolve": ["x"]}}`, []string{`default.resolve: "x"`}},
		{`{"defaults": {}}`, []string{"unknown field"}},
		{`{"tenants": {"t1": {"allowed": []}}}`, []string{"unknown field"}},
		{`{"default": {"max_bytes": -5}}`, []string{"default: a cap is negative"}},
		{`{} {}`, []string{"more than one"}},
		{`[`, []string{"policy file"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParsePolicies([]byte(tc.in))
			if err == nil {
				t.Fatal("got no error")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("got error %q, want it to mention %q", err, want)
				}
			}
		})
	}
}
