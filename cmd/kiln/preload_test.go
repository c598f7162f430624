package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePreload(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "all", want: ""},
		{in: " None ", want: "none"},
		{in: "numpy", want: "numpy"},
		{in: "numpy, Pandas,numpy", want: "numpy,pandas"},
		{in: "numpy,torch", err: `unknown module "torch"`},
		{in: "numpy,none", err: `"none" must be the only value`},
		{in: "numpy,,pandas", err: `unknown module ""`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePreload(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestSandboxEnvCarriesPreloadAndWarmHeap(t *testing.T) {
	if env := sandboxEnv("", 0); env != nil {
		t.Errorf("got %v for the defaults with no warm heap, want nil (the default environment)", env)
	}
	env := sandboxEnv("numpy", 0)
	if got := env[len(env)-1]; got != "KILN_PRELOAD=numpy" {
		t.Errorf("got last variable %q, want KILN_PRELOAD=numpy", got)
	}
	env = sandboxEnv("", 32)
	if got := env[len(env)-1]; got != "KILN_WARM_HEAP_MB=32" || slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, "KILN_PRELOAD=") }) {
		t.Errorf("got %v, want the default environment and KILN_WARM_HEAP_MB=32", env)
	}
	env = sandboxEnv("none", 8)
	if got := env[len(env)-2:]; got[0] != "KILN_PRELOAD=none" || got[1] != "KILN_WARM_HEAP_MB=8" {
		t.Errorf("got %v, want KILN_PRELOAD=none then KILN_WARM_HEAP_MB=8", env)
	}
}

// The warm heap goes to REPLs that warm up in the pool, not to those that docker exec
// starts per execution, which would touch it on the request's time; where it goes, the
// container's memory limit grows by its size.
func TestSpecWarmHeapOnlyForPooledREPLs(t *testing.T) {
	for _, repl := range []bool{true, false} {
		m := &Main{cfg: Config{SandboxImage: "img", SandboxMemoryMB: 512, SandboxWarmHeapMB: 32, ReplEnabled: repl}}
		spec := m.spec("img")
		if spec.PerCall == repl {
			t.Errorf("REPL_ENABLED=%v: got PerCall %v, want %v", repl, spec.PerCall, !repl)
		}
		has := slices.Contains(spec.Env, "KILN_WARM_HEAP_MB=32")
		if has != repl {
			t.Errorf("REPL_ENABLED=%v: got KILN_WARM_HEAP_MB in the sandbox environment %v, want %v", repl, has, repl)
		}
		// The warm heap is the REPL's: the container's limit carries it on top of the code's.
		want := int64(512)
		if repl {
			want += 32
		}
		if spec.MemoryMB != want {
			t.Errorf("REPL_ENABLED=%v: got a memory limit of %d MB, want %d", repl, spec.MemoryMB, want)
		}
	}
}
