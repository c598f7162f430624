package main

import "testing"

// Each runtime says from the configuration what kiln must know before it is open; what
// it is once open it says itself (sandbox.Runtime.Traits, checked by the runtime
// contract in test/runtime). Nothing else in cmd compares runtime names.
func TestRuntimesDescribeThemselves(t *testing.T) {
	for _, tt := range []struct {
		name      string
		c         Config
		liveMax   int
		minMemory int64
	}{
		{"Docker, runc", Config{Runtime: RuntimeDocker}, 0, 0},
		{"Docker, gVisor", Config{Runtime: RuntimeDocker, SandboxRuntime: "runsc"}, 0, 512},
		{"Kubernetes", Config{Runtime: RuntimeKubernetes}, kubeLiveMax, 0},
		{"Kubernetes, a RuntimeClass", Config{Runtime: RuntimeKubernetes, KubeRuntimeClass: "gvisor"}, kubeLiveMax, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt := runtimes[tt.c.Runtime]
			if rt.liveMax != tt.liveMax {
				t.Errorf("LIVE_SESSIONS_MAX when unset %d, want %d (0: from the host)", rt.liveMax, tt.liveMax)
			}
			if got := rt.minMemoryMB(tt.c); got != tt.minMemory {
				t.Errorf("least memory %d, want %d", got, tt.minMemory)
			}
		})
	}
}
