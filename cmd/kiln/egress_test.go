package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"

// Egress is off by default and adds nothing to the sandboxes' environment; an allow
// list turns it on, with the CAs and the indexes passed on.
func TestEgressConfig(t *testing.T) {
	c := defaults(t)
	if c.egress.On() || c.egressEnv(c.egress) != nil {
		t.Fatalf("egress on by default: %v", c.egressEnv(c.egress))
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, []byte(testCA), 0o644)
	t.Setenv("EGRESS_ALLOW", "pypi.internal, *.github.com:443")
	t.Setenv("EGRESS_RESOLVE", "pypi.internal=10.0.0.5")
	t.Setenv("EGRESS_ALLOW_PRIVATE", "10.0.0.5/32")
	t.Setenv("EGRESS_CA_BUNDLE", caFile)
	t.Setenv("PIP_INDEX_URL", "https://pypi.internal/simple/")
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	env := c.egressEnv(c.egress)
	for _, want := range []string{"KILN_EGRESS=1", "KILN_EGRESS_CA=" + testCA + "\n", "PIP_INDEX_URL=https://pypi.internal/simple/"} {
		if !slices.Contains(env, want) {
			t.Errorf("sandbox environment %q lacks %q", env, want)
		}
	}
	if spec := (&Main{cfg: c}).spec("kiln-python:latest"); !slices.Contains(spec.Env, "KILN_EGRESS=1") || !spec.Egress {
		t.Errorf("the sandbox spec (egress %v, environment %q) lacks the switch", spec.Egress, spec.Env)
	}
}

// A malformed egress setting stops kiln at start, naming the variable.
func TestEgressConfigErrors(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"EGRESS_ALLOW", "pypi..internal", "EGRESS_ALLOW"},
		{"EGRESS_RESOLVE", "pypi.internal", "EGRESS_RESOLVE"},
		{"EGRESS_ALLOW_PRIVATE", "10.0.0.0/33", "EGRESS_ALLOW_PRIVATE"},
		{"EGRESS_POLICY_FILE", "/nonexistent/policy.json", "EGRESS_POLICY_FILE"},
		{"EGRESS_CA_BUNDLE", "/nonexistent/ca.pem", "EGRESS_CA_BUNDLE"},
		{"EGRESS_CA_BUNDLE", "-----BEGIN PRIVATE KEY-----", "EGRESS_CA_BUNDLE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(c.name, c.value)
			if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s=%q: got %v, want an error naming %s", c.name, c.value, err, c.want)
			}
		})
	}
}

// EGRESS_SOCKET_DIR: the temporary directory, "off" for none, or the operator's.
func TestEgressSocketDir(t *testing.T) {
	for set, want := range map[string]string{"": os.TempDir(), "off": "", "/run/kiln-egress": "/run/kiln-egress"} {
		if got := (EgressConfig{SocketDir: set}).socketDir(); got != want {
			t.Errorf("EGRESS_SOCKET_DIR=%q: %q, want %q", set, got, want)
		}
	}
}
