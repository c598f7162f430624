package main

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// cleanEnv unsets every variable Config reads, for the length of the test.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) { // EgressConfig's too
		name := f.Tag.Get("envconfig")
		if name == "" {
			continue
		}
		t.Setenv(name, "") // restores the old value when the test ends
		os.Unsetenv(name)
	}
}

// defaults loads the configuration from an empty environment.
func defaults(t *testing.T) Config {
	t.Helper()
	cleanEnv(t)
	c, err := LoadConfig()
	if err != nil {
		t.Fatalf("LoadConfig with no environment: got %v, want the defaults to be valid", err)
	}
	return c
}

func TestLoadConfigDefaults(t *testing.T) {
	c := defaults(t)
	host, _ := os.Hostname()
	tests := []struct {
		name      string
		got, want any
	}{
		{"LISTEN_ADDR", c.Addr, ":8080"},
		{"API_KEYS", len(c.APIKeys), 0},
		{"LOG_LEVEL", c.LogLevel, "info"},
		{"SANDBOX_IMAGE", c.SandboxImage, "kiln-python:latest"},
		{"SANDBOX_RUNTIME", c.SandboxRuntime, ""},
		{"SANDBOX_MEMORY_MB", c.SandboxMemoryMB, int64(512)},
		{"SANDBOX_CPUS", c.SandboxCPUs, 1.0},
		{"SANDBOX_PIDS_LIMIT", c.SandboxPidsLimit, int64(128)},
		{"POOL_SIZE", c.PoolSize, 4},
		{"POOL_WARMERS", c.PoolWarmers, min(64, runtime.NumCPU())}, // derived: one per core
		{"POOL_REFILL_DELAY_MS", c.RefillDelayMS, 100},
		{"SANDBOX_WARM_HEAP_MB", c.SandboxWarmHeapMB, int64(32)}, // derived: memory/16
		{"QUEUE_TIMEOUT_SECONDS", c.QueueTimeoutSeconds, 10.0},
		{"MAX_QUEUE", c.MaxQueue, 32},
		{"REPL_ENABLED", c.ReplEnabled, true},
		{"REPL_WARMUP_TIMEOUT_SECONDS", c.WarmupTimeoutSecs, 60},
		{"DEFAULT_TIMEOUT_MS", c.DefaultTimeoutMS, int64(30000)},
		{"MIN_TIMEOUT_MS", c.MinTimeoutMS, int64(100)},
		{"INTERRUPT_GRACE_MS", c.InterruptGraceMS, int64(2000)},
		{"AUTO_FIGURES", c.AutoFigures, true},
		{"MAX_TIMEOUT_MS", c.MaxTimeoutMS, int64(300000)},
		{"STATE_ON_ERROR", c.StateOnError, "keep"},
		{"LIVE_SESSIONS", c.LiveSessions, true},
		{"LIVE_SESSION_IDLE_SECONDS", c.LiveSessionIdleSeconds, 600},
		{"LIVE_SESSION_LIFETIME_SECONDS", c.LiveSessionLifetimeSeconds, 3600},
		{"SANDBOX_TMP_MB is derived", c.SandboxTmpMB, int64(64)},
		{"SANDBOX_DATA_MB is derived", c.SandboxDataMB, int64(128)},
		{"MAX_FILE_SIZE_MB is derived", c.MaxFileSizeMB, int64(25)},
		{"STATE_MAX_RAW_MB is derived", c.StateMaxRawMB, int64(64)},
		{"STATE_MAX_SIZE_MB is derived", c.StateMaxSizeMB, int64(64)},
		{"MAX_OUTPUT_KB is derived", c.MaxOutputKB, int64(1024)},
		{"MAX_OUTPUT_FILES", c.MaxOutputFiles, 20},
		{"INSTANCE_ID is the host name", c.InstanceID, host},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestLoadConfigEnv(t *testing.T) {
	t.Run("values are read", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv("POOL_SIZE", "7")
		t.Setenv("SANDBOX_RUNTIME", "runsc")
		t.Setenv("API_KEYS", "a,b")
		t.Setenv("INSTANCE_ID", "kiln-7")
		t.Setenv("REPL_ENABLED", "false")
		c, err := LoadConfig()
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		if c.PoolSize != 7 || c.SandboxRuntime != "runsc" || c.InstanceID != "kiln-7" || c.ReplEnabled {
			t.Errorf("got pool %d runtime %q instance %q repl %v, want 7 runsc kiln-7 false", c.PoolSize, c.SandboxRuntime, c.InstanceID, c.ReplEnabled)
		}
		if !slices.Equal(c.APIKeys, []string{"a", "b"}) {
			t.Errorf("got keys %q, want [a b]", c.APIKeys)
		}
	})
	t.Run("on error", func(t *testing.T) {
		for _, tt := range []struct{ onError, old, want string }{
			{"", "", "keep"},
			{"rollback", "", "rollback"},
			{"", "false", "rollback"}, // the older variable, as it was meant
			{"", "true", "keep"},
			{"keep", "false", "keep"}, // the newer one wins
		} {
			cleanEnv(t)
			t.Setenv("STATE_ON_ERROR", tt.onError)
			t.Setenv("STATE_CAPTURE_ON_ERROR", tt.old)
			c, err := LoadConfig()
			if err != nil || c.StateOnError != tt.want {
				t.Errorf("STATE_ON_ERROR=%q STATE_CAPTURE_ON_ERROR=%q: got %q, %v; want %q", tt.onError, tt.old, c.StateOnError, err, tt.want)
			}
		}
	})
	t.Run("keys file", func(t *testing.T) {
		cleanEnv(t)
		path := filepath.Join(t.TempDir(), "keys")
		if err := os.WriteFile(path, []byte("# ops team\nfile-key-1\n\n  file-key-2  \n#old-key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("API_KEYS", "env-key")
		t.Setenv("API_KEYS_FILE", path)
		c, err := LoadConfig()
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		if want := []string{"env-key", "file-key-1", "file-key-2"}; !slices.Equal(c.APIKeys, want) {
			t.Errorf("got keys %q, want %q", c.APIKeys, want)
		}
	})
	tests := []struct {
		name, key, value, wantInErr string
	}{
		{"missing keys file", "API_KEYS_FILE", "/nonexistent/kiln-keys", "API_KEYS_FILE"},
		{"not a number", "POOL_SIZE", "four", "POOL_SIZE"},
		{"not a boolean", "REPL_ENABLED", "sometimes", "REPL_ENABLED"},
		{"out of range", "POOL_SIZE", "0", "POOL_SIZE must be between 1 and 256, got 0"},
		{"bad level", "LOG_LEVEL", "loud", `LOG_LEVEL must be debug, info, warn or error, got "loud"`},
		{"bad on-error", "STATE_ON_ERROR", "undo", `STATE_ON_ERROR must be keep or rollback, got "undo"`},
		{"bad old on-error", "STATE_CAPTURE_ON_ERROR", "maybe", "STATE_CAPTURE_ON_ERROR must be true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(tt.key, tt.value)
			_, err := LoadConfig()
			if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("got error %v, want one containing %q", err, tt.wantInErr)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	base := defaults(t)
	tests := []struct {
		name string
		edit func(c *Config)
		want string // part of the message; "" for a valid config
	}{
		{"defaults", func(c *Config) {}, ""},
		{"pool size 0", func(c *Config) { c.PoolSize = 0 }, "POOL_SIZE must be between 1 and 256, got 0"},
		{"pool size 257", func(c *Config) { c.PoolSize = 257 }, "POOL_SIZE must be between 1 and 256, got 257"},
		{"pool size 256", func(c *Config) { c.PoolSize = 256 }, ""},
		{"warmers 0", func(c *Config) { c.PoolWarmers = 0 }, "POOL_WARMERS must be between 1 and 64, got 0"},
		{"warm heap off", func(c *Config) { c.SandboxWarmHeapMB = 0 }, ""},
		{"warm heap an eighth", func(c *Config) { c.SandboxWarmHeapMB = 64 }, ""},
		{"warm heap too large", func(c *Config) { c.SandboxWarmHeapMB = 65 }, "SANDBOX_WARM_HEAP_MB (65) must be between 0 and an eighth of SANDBOX_MEMORY_MB (64)"},
		{"refill delay 0", func(c *Config) { c.RefillDelayMS = 0 }, ""},
		{"refill delay negative", func(c *Config) { c.RefillDelayMS = -1 }, "POOL_REFILL_DELAY_MS must be between 0 and 60000, got -1"},
		{"queue timeout 0", func(c *Config) { c.QueueTimeoutSeconds = 0 }, "QUEUE_TIMEOUT_SECONDS must be above 0"},
		{"queue timeout 601", func(c *Config) { c.QueueTimeoutSeconds = 601 }, "QUEUE_TIMEOUT_SECONDS must be above 0 and at most 600, got 601"},
		{"queue timeout 0.5", func(c *Config) { c.QueueTimeoutSeconds = 0.5 }, ""},
		{"negative max queue", func(c *Config) { c.MaxQueue = -1 }, "MAX_QUEUE must not be negative, got -1"},
		{"warm-up timeout 0", func(c *Config) { c.WarmupTimeoutSecs = 0 }, "REPL_WARMUP_TIMEOUT_SECONDS must be at least 1"},
		{"memory 63", func(c *Config) { c.SandboxMemoryMB = 63 }, "SANDBOX_MEMORY_MB must be at least 64, got 63"},
		{"cpus 0", func(c *Config) { c.SandboxCPUs = 0 }, "SANDBOX_CPUS must be above 0"},
		{"cpus 65", func(c *Config) { c.SandboxCPUs = 65 }, "SANDBOX_CPUS must be above 0 and at most 64, got 65"},
		{"pids 15", func(c *Config) { c.SandboxPidsLimit = 15 }, "SANDBOX_PIDS_LIMIT must be at least 16, got 15"},
		{"tmp 0", func(c *Config) { c.SandboxTmpMB = 0 }, "SANDBOX_TMP_MB and SANDBOX_DATA_MB must be at least 1"},
		{"tmpfs fills memory", func(c *Config) { c.SandboxMemoryMB, c.SandboxTmpMB, c.SandboxDataMB = 256, 128, 128 }, "SANDBOX_TMP_MB (128) + SANDBOX_DATA_MB (128) + the output files one run may return (128: MAX_OUTPUT_FILES 20 × MAX_FILE_SIZE_MB 25, at most SANDBOX_DATA_MB) must stay within 3/4 of SANDBOX_MEMORY_MB (192 of 256)"},
		// The old defaults: a run that wrote 8 files of 24 MB and returned them died of OOM.
		{"data tmpfs and its files past memory", func(c *Config) { c.SandboxDataMB = 256 }, "SANDBOX_TMP_MB (64) + SANDBOX_DATA_MB (256) + the output files one run may return (256: MAX_OUTPUT_FILES 20 × MAX_FILE_SIZE_MB 25, at most SANDBOX_DATA_MB) must stay within 3/4 of SANDBOX_MEMORY_MB (384 of 512)"},
		{"few small output files leave room for data", func(c *Config) { c.SandboxDataMB, c.MaxOutputFiles, c.MaxFileSizeMB = 256, 2, 10 }, ""},
		{"file over the data tmpfs", func(c *Config) { c.MaxFileSizeMB, c.MaxOutputFiles = 200, 0 }, "MAX_FILE_SIZE_MB (200) must be at most SANDBOX_DATA_MB (128)"},
		// The old default, which let a 300 MB state bomb reach a sandbox of 512 MB.
		{"raw state of all memory", func(c *Config) { c.StateMaxRawMB = 512 }, "STATE_MAX_RAW_MB (512) must be at most a quarter of SANDBOX_MEMORY_MB (512)"},
		{"raw state of a quarter", func(c *Config) { c.StateMaxRawMB = 128 }, ""},
		{"raw state of a quarter and 1", func(c *Config) { c.StateMaxRawMB = 129 }, "STATE_MAX_RAW_MB (129) must be at most a quarter"},
		{"output past memory", func(c *Config) { c.MaxOutputKB = 4097 }, "MAX_OUTPUT_KB (4097) must be at most 8 KB per MB of SANDBOX_MEMORY_MB (4096)"},
		{"output at its bound", func(c *Config) { c.MaxOutputKB = 4096 }, ""},
		{"min timeout 0", func(c *Config) { c.MinTimeoutMS = 0 }, "MIN_TIMEOUT_MS must be at least 1"},
		{"min over max timeout", func(c *Config) { c.MinTimeoutMS, c.MaxTimeoutMS = 500, 400 }, "MIN_TIMEOUT_MS must be at least 1 and at most MAX_TIMEOUT_MS"},
		{"default under min", func(c *Config) { c.DefaultTimeoutMS = 50 }, "DEFAULT_TIMEOUT_MS must lie between"},
		{"default over max", func(c *Config) { c.DefaultTimeoutMS = c.MaxTimeoutMS + 1 }, "DEFAULT_TIMEOUT_MS must lie between"},
		{"grace 99", func(c *Config) { c.TimeoutGraceMS = 99 }, "TIMEOUT_GRACE_MS must be at least 100, got 99"},
		{"code 0", func(c *Config) { c.MaxCodeKB = 0 }, "MAX_CODE_KB must be at least 1"},
		{"output 0", func(c *Config) { c.MaxOutputKB = 0 }, "MAX_OUTPUT_KB must be at least 1"},
		{"state 0", func(c *Config) { c.StateMaxSizeMB = 0 }, "STATE_MAX_SIZE_MB (0) must be at least 1"},
		{"raw state under state", func(c *Config) { c.StateMaxSizeMB, c.StateMaxRawMB = 64, 32 }, "STATE_MAX_SIZE_MB (64) must be at least 1 and STATE_MAX_RAW_MB (32) at least as large"},
		{"file 0", func(c *Config) { c.MaxFileSizeMB = 0 }, "MAX_FILE_SIZE_MB must be at least 1"},
		{"negative output files", func(c *Config) { c.MaxOutputFiles = -1 }, "MAX_OUTPUT_FILES must not be negative"},
		{"negative shutdown grace", func(c *Config) { c.ShutdownGraceSeconds = -1 }, "SHUTDOWN_GRACE_SECONDS must not be negative"},
		{"empty image", func(c *Config) { c.SandboxImage = "" }, "SANDBOX_IMAGE must not be empty"},
		{"unknown runtime", func(c *Config) { c.SandboxRuntime = "kata" }, `SANDBOX_RUNTIME must be empty, runc or runsc, got "kata"`},
		{"unknown RUNTIME", func(c *Config) { c.Runtime = "firecracker" }, `RUNTIME must be one of docker, kubernetes, got "firecracker"`},
		{"runc", func(c *Config) { c.SandboxRuntime = "runc" }, ""},
		{"runsc", func(c *Config) { c.SandboxRuntime = "runsc" }, ""},
		{"kubernetes", onKube(func(*Config) {}), ""},
		{"kubernetes with SANDBOX_RUNTIME", onKube(func(c *Config) { c.SandboxRuntime = "runsc" }), "SANDBOX_RUNTIME is Docker's"},
		{"kubernetes without its NetworkPolicy", onKube(func(c *Config) { c.KubeNetworkPolicy = "" }), "KUBE_NETWORK_POLICY must name"},
		{"kubernetes, a pull policy", onKube(func(c *Config) { c.KubeImagePullPolicy = "Sometimes" }), "KUBE_IMAGE_PULL_POLICY must be Always"},
		{"kubernetes, a node selector", onKube(func(c *Config) { c.KubeNodeSelector = "zone" }), `KUBE_NODE_SELECTOR: "zone" is not key=value`},
		{"kubernetes, no REPL", onKube(func(c *Config) { c.ReplEnabled = false }), "REPL_ENABLED=false is not supported with RUNTIME=kubernetes"},
		{"KUBE_OWNER_POD on Docker", func(c *Config) { c.KubeOwnerPod = "kiln-0" }, "KUBE_OWNER_POD is Kubernetes'"},
		{"bad log level", func(c *Config) { c.LogLevel = "verbose" }, `LOG_LEVEL must be debug, info, warn or error, got "verbose"`},
		{"log level debug", func(c *Config) { c.LogLevel = "debug" }, ""},
		{"log level WARN", func(c *Config) { c.LogLevel = "WARN" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("got %v, want no error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDerivedLimits checks that the limits left unset follow SANDBOX_MEMORY_MB, that
// a value set (even one the derivation would have changed) wins, that 0 means derived,
// and that every derived configuration is valid.
func TestDerivedLimits(t *testing.T) {
	type limits struct{ tmp, data, file, raw, state, outKB int64 }
	tests := []struct {
		name string
		env  map[string]string
		want limits
	}{
		{"memory 64, the least", map[string]string{"SANDBOX_MEMORY_MB": "64"}, limits{8, 16, 16, 8, 8, 512}},
		{"memory 256", map[string]string{"SANDBOX_MEMORY_MB": "256"}, limits{32, 64, 25, 32, 32, 1024}},
		{"memory 512, the default", nil, limits{64, 128, 25, 64, 64, 1024}},
		{"memory 1536", map[string]string{"SANDBOX_MEMORY_MB": "1536"}, limits{64, 384, 25, 192, 64, 1024}},
		{"set values win", map[string]string{"SANDBOX_MEMORY_MB": "1024", "SANDBOX_TMP_MB": "16", "SANDBOX_DATA_MB": "100",
			"MAX_FILE_SIZE_MB": "50", "STATE_MAX_RAW_MB": "200", "STATE_MAX_SIZE_MB": "100", "MAX_OUTPUT_KB": "2048"},
			limits{16, 100, 50, 200, 100, 2048}},
		{"0 means derived", map[string]string{"SANDBOX_DATA_MB": "0", "STATE_MAX_RAW_MB": "0"}, limits{64, 128, 25, 64, 64, 1024}},
		{"the file cap follows a small data tmpfs", map[string]string{"SANDBOX_DATA_MB": "10"}, limits{64, 10, 10, 64, 64, 1024}},
		{"the state cap follows a small raw cap", map[string]string{"STATE_MAX_RAW_MB": "16"}, limits{64, 128, 25, 16, 16, 1024}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := LoadConfig()
			if err != nil {
				t.Fatalf("got %v, want a valid configuration", err)
			}
			got := limits{c.SandboxTmpMB, c.SandboxDataMB, c.MaxFileSizeMB, c.StateMaxRawMB, c.StateMaxSizeMB, c.MaxOutputKB}
			if got != tt.want {
				t.Errorf("got tmp/data/file/raw/state/output %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDerivedWarmers checks POOL_WARMERS: one warm-up per core that SANDBOX_CPUS
// leaves, at least one; a value set wins.
func TestDerivedLiveMax(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mem    int64
		pools  string
		hostMB int64
		want   int
	}{
		{"24 GiB, 4 warm", 512, "", 24 << 10, (12<<10 - 4*544) / 544}, // 18
		{"two pools count", 512, "python:4,polyglot:2", 24 << 10, (12<<10 - 6*544) / 544},
		{"a small host: at least one", 512, "", 2 << 10, 1},
		{"unknown memory", 512, "", 0, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{SandboxMemoryMB: tt.mem, SandboxWarmHeapMB: 32, PoolSize: 4, Pools: tt.pools, SandboxImage: "i"}
			if got := c.derivedLiveMax(tt.hostMB); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
	cleanEnv(t)
	t.Setenv("LIVE_SESSIONS_MAX", "0")
	c, err := LoadConfig()
	if err != nil || c.LiveSessionsMax < 1 {
		t.Errorf("unset LIVE_SESSIONS_MAX: got %d (%v), want one derived from the host", c.LiveSessionsMax, err)
	}
}

func TestDerivedWarmers(t *testing.T) {
	cores := runtime.NumCPU()
	tests := []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{}, min(64, cores)},
		{map[string]string{"SANDBOX_CPUS": "0.5"}, min(64, 2*cores)},
		{map[string]string{"SANDBOX_CPUS": "64"}, 1},
		{map[string]string{"POOL_WARMERS": "0", "SANDBOX_CPUS": "2"}, max(1, cores/2)},
		{map[string]string{"POOL_WARMERS": "5"}, 5},
	}
	for _, tt := range tests {
		cleanEnv(t)
		for k, v := range tt.env {
			t.Setenv(k, v)
		}
		c, err := LoadConfig()
		if err != nil {
			t.Fatalf("%v: %v", tt.env, err)
		}
		if c.PoolWarmers != tt.want {
			t.Errorf("%v: got %d warmers on %d cores, want %d", tt.env, c.PoolWarmers, cores, tt.want)
		}
	}
}

// TestInconsistentLimitsStopKiln checks, through the environment, that a value set
// against the memory it lives in is refused with a message that names the settings
// and their values.
func TestInconsistentLimitsStopKiln(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"the state bomb's configuration", map[string]string{"STATE_MAX_RAW_MB": "512"},
			"STATE_MAX_RAW_MB (512) must be at most a quarter of SANDBOX_MEMORY_MB (512)"},
		{"memory lowered under a raw cap set", map[string]string{"SANDBOX_MEMORY_MB": "256", "STATE_MAX_RAW_MB": "128"},
			"STATE_MAX_RAW_MB (128) must be at most a quarter of SANDBOX_MEMORY_MB (256)"},
		{"compressed cap over the derived raw cap", map[string]string{"STATE_MAX_SIZE_MB": "100"},
			"STATE_MAX_SIZE_MB (100) must be at least 1 and STATE_MAX_RAW_MB (64) at least as large"},
		{"the old data tmpfs", map[string]string{"SANDBOX_DATA_MB": "256"},
			"SANDBOX_TMP_MB (64) + SANDBOX_DATA_MB (256) + the output files one run may return (256"},
		{"a file the data tmpfs cannot hold", map[string]string{"SANDBOX_DATA_MB": "20", "MAX_FILE_SIZE_MB": "25"},
			"MAX_FILE_SIZE_MB (25) must be at most SANDBOX_DATA_MB (20)"},
		{"output for a bigger sandbox", map[string]string{"SANDBOX_MEMORY_MB": "128", "MAX_OUTPUT_KB": "2048"},
			"MAX_OUTPUT_KB (2048) must be at most 8 KB per MB of SANDBOX_MEMORY_MB (1024)"},
		{"negative is not derived", map[string]string{"SANDBOX_DATA_MB": "-1"}, "SANDBOX_TMP_MB and SANDBOX_DATA_MB must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := LoadConfig()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestConfigValidateAllErrors checks that every problem is reported at once, one per
// line, rather than only the first.
func TestConfigValidateAllErrors(t *testing.T) {
	c := defaults(t)
	c.PoolSize = 0
	c.SandboxImage = ""
	c.LogLevel = "x"
	err := c.Validate()
	if err == nil {
		t.Fatal("got no error, want three")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Errorf("got %d lines %q, want 3", len(lines), lines)
	}
}

func TestPoolSpecs(t *testing.T) {
	base := Config{PoolSize: 3, SandboxImage: "my/python:1"}
	for _, c := range []struct {
		pools, images string
		want          []PoolSpec
		err           string
	}{
		{"", "", []PoolSpec{{"python", 3, "my/python:1"}}, ""},
		{"python:4, polyglot:0", "", []PoolSpec{{"python", 4, "my/python:1"}, {"polyglot", 0, "kiln-polyglot:latest"}}, ""},
		{"polyglot:1,python:2", "polyglot=reg.example:5000/kiln-polyglot:1.2", []PoolSpec{{"polyglot", 1, "reg.example:5000/kiln-polyglot:1.2"}, {"python", 2, "my/python:1"}}, ""},
		{"python", "", nil, "POOLS must be name:size pairs"},
		{"python:4,python:1", "", nil, "POOLS must be name:size pairs"},
		{"Py:1", "", nil, "POOLS must be name:size pairs"},
		{"python:-1", "", nil, "POOLS must be name:size pairs"},
		{"python:1", "ruby=x", nil, "SANDBOX_IMAGES must be pool=image pairs"},
	} {
		cfg := base
		cfg.Pools, cfg.SandboxImages = c.pools, c.images
		got, err := cfg.PoolSpecs()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("POOLS=%q SANDBOX_IMAGES=%q: err = %v, want %q", c.pools, c.images, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("POOLS=%q SANDBOX_IMAGES=%q = %v, %v; want %v", c.pools, c.images, got, err, c.want)
		}
	}
}

// A DATA_DIR kiln cannot write stops it at start, with Redis too: uploads spool there.
func TestSpoolDirectory(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := makeSpool(data); err != nil {
		t.Fatalf("a new DATA_DIR: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(data, "spool")); err != nil || !fi.IsDir() {
		t.Errorf("the spool directory: %v, want it made", err)
	}
	if err := makeSpool(data); err != nil {
		t.Errorf("again: %v, want no error", err)
	}
	blocked := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := makeSpool(blocked); err == nil || !strings.Contains(err.Error(), "DATA_DIR "+blocked) {
		t.Errorf("a DATA_DIR that is a file: %v, want an error naming it", err)
	}
	if err := makeSpool(""); err != nil {
		t.Errorf("no DATA_DIR (the system's temporary directory): %v", err)
	}
}

// onKube is a Validate case's edit on a valid Kubernetes configuration.
func onKube(edit func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Runtime, c.ReplEnabled, c.KubeImagePullPolicy, c.KubeNetworkPolicy = RuntimeKubernetes, true, "IfNotPresent", "kiln-sandboxes"
		c.KubeCPURequest = min(0.25, c.SandboxCPUs)
		edit(c)
	}
}
