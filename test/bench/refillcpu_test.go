package main

import (
	"os"
	"strings"
	"testing"
)

func TestPerSandbox(t *testing.T) {
	tests := []struct {
		name string
		in   RefillCPU
		want RefillCPU
	}{
		{"empty", RefillCPU{}, RefillCPU{}},
		{"four", RefillCPU{N: 4, Seconds: 10.04, Container: 4.8, Daemon: 0.8, Kiln: 0.04, Client: 0.08},
			RefillCPU{N: 4, Seconds: 10, Container: 1.2, Daemon: 0.2, Kiln: 0.01, Client: 0.02, Total: 1.43}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.perSandbox(); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestProcCPU(t *testing.T) {
	comm, cpu, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix("bench.test", comm) || cpu < 0 {
		t.Errorf("got %q, %v; want this test binary's name and a CPU time", comm, cpu)
	}
	if _, _, err := procCPU(-1); err == nil {
		t.Error("got no error for a process that cannot exist")
	}
}

func TestRefillCPUText(t *testing.T) {
	r := &Results{RefillCPU: []RefillCPU{
		{Case: refillCPUKiln, N: 8, Container: 1, Daemon: 0.2, Total: 1.25},
		{Case: refillCPUDocker, N: 8, Container: 1.1, Daemon: 0.3, Total: 1.5},
	}}
	for _, md := range []bool{false, true} {
		if got := refillCPUText(r, md); !strings.Contains(got, "docker run / kiln, CPU per sandbox: 1.20 (container 1.10, daemon side 1.50)") {
			t.Errorf("markdown %v: got %q, want the ratio line", md, got)
		}
	}
	if got := refillCPUText(&Results{}, false); got != "" {
		t.Errorf("got %q with no rows, want nothing", got)
	}
}
