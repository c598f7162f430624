package docker

import (
	"testing"

	"github.com/kilnsh/kiln/sandbox"
)

// The daemon's runtime says what isolates its sandboxes, and that gVisor's do not resize.
func TestTraits(t *testing.T) {
	for oci, want := range map[string]sandbox.Traits{
		"":      {Isolation: "runc", Resizes: true},
		"runc":  {Isolation: "runc", Resizes: true},
		"runsc": {Isolation: "runsc"},
	} {
		rt, err := Open(t.Context(), sandbox.Options{Instance: "traits-test"}, Config{OCIRuntime: oci, NoEgressPort: true})
		if err != nil {
			t.Fatalf("Open(%q): %v", oci, err)
		}
		if got := rt.Traits(); got != want {
			t.Errorf("OCIRuntime %q: Traits %+v, want %+v", oci, got, want)
		}
		_ = rt.Close()
	}
}
