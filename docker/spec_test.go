package docker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/kilnsh/kiln/sandbox"
)

func testSpec() sandbox.Spec {
	return sandbox.Spec{
		Image:     "kiln-python:test",
		MemoryMB:  512,
		MilliCPU:  1000,
		PidsLimit: 128,
		TmpMB:     64,
		DataMB:    256,
		NoFile:    1024,
	}
}

// testRuntime is a Runtime of instance host-1 that is never connected: enough to build
// configurations.
var testRuntime = &Runtime{instance: "host-1"}

func configs(s sandbox.Spec, now time.Time) (*container.Config, *container.HostConfig) {
	return testRuntime.configs(s, now)
}

// TestSpecConfig checks every Config field security.md requires of a sandbox.
func TestSpecConfig(t *testing.T) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	cfg, _ := configs(testSpec(), now)
	tests := []struct {
		name      string
		got, want any
	}{
		{"Image", cfg.Image, "kiln-python:test"},
		{"Entrypoint", strings.Join(cfg.Entrypoint, " "), "python3 /opt/kiln/repl_server.py --await-hello"},
		{"Cmd", len(cfg.Cmd), 0},
		{"User", cfg.User, "10001:10001"},
		{"Tty", cfg.Tty, false},
		{"OpenStdin", cfg.OpenStdin, true},
		{"StdinOnce", cfg.StdinOnce, false},
		{"AttachStdin", cfg.AttachStdin, true},
		{"AttachStdout", cfg.AttachStdout, true},
		{"AttachStderr", cfg.AttachStderr, true},
		{"NetworkDisabled", cfg.NetworkDisabled, true},
		{"Hostname", cfg.Hostname, "sandbox"},
		{"WorkingDir", cfg.WorkingDir, "/mnt/data"},
		{"ExposedPorts", len(cfg.ExposedPorts), 0},
		{"Volumes", len(cfg.Volumes), 0},
		{"label managed", cfg.Labels[sandbox.LabelManaged], "true"},
		{"label service", cfg.Labels[sandbox.LabelService], "kiln"},
		{"label instance", cfg.Labels[sandbox.LabelInstance], "host-1"},
		{"label created-at (UTC)", cfg.Labels[sandbox.LabelCreated], "2025-03-04T04:06:07Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

// TestSpecHostConfig checks every HostConfig field security.md requires of a sandbox.
func TestSpecHostConfig(t *testing.T) {
	_, host := configs(testSpec(), time.Now())
	tests := []struct {
		name      string
		got, want any
	}{
		{"NetworkMode", string(host.NetworkMode), "none"},
		{"ReadonlyRootfs", host.ReadonlyRootfs, true},
		{"CapDrop", strings.Join(host.CapDrop, ","), "ALL"},
		{"CapAdd", len(host.CapAdd), 0},
		{"SecurityOpt", strings.Join(host.SecurityOpt, ","), "no-new-privileges=true"},
		{"Privileged", host.Privileged, false},
		{"IpcMode", string(host.IpcMode), "private"},
		{"Init set", host.Init != nil, true},
		{"AutoRemove", host.AutoRemove, false},
		{"RestartPolicy", host.RestartPolicy.Name, container.RestartPolicyDisabled},
		{"RestartPolicy is no", string(host.RestartPolicy.Name), "no"},
		{"LogConfig.Type", host.LogConfig.Type, "none"},
		{"Runtime (default)", host.Runtime, ""},
		{"Binds", len(host.Binds), 0},
		{"Mounts", len(host.Mounts), 0},
		{"VolumesFrom", len(host.VolumesFrom), 0},
		{"Devices", len(host.Devices), 0},
		{"DeviceRequests", len(host.DeviceRequests), 0},
		{"PortBindings", len(host.PortBindings), 0},
		{"PublishAllPorts", host.PublishAllPorts, false},
		{"Sysctls", len(host.Sysctls), 0},
		{"MaskedPaths left to Docker", host.MaskedPaths == nil, true},
		{"ReadonlyPaths left to Docker", host.ReadonlyPaths == nil, true},
		{"PidMode", string(host.PidMode), ""},
		{"UsernsMode", string(host.UsernsMode), ""},
		{"OomKillDisable unset", host.OomKillDisable == nil, true},
		{"Memory", host.Memory, int64(512 << 20)},
		{"MemorySwap equals Memory", host.MemorySwap, host.Memory},
		{"NanoCPUs", host.NanoCPUs, int64(1e9)},
		{"PidsLimit set", host.PidsLimit != nil, true},
		{"tmpfs mounts", len(host.Tmpfs), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
	if host.Init != nil && !*host.Init {
		t.Errorf("got Init false, want true")
	}
	if host.PidsLimit != nil && *host.PidsLimit != 128 {
		t.Errorf("got PidsLimit %d, want 128", *host.PidsLimit)
	}
}

func TestSpecTmpfs(t *testing.T) {
	_, host := configs(testSpec(), time.Now())
	tests := []struct {
		path     string
		want     []string
		wantNot  []string
		wantSize string
	}{
		{"/tmp", []string{"nosuid", "nodev", "noexec"}, []string{"exec", "suid", "dev"}, "size=64m"},
		// Docker adds noexec to a tmpfs unless told exec; only /tmp is meant to be noexec.
		{"/mnt/data", []string{"nosuid", "nodev", "exec"}, []string{"noexec", "suid", "dev"}, "size=256m"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			opts, ok := host.Tmpfs[tt.path]
			if !ok {
				t.Fatalf("got no tmpfs at %s, want one", tt.path)
			}
			list := strings.Split(opts, ",")
			for _, o := range tt.want {
				if !slices.Contains(list, o) {
					t.Errorf("got options %q, want %s among them", opts, o)
				}
			}
			for _, o := range tt.wantNot {
				if slices.Contains(list, o) {
					t.Errorf("got options %q, want no %s", opts, o)
				}
			}
			if !slices.Contains(list, tt.wantSize) {
				t.Errorf("got options %q, want %s", opts, tt.wantSize)
			}
			if !slices.ContainsFunc(list, func(o string) bool { return strings.HasPrefix(o, "nr_inodes=") }) {
				t.Errorf("got options %q, want nr_inodes=", opts)
			}
		})
	}
}

func TestSpecUlimits(t *testing.T) {
	_, host := configs(testSpec(), time.Now())
	got := map[string][2]int64{}
	for _, u := range host.Ulimits {
		if _, dup := got[u.Name]; dup {
			t.Errorf("got ulimit %s twice, want it once", u.Name)
		}
		got[u.Name] = [2]int64{u.Soft, u.Hard}
	}
	want := map[string][2]int64{
		"nofile": {1024, 1024},
		"fsize":  {256 << 20, 256 << 20},
		"core":   {0, 0},
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("got no %s ulimit, want soft=hard=%d", name, w[0])
			continue
		}
		if g != w {
			t.Errorf("%s: got soft %d hard %d, want %d %d", name, g[0], g[1], w[0], w[1])
		}
	}
	if _, ok := got["nproc"]; ok {
		t.Errorf("got an nproc ulimit, want the pids limit only (nproc is per host user)")
	}
}

// TestSpecOptions checks the fields a Spec chooses: runtime, environment.
func TestSpecOptions(t *testing.T) {
	t.Run("default env", func(t *testing.T) {
		cfg, _ := configs(testSpec(), time.Now())
		if !slices.Equal(cfg.Env, sandbox.DefaultEnv) {
			t.Errorf("got env %q, want %q", cfg.Env, sandbox.DefaultEnv)
		}
	})
	t.Run("own env", func(t *testing.T) {
		s := testSpec()
		s.Env = []string{"A=1"}
		cfg, _ := configs(s, time.Now())
		if !slices.Equal(cfg.Env, []string{"A=1"}) {
			t.Errorf("got env %q, want [A=1]", cfg.Env)
		}
	})
	t.Run("gVisor runtime", func(t *testing.T) {
		rt := &Runtime{instance: "host-1", oci: "runsc"}
		_, host := rt.configs(testSpec(), time.Now())
		if host.Runtime != "runsc" {
			t.Errorf("got runtime %q, want runsc", host.Runtime)
		}
	})
	t.Run("per call: the container idles", func(t *testing.T) {
		s := testSpec()
		s.PerCall = true
		cfg, _ := configs(s, time.Now())
		if got := strings.Join(cfg.Entrypoint, " "); got != "sleep infinity" {
			t.Errorf("got entrypoint %q, want sleep infinity", got)
		}
	})
	t.Run("default env has no secrets", func(t *testing.T) {
		for _, kv := range sandbox.DefaultEnv {
			name, _, _ := strings.Cut(kv, "=")
			if strings.Contains(name, "KEY") || strings.Contains(name, "TOKEN") || strings.Contains(name, "SECRET") || strings.HasPrefix(name, "DOCKER") {
				t.Errorf("got %s in the default env, want no credentials", name)
			}
		}
	})
	t.Run("configs do not share mutable state", func(t *testing.T) {
		_, a := configs(testSpec(), time.Now())
		_, b := configs(testSpec(), time.Now())
		*a.PidsLimit = 1
		if *b.PidsLimit != 128 {
			t.Errorf("got PidsLimit %d after changing another config, want 128", *b.PidsLimit)
		}
	})
}
