package egress

import (
	"testing"
)

// A gate picks the caller's policy, narrows it by the call's network, and takes a new
// policy file for the calls opened after SetPolicies.
func TestGatePoliciesAndReplacement(t *testing.T) {
	base, err := ParsePolicy(Settings{Allow: []string{"pypi.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	file, err := ParsePolicies([]byte(`{"tenants": {"acme": {"allow": ["*.github.com"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{})
	defer p.Close()
	g := NewGate(p, base, file)
	policy := func(c Call) Policy {
		t.Helper()
		scope, err := g.scope(c)
		if err != nil {
			t.Fatal(err)
		}
		defer scope.Close()
		return scope.Policy()
	}
	github, _ := ParseHost("api.github.com")
	pypi, _ := ParseHost("pypi.internal")
	if !policy(Call{Tenant: "acme"}).CheckHost(github, 443).Allowed() || policy(Call{Tenant: "acme"}).CheckHost(pypi, 443).Allowed() {
		t.Error("tenant acme: want its entry, whole")
	}
	if !policy(Call{Key: "k"}).CheckHost(pypi, 443).Allowed() {
		t.Error("another caller: want the environment's policy")
	}
	if policy(Call{Network: &Network{Off: true}}).CheckHost(pypi, 443).Allowed() {
		t.Error("network false: want it shut")
	}
	if _, _, err := g.Open(Call{Network: &Network{Allow: []string{"bad..name"}}}); err == nil {
		t.Error("a malformed network: want an error")
	}
	g.SetPolicies(nil)
	if policy(Call{Tenant: "acme"}).CheckHost(github, 443).Allowed() {
		t.Error("after SetPolicies(nil): want the environment's policy for acme too")
	}
}
