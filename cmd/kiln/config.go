package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/kelseyhightower/envconfig"

	"github.com/kilnsh/kiln/api"
)

// Config is kiln's whole configuration, read once from the environment. Variable names
// have no prefix; docs/operations.md lists them all.
type Config struct {
	Addr        string   `envconfig:"LISTEN_ADDR" default:":8080"`
	APIKeys     []string `envconfig:"API_KEYS"`
	APIKeysFile string   `envconfig:"API_KEYS_FILE"`
	// AdminKeys are the operators' keys: with any, only they (and tokens with the ADMIN
	// role) read /metrics, /stats and /health/detailed. They do not run code unless they
	// are in API_KEYS too.
	AdminKeys []string `envconfig:"ADMIN_KEYS"`
	// MetricsAddr, when set, serves /metrics, /stats, /health/detailed and the dashboard
	// there instead of on LISTEN_ADDR.
	MetricsAddr string `envconfig:"METRICS_LISTEN_ADDR"`
	// Signed user identities (LibreChat's per-user tokens): see jwt.go. LibreChat's code
	// API server's names (CODEAPI_JWT_*) are read too.
	JWTPublicKey     string `envconfig:"JWT_PUBLIC_KEY"`
	JWTKid           string `envconfig:"JWT_KID" default:"lc-codeapi-2026-05"`
	JWTJWKS          string `envconfig:"JWT_JWKS"`
	JWTPublicKeysDir string `envconfig:"JWT_PUBLIC_KEYS_DIR"`
	JWTIssuer        string `envconfig:"JWT_ISSUER" default:"librechat"`
	JWTAudience      string `envconfig:"JWT_AUDIENCE" default:"codeapi"`
	JWTAlgorithms    string `envconfig:"JWT_ALGORITHMS" default:"EdDSA,RS256"`
	JWTHS256Secret   string `envconfig:"JWT_HS256_SECRET"`
	JWTHS256Kid      string `envconfig:"JWT_HS256_KID" default:"hs256"`
	JWTDefaultTenant string `envconfig:"JWT_DEFAULT_TENANT" default:"legacy"`
	// ExecutionProfiles are LibreChat's execution profiles kiln answers to (see
	// api.ParseProfiles); CODEAPI_EXECUTION_PROFILE is read too.
	ExecutionProfiles string `envconfig:"EXECUTION_PROFILES" default:"default,stateful"`
	InstanceID        string `envconfig:"INSTANCE_ID"`
	LogLevel          string `envconfig:"LOG_LEVEL" default:"info"`

	// Runtime is where sandboxes run: "docker" (the local daemon) or "kubernetes" (Pods
	// in KUBE_NAMESPACE, through the API server of $KUBECONFIG or of the Pod kiln runs in).
	Runtime             string `envconfig:"RUNTIME" default:"docker"`
	KubeNamespace       string `envconfig:"KUBE_NAMESPACE"`
	KubeImagePullPolicy string `envconfig:"KUBE_IMAGE_PULL_POLICY" default:"IfNotPresent"`
	KubeRuntimeClass    string `envconfig:"KUBE_RUNTIME_CLASS"`
	KubeNetworkPolicy   string `envconfig:"KUBE_NETWORK_POLICY" default:"kiln-sandboxes-deny-all"`
	// KubeRequireRestricted refuses to start in a namespace that would admit a Pod the
	// restricted Pod Security Standard refuses.
	KubeRequireRestricted bool `envconfig:"KUBE_REQUIRE_RESTRICTED" default:"true"`
	// KubeNodeSelector places the sandbox Pods: "pool=sandboxes,zone=a".
	KubeNodeSelector string `envconfig:"KUBE_NODE_SELECTOR"`
	KubeEphemeralMB  int64  `envconfig:"KUBE_SANDBOX_EPHEMERAL_MB" default:"64"`
	// KubeCPURequest is the CPU a sandbox Pod requests, in cores (its limit is SANDBOX_CPUS).
	KubeCPURequest float64 `envconfig:"KUBE_SANDBOX_CPU_REQUEST" default:"0.1"`
	// KubeOwnerPod names the Pod kiln runs in (the downward API's metadata.name), which
	// then owns every sandbox Pod: they go with it.
	KubeOwnerPod string `envconfig:"KUBE_OWNER_POD"`

	SandboxImage    string  `envconfig:"SANDBOX_IMAGE" default:"kiln-python:latest"`
	SandboxRuntime  string  `envconfig:"SANDBOX_RUNTIME"`
	SandboxMemoryMB int64   `envconfig:"SANDBOX_MEMORY_MB" default:"512"`
	SandboxCPUs     float64 `envconfig:"SANDBOX_CPUS" default:"1"`
	// MaxSandboxCPUs and MaxSandboxMemoryMB bound what one request may ask for (cpus,
	// memory_mb); unset, they are SANDBOX_CPUS and SANDBOX_MEMORY_MB: no more than those.
	MaxSandboxCPUs     float64 `envconfig:"MAX_SANDBOX_CPUS"`
	MaxSandboxMemoryMB int64   `envconfig:"MAX_SANDBOX_MEMORY_MB"`
	SandboxPidsLimit   int64   `envconfig:"SANDBOX_PIDS_LIMIT" default:"128"`
	// The limits without a default tag follow SANDBOX_MEMORY_MB when unset or 0:
	// derive fills them in, Validate checks them against it.
	SandboxTmpMB  int64 `envconfig:"SANDBOX_TMP_MB"`
	SandboxDataMB int64 `envconfig:"SANDBOX_DATA_MB"`
	// SandboxWarmHeapMB is the memory each REPL touches while it warms up, for the
	// request's big buffers (images/python/kiln_repl/heap.py). Unset (-1) follows
	// SANDBOX_MEMORY_MB; 0 turns it off.
	SandboxWarmHeapMB int64 `envconfig:"SANDBOX_WARM_HEAP_MB" default:"-1"`

	PoolSize int `envconfig:"POOL_SIZE" default:"4"`
	// Pools names the pools, one per sandbox image, with their sizes:
	// "python:4,polyglot:1". Empty means one pool, python, of POOL_SIZE.
	Pools string `envconfig:"POOLS"`
	// SandboxImages overrides pools' images: "polyglot=registry/kiln-polyglot:1.2".
	// By default the python pool runs SANDBOX_IMAGE and pool X runs kiln-X:latest.
	SandboxImages       string  `envconfig:"SANDBOX_IMAGES"`
	PoolWarmers         int     `envconfig:"POOL_WARMERS" default:"0"`
	RefillDelayMS       int     `envconfig:"POOL_REFILL_DELAY_MS" default:"100"`
	QueueTimeoutSeconds float64 `envconfig:"QUEUE_TIMEOUT_SECONDS" default:"10"`
	MaxQueue            int     `envconfig:"MAX_QUEUE" default:"32"`
	ReplEnabled         bool    `envconfig:"REPL_ENABLED" default:"true"`
	WarmupTimeoutSecs   int     `envconfig:"REPL_WARMUP_TIMEOUT_SECONDS" default:"60"`
	// PreloadModules chooses the REPL's pre-imports: a comma-separated list of groups
	// (preloadGroups), "all" (the default) or "none".
	PreloadModules string `envconfig:"PRELOAD_MODULES"`

	DefaultTimeoutMS int64 `envconfig:"DEFAULT_TIMEOUT_MS" default:"30000"`
	MinTimeoutMS     int64 `envconfig:"MIN_TIMEOUT_MS" default:"100"`
	MaxTimeoutMS     int64 `envconfig:"MAX_TIMEOUT_MS" default:"300000"`
	TimeoutGraceMS   int64 `envconfig:"TIMEOUT_GRACE_MS" default:"2000"`
	InterruptGraceMS int64 `envconfig:"INTERRUPT_GRACE_MS" default:"2000"`
	AutoFigures      bool  `envconfig:"AUTO_FIGURES" default:"true"`
	// Programmatic tool calling (POST /exec/programmatic).
	MaxTools              int   `envconfig:"MAX_TOOLS" default:"64"`
	MaxToolCallBytes      int64 `envconfig:"MAX_TOOL_CALL_BYTES" default:"262144"`
	MaxToolResultBytes    int64 `envconfig:"MAX_TOOL_RESULT_BYTES" default:"1048576"`
	MaxToolRounds         int   `envconfig:"MAX_TOOL_ROUNDS" default:"50"`
	ToolResultTimeoutSecs int   `envconfig:"TOOL_RESULT_TIMEOUT_SECONDS" default:"120"`
	MaxCodeKB             int   `envconfig:"MAX_CODE_KB" default:"512"`
	MaxOutputKB           int64 `envconfig:"MAX_OUTPUT_KB"`
	StateMaxSizeMB        int64 `envconfig:"STATE_MAX_SIZE_MB"`
	StateMaxRawMB         int64 `envconfig:"STATE_MAX_RAW_MB"`
	MaxFileSizeMB         int64 `envconfig:"MAX_FILE_SIZE_MB"`
	MaxOutputFiles        int   `envconfig:"MAX_OUTPUT_FILES" default:"20"`
	// StateOnError is what a failed run leaves of a session's state when the request does
	// not choose: "keep" (what it bound before the error) or "rollback". The older
	// STATE_CAPTURE_ON_ERROR (true: keep, false: rollback) is read when it is not set.
	StateOnError        string `envconfig:"STATE_ON_ERROR"`
	StateCaptureOnError string `envconfig:"STATE_CAPTURE_ON_ERROR"`

	// Live sessions: a session's sandbox stays bound to it between its calls.
	LiveSessions bool `envconfig:"LIVE_SESSIONS" default:"true"`
	// LiveSessionsMax caps the live sandboxes; 0 derives it from the host's memory.
	LiveSessionsMax int `envconfig:"LIVE_SESSIONS_MAX"`
	// QuotaLiveSessions bounds one caller's live sandboxes (a user under signed tokens,
	// else a key); 0 leaves only the fair share of LIVE_SESSIONS_MAX.
	QuotaLiveSessions int `envconfig:"QUOTA_LIVE_SESSIONS"`
	// QuotaStorageMB bounds what one caller's sessions hold in the store, files and
	// states; 0 is no bound.
	QuotaStorageMB             int64 `envconfig:"QUOTA_STORAGE_MB"`
	LiveSessionIdleSeconds     int   `envconfig:"LIVE_SESSION_IDLE_SECONDS" default:"600"`
	LiveSessionLifetimeSeconds int   `envconfig:"LIVE_SESSION_LIFETIME_SECONDS" default:"3600"`
	// StateSaveDelayMS lets a call in its session's live sandbox answer before its state is
	// stored: the state is stored once the session has had no call for this long (or before
	// the sandbox ends); 0 stores every call's state before its answer.
	StateSaveDelayMS int `envconfig:"STATE_SAVE_DELAY_MS" default:"1000"`

	DataDir  string `envconfig:"DATA_DIR" default:"./data"`
	RedisURL string `envconfig:"REDIS_URL"`
	// S3Endpoint, with S3_BUCKET, keeps file contents and state blobs in an
	// S3-compatible bucket; Redis keeps their metadata.
	S3Endpoint         string  `envconfig:"S3_ENDPOINT"`
	S3Bucket           string  `envconfig:"S3_BUCKET"`
	S3PathStyle        bool    `envconfig:"S3_PATH_STYLE" default:"false"`
	AWSRegion          string  `envconfig:"AWS_REGION"`
	AWSKeyID           string  `envconfig:"AWS_ACCESS_KEY_ID"`
	AWSSecret          string  `envconfig:"AWS_SECRET_ACCESS_KEY"`
	SessionTTLHours    float64 `envconfig:"SESSION_TTL_HOURS" default:"24"`
	MaxFilesPerSession int     `envconfig:"MAX_FILES_PER_SESSION" default:"50"`
	MaxUploadMB        int64   `envconfig:"MAX_UPLOAD_MB" default:"100"`

	// AdvertiseURL is where the other replicas reach this one (http://host:port); with
	// PEER_SECRET and REDIS_URL it makes replicas forward to each other what one holds.
	AdvertiseURL string `envconfig:"ADVERTISE_URL"`
	PeerSecret   string `envconfig:"PEER_SECRET"`

	ShutdownGraceSeconds int `envconfig:"SHUTDOWN_GRACE_SECONDS" default:"30"`

	RateLimitPerMinute  int `envconfig:"RATE_LIMIT_PER_MINUTE" default:"0"`
	MaxConcurrentPerKey int `envconfig:"MAX_CONCURRENT_PER_KEY" default:"0"`
	// MCPIdleMinutes closes an MCP session (/mcp) that has seen no request for so long.
	MCPIdleMinutes int `envconfig:"MCP_IDLE_MINUTES" default:"30"`
	// The Jupyter layer's bounds (/jupyter): kernels one caller holds, WebSockets open on
	// one kernel, and the cells one connection may have queued, in MB.
	JupyterMaxKernels     int   `envconfig:"JUPYTER_MAX_KERNELS" default:"16"`
	JupyterMaxConnections int   `envconfig:"JUPYTER_MAX_CONNECTIONS" default:"8"`
	JupyterMaxQueuedMB    int64 `envconfig:"JUPYTER_MAX_QUEUED_MB" default:"16"`
	// E2B's SDKs (/sandboxes, docs/e2b.md): the templates by the language of the pool that
	// serves each, the longest life a sandbox may be given, and how many one caller holds.
	E2BTemplates             string `envconfig:"E2B_TEMPLATES" default:"base=python,code-interpreter-v1=python"`
	E2BMaxTimeoutSeconds     int    `envconfig:"E2B_MAX_TIMEOUT_SECONDS" default:"3600"`
	E2BMaxSandboxesPerCaller int    `envconfig:"E2B_MAX_SANDBOXES_PER_CALLER" default:"8"`

	EgressConfig
	egress *egressSetup // parsed from EgressConfig by LoadConfig
}

// LoadConfig reads the environment and checks every value, naming the variable at
// fault in a sentence a user understands.
func LoadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	c.readAliases()
	if c.APIKeysFile != "" {
		b, err := os.ReadFile(c.APIKeysFile)
		if err != nil {
			return c, fmt.Errorf("API_KEYS_FILE: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				c.APIKeys = append(c.APIKeys, line)
			}
		}
	}
	if c.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "kiln"
		}
		c.InstanceID = host
	}
	var err error
	if c.egress, err = c.parseEgress(); err != nil {
		return c, err
	}
	c.derive()
	if c.LiveSessionsMax == 0 {
		// A runtime whose sandboxes live elsewhere (a cluster's nodes) says how many.
		c.LiveSessionsMax = cmp.Or(runtimes[c.Runtime].liveMax, c.derivedLiveMax(hostMemoryMB()))
	}
	return c, c.Validate()
}

// derive fills in the limits left unset (or 0) from SANDBOX_MEMORY_MB, so that each
// fits inside the one it lives in, and POOL_WARMERS from the cores. The fractions were measured in the python image
// (docs/operations.md, "Limits that follow the memory"):
//   - /tmp and /mnt/data are tmpfs, charged to the sandbox's memory: an eighth (at
//     most 64 MB) and a quarter.
//   - a file in or out passes through /mnt/data: at most SANDBOX_DATA_MB, 25 MB.
//   - a state whose pickle is R bytes takes about 4R beside the REPL (100 to 200 MB)
//     when a run restores it and captures it again: the pickle, the objects built from
//     it, the pickle kept to tell an unchanged state, the new pickle. An eighth of the
//     memory does that in 256 and 512 MB; a quarter is captured once, and then every
//     later run of the session dies of OOM.
//   - the state compressed: 64 MB, at most the raw cap.
//   - output: 1024 KB, at most 8 KB per MB of memory (see Validate).
func (c *Config) derive() {
	mem := c.SandboxMemoryMB
	orDerived := func(v *int64, d int64) {
		if *v == 0 {
			*v = max(1, d) // never 0: a memory too small is its own check's error
		}
	}
	orDerived(&c.SandboxTmpMB, min(64, mem/8))
	orDerived(&c.SandboxDataMB, mem/4)
	orDerived(&c.MaxFileSizeMB, min(25, c.SandboxDataMB))
	orDerived(&c.StateMaxRawMB, mem/8)
	orDerived(&c.StateMaxSizeMB, min(64, c.StateMaxRawMB))
	orDerived(&c.MaxOutputKB, min(1024, mem*8))
	if c.StateOnError == "" {
		c.StateOnError = "keep"
		if v, err := strconv.ParseBool(c.StateCaptureOnError); err == nil && !v {
			c.StateOnError = "rollback"
		}
	}
	if c.SandboxWarmHeapMB < 0 {
		c.SandboxWarmHeapMB = min(64, mem/16)
	}
	// A warm-up is CPU-bound (the pre-imports) and may use SANDBOX_CPUS: as many at once
	// as the cores carry refill fastest; more only share the same cores.
	if c.PoolWarmers == 0 {
		c.PoolWarmers = min(64, max(1, int(float64(runtime.NumCPU())/max(c.SandboxCPUs, 0.01))))
	}
}

// derivedLiveMax is LIVE_SESSIONS_MAX when unset: half the host's memory, less what the
// pools' warm sandboxes may take, in sandboxes of SANDBOX_MEMORY_MB plus the warm heap
// (what a live sandbox may grow to), and at least 1. hostMB is 0 when unknown: then 8.
func (c Config) derivedLiveMax(hostMB int64) int {
	if hostMB <= 0 {
		return 8
	}
	per := c.SandboxMemoryMB + max(c.SandboxWarmHeapMB, 0)
	warm := 0
	if specs, err := c.PoolSpecs(); err == nil {
		for _, s := range specs {
			warm += s.Size
		}
	}
	return int(max(1, min(1024, (hostMB/2-int64(warm)*per)/per)))
}

// hostMemoryMB reads the host's memory from /proc/meminfo; 0 when it cannot.
func hostMemoryMB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb >> 10
			}
		}
	}
	return 0
}

// returnableFilesMB is the most one run's output files can hold: MAX_OUTPUT_FILES
// files of MAX_FILE_SIZE_MB, all of them in /mnt/data at once.
func (c Config) returnableFilesMB() int64 {
	if c.MaxFileSizeMB > 0 && int64(c.MaxOutputFiles) <= c.SandboxDataMB/c.MaxFileSizeMB {
		return int64(c.MaxOutputFiles) * c.MaxFileSizeMB
	}
	return c.SandboxDataMB
}

// Validate checks the ranges of every value.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.PoolSize >= 1 && c.PoolSize <= 256, "POOL_SIZE must be between 1 and 256, got %d", c.PoolSize)
	check(c.PoolWarmers >= 1 && c.PoolWarmers <= 64, "POOL_WARMERS must be between 1 and 64, got %d", c.PoolWarmers)
	check(c.RefillDelayMS >= 0 && c.RefillDelayMS <= 60000, "POOL_REFILL_DELAY_MS must be between 0 and 60000, got %d", c.RefillDelayMS)
	check(c.QueueTimeoutSeconds > 0 && c.QueueTimeoutSeconds <= 600, "QUEUE_TIMEOUT_SECONDS must be above 0 and at most 600, got %g", c.QueueTimeoutSeconds)
	check(c.MaxQueue >= 0, "MAX_QUEUE must not be negative, got %d", c.MaxQueue)
	check(c.MetricsAddr == "" || c.MetricsAddr != c.Addr, "METRICS_LISTEN_ADDR must differ from LISTEN_ADDR (%s)", c.Addr)
	check(c.WarmupTimeoutSecs >= 1, "REPL_WARMUP_TIMEOUT_SECONDS must be at least 1, got %d", c.WarmupTimeoutSecs)
	if _, err := parsePreload(c.PreloadModules); err != nil {
		errs = append(errs, err)
	}
	if _, err := api.ParseProfiles(c.ExecutionProfiles); err != nil {
		errs = append(errs, fmt.Errorf("EXECUTION_PROFILES: %w", err))
	}
	check(c.SandboxMemoryMB >= 64, "SANDBOX_MEMORY_MB must be at least 64, got %d", c.SandboxMemoryMB)
	check(c.MaxSandboxMemoryMB == 0 || c.MaxSandboxMemoryMB >= c.SandboxMemoryMB, "MAX_SANDBOX_MEMORY_MB must be at least SANDBOX_MEMORY_MB (%d), got %d", c.SandboxMemoryMB, c.MaxSandboxMemoryMB)
	check(c.MaxSandboxCPUs == 0 || c.MaxSandboxCPUs >= c.SandboxCPUs, "MAX_SANDBOX_CPUS must be at least SANDBOX_CPUS (%g), got %g", c.SandboxCPUs, c.MaxSandboxCPUs)
	check(c.SandboxCPUs > 0 && c.SandboxCPUs <= 64, "SANDBOX_CPUS must be above 0 and at most 64, got %g", c.SandboxCPUs)
	check(c.SandboxPidsLimit >= 16, "SANDBOX_PIDS_LIMIT must be at least 16, got %d", c.SandboxPidsLimit)
	check(c.SandboxTmpMB >= 1 && c.SandboxDataMB >= 1, "SANDBOX_TMP_MB and SANDBOX_DATA_MB must be at least 1")
	c.checkMemory(check)
	check(c.MinTimeoutMS >= 1 && c.MinTimeoutMS <= c.MaxTimeoutMS, "MIN_TIMEOUT_MS must be at least 1 and at most MAX_TIMEOUT_MS")
	check(c.DefaultTimeoutMS >= c.MinTimeoutMS && c.DefaultTimeoutMS <= c.MaxTimeoutMS, "DEFAULT_TIMEOUT_MS must lie between MIN_TIMEOUT_MS and MAX_TIMEOUT_MS")
	check(c.TimeoutGraceMS >= 100, "TIMEOUT_GRACE_MS must be at least 100, got %d", c.TimeoutGraceMS)
	check(c.InterruptGraceMS >= 100, "INTERRUPT_GRACE_MS must be at least 100, got %d", c.InterruptGraceMS)
	check(c.MaxTools >= 1, "MAX_TOOLS must be at least 1")
	check(c.MaxToolCallBytes >= 1024 && c.MaxToolResultBytes >= 1024, "MAX_TOOL_CALL_BYTES and MAX_TOOL_RESULT_BYTES must be at least 1024")
	check(c.MaxToolRounds >= 1, "MAX_TOOL_ROUNDS must be at least 1")
	check(c.ToolResultTimeoutSecs >= 1, "TOOL_RESULT_TIMEOUT_SECONDS must be at least 1")
	check(c.MaxCodeKB >= 1, "MAX_CODE_KB must be at least 1")
	check(c.MaxOutputKB >= 1, "MAX_OUTPUT_KB must be at least 1")
	check(c.StateMaxSizeMB >= 1 && c.StateMaxRawMB >= c.StateMaxSizeMB, "STATE_MAX_SIZE_MB (%d) must be at least 1 and STATE_MAX_RAW_MB (%d) at least as large", c.StateMaxSizeMB, c.StateMaxRawMB)
	check(c.MaxFileSizeMB >= 1, "MAX_FILE_SIZE_MB must be at least 1")
	check(c.MaxOutputFiles >= 0, "MAX_OUTPUT_FILES must not be negative")
	if _, err := c.tokens(); err != nil {
		errs = append(errs, err)
	}
	check(c.LiveSessionsMax >= 1, "LIVE_SESSIONS_MAX must be at least 1, got %d", c.LiveSessionsMax)
	check(c.QuotaLiveSessions >= 0, "QUOTA_LIVE_SESSIONS must not be negative, got %d", c.QuotaLiveSessions)
	check(c.QuotaStorageMB >= 0, "QUOTA_STORAGE_MB must not be negative, got %d", c.QuotaStorageMB)
	check(c.LiveSessionIdleSeconds >= 1 && c.LiveSessionLifetimeSeconds >= 1,
		"LIVE_SESSION_IDLE_SECONDS and LIVE_SESSION_LIFETIME_SECONDS must be at least 1")
	check(c.StateSaveDelayMS >= 0 && c.StateSaveDelayMS <= 600_000, "STATE_SAVE_DELAY_MS must be 0 to 600000, got %d", c.StateSaveDelayMS)
	check(c.StateOnError == "keep" || c.StateOnError == "rollback", "STATE_ON_ERROR must be keep or rollback, got %q", c.StateOnError)
	if c.StateCaptureOnError != "" {
		_, err := strconv.ParseBool(c.StateCaptureOnError)
		check(err == nil, "STATE_CAPTURE_ON_ERROR must be true or false, got %q (it is replaced by STATE_ON_ERROR)", c.StateCaptureOnError)
	}
	check(c.SessionTTLHours > 0, "SESSION_TTL_HOURS must be above 0, got %g", c.SessionTTLHours)
	check(c.MaxFilesPerSession >= 1, "MAX_FILES_PER_SESSION must be at least 1, got %d", c.MaxFilesPerSession)
	check(c.MaxUploadMB >= c.MaxFileSizeMB, "MAX_UPLOAD_MB (%d) must be at least MAX_FILE_SIZE_MB (%d)", c.MaxUploadMB, c.MaxFileSizeMB)
	check(c.RedisURL != "" || c.DataDir != "", "DATA_DIR must not be empty when REDIS_URL is not set")
	check(c.ShutdownGraceSeconds >= 0, "SHUTDOWN_GRACE_SECONDS must not be negative")
	if c.S3Endpoint != "" || c.S3Bucket != "" {
		check(c.S3Endpoint != "" && c.S3Bucket != "", "S3_ENDPOINT and S3_BUCKET go together")
		check(c.RedisURL != "", "S3_ENDPOINT needs REDIS_URL: Redis keeps the metadata of what the bucket holds")
		check((c.AWSKeyID == "") == (c.AWSSecret == ""), "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together")
	}
	if c.AdvertiseURL != "" || c.PeerSecret != "" {
		u, err := url.Parse(c.AdvertiseURL)
		check(err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && (u.Path == "" || u.Path == "/"),
			"ADVERTISE_URL must be the http(s)://host:port other replicas reach this one at, got %q", c.AdvertiseURL)
		check(len(c.PeerSecret) >= 32, "PEER_SECRET must be at least 32 characters, shared by every replica, when ADVERTISE_URL is set")
		check(c.RedisURL != "", "ADVERTISE_URL needs REDIS_URL: replicas find each other in the Redis they share")
	}
	check(c.RateLimitPerMinute >= 0, "RATE_LIMIT_PER_MINUTE must not be negative (0 turns it off), got %d", c.RateLimitPerMinute)
	check(c.MCPIdleMinutes >= 1, "MCP_IDLE_MINUTES must be at least 1, got %d", c.MCPIdleMinutes)
	check(c.JupyterMaxKernels >= 1, "JUPYTER_MAX_KERNELS must be at least 1, got %d", c.JupyterMaxKernels)
	check(c.JupyterMaxConnections >= 1, "JUPYTER_MAX_CONNECTIONS must be at least 1, got %d", c.JupyterMaxConnections)
	_, e2bErr := c.e2bTemplates()
	check(e2bErr == nil, "E2B_TEMPLATES: %v", e2bErr)
	check(c.E2BMaxTimeoutSeconds >= 1, "E2B_MAX_TIMEOUT_SECONDS must be at least 1, got %d", c.E2BMaxTimeoutSeconds)
	check(c.E2BMaxSandboxesPerCaller >= 1, "E2B_MAX_SANDBOXES_PER_CALLER must be at least 1, got %d", c.E2BMaxSandboxesPerCaller)
	check(c.JupyterMaxQueuedMB >= 1, "JUPYTER_MAX_QUEUED_MB must be at least 1, got %d", c.JupyterMaxQueuedMB)
	check(c.MaxConcurrentPerKey >= 0, "MAX_CONCURRENT_PER_KEY must not be negative (0 turns it off), got %d", c.MaxConcurrentPerKey)
	check(c.SandboxImage != "", "SANDBOX_IMAGE must not be empty")
	if _, err := c.PoolSpecs(); err != nil {
		errs = append(errs, err)
	}
	_, known := runtimes[c.Runtime]
	check(known, "RUNTIME must be one of %s, got %q", strings.Join(slices.Sorted(maps.Keys(runtimes)), ", "), c.Runtime)
	if rt, ok := runtimes[c.Runtime]; ok {
		rt.validate(c, check)
	}
	var lvl slog.Level
	check(lvl.UnmarshalText([]byte(c.LogLevel)) == nil, "LOG_LEVEL must be debug, info, warn or error, got %q", c.LogLevel)
	return errors.Join(errs...)
}

// checkMemory checks the limits that live inside a sandbox's memory against it, each
// message naming the settings and their values.
func (c Config) checkMemory(check func(ok bool, format string, args ...any)) {
	mem := c.SandboxMemoryMB
	files := c.returnableFilesMB()
	check(c.SandboxTmpMB+c.SandboxDataMB+files <= mem*3/4,
		"SANDBOX_TMP_MB (%d) + SANDBOX_DATA_MB (%d) + the output files one run may return (%d: MAX_OUTPUT_FILES %d × MAX_FILE_SIZE_MB %d, at most SANDBOX_DATA_MB) must stay within 3/4 of SANDBOX_MEMORY_MB (%d of %d): "+
			"both tmpfs count as memory, the REPL holds the files it returns in memory while they are still on /mnt/data, and it needs the last quarter itself",
		c.SandboxTmpMB, c.SandboxDataMB, files, c.MaxOutputFiles, c.MaxFileSizeMB, mem*3/4, mem)
	check(c.MaxFileSizeMB <= c.SandboxDataMB,
		"MAX_FILE_SIZE_MB (%d) must be at most SANDBOX_DATA_MB (%d): every file in or out passes through the sandbox's /mnt/data",
		c.MaxFileSizeMB, c.SandboxDataMB)
	check(c.StateMaxRawMB*4 <= mem,
		"STATE_MAX_RAW_MB (%d) must be at most a quarter of SANDBOX_MEMORY_MB (%d): restoring a state holds its pickle and the objects built from it beside the REPL (unset, it is an eighth: the largest that a run can restore and capture again)",
		c.StateMaxRawMB, mem)
	check(c.SandboxWarmHeapMB >= 0 && c.SandboxWarmHeapMB <= mem/8,
		"SANDBOX_WARM_HEAP_MB (%d) must be between 0 and an eighth of SANDBOX_MEMORY_MB (%d): it stays resident in every sandbox, warm or in use",
		c.SandboxWarmHeapMB, mem/8)
	check(c.MaxOutputKB <= mem*8,
		"MAX_OUTPUT_KB (%d) must be at most 8 KB per MB of SANDBOX_MEMORY_MB (%d): the REPL holds stdout, stderr and the result, each up to this cap and up to 6 times that JSON-escaped",
		c.MaxOutputKB, mem*8)
}

// PoolSpec is one pool: its name, how many sandboxes it keeps warm, its image.
type PoolSpec struct {
	Name  string
	Size  int
	Image string
}

var poolName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// PoolSpecs reads POOLS and SANDBOX_IMAGES.
func (c Config) PoolSpecs() ([]PoolSpec, error) {
	if strings.TrimSpace(c.Pools) == "" {
		return []PoolSpec{{Name: "python", Size: c.PoolSize, Image: c.SandboxImage}}, nil
	}
	var specs []PoolSpec
	seen := map[string]bool{}
	for _, item := range strings.Split(c.Pools, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(item), ":")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 0 || n > 256 || !poolName.MatchString(name) || seen[name] {
			return nil, fmt.Errorf("POOLS must be name:size pairs, such as python:4,polyglot:1 (names of a-z, 0-9 and -, each once; sizes 0 to 256), got %q", c.Pools)
		}
		seen[name] = true
		image := "kiln-" + name + ":latest"
		if name == "python" {
			image = c.SandboxImage
		}
		specs = append(specs, PoolSpec{Name: name, Size: n, Image: image})
	}
	if strings.TrimSpace(c.SandboxImages) != "" {
		for _, item := range strings.Split(c.SandboxImages, ",") {
			name, image, ok := strings.Cut(strings.TrimSpace(item), "=")
			i := slices.IndexFunc(specs, func(s PoolSpec) bool { return s.Name == name })
			if !ok || image == "" || i < 0 {
				return nil, fmt.Errorf("SANDBOX_IMAGES must be pool=image pairs for pools of POOLS, got %q", c.SandboxImages)
			}
			specs[i].Image = image
		}
	}
	return specs, nil
}

// e2bTemplates parses E2B_TEMPLATES: "template=language,...".
func (c *Config) e2bTemplates() (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(c.E2BTemplates, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, lang, ok := strings.Cut(item, "=")
		name, lang = strings.TrimSpace(name), strings.ToLower(strings.TrimSpace(lang))
		if !ok || name == "" || lang == "" {
			return nil, fmt.Errorf("%q is not template=language", item)
		}
		out[name] = lang
	}
	return out, nil
}
