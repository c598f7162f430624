package abuse

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// inspected is the part of `docker inspect` that security.md's "Every sandbox
// container" list is about, decoded from the CLI's JSON (independent of kiln's code).
type inspected struct {
	ID     string
	Mounts []json.RawMessage
	Config struct {
		Image           string
		User            string
		Tty             bool
		OpenStdin       bool
		StdinOnce       bool
		AttachStdin     bool
		AttachStdout    bool
		AttachStderr    bool
		NetworkDisabled bool
		Env             []string
		Hostname        string
		Labels          map[string]string
		ExposedPorts    map[string]json.RawMessage
	}
	HostConfig struct {
		NetworkMode    string
		ReadonlyRootfs bool
		Tmpfs          map[string]string
		CapDrop        []string
		CapAdd         []string
		SecurityOpt    []string
		Privileged     bool
		IpcMode        string
		PidMode        string
		UTSMode        string
		UsernsMode     string
		Init           *bool
		AutoRemove     bool
		RestartPolicy  struct {
			Name              string
			MaximumRetryCount int
		}
		LogConfig struct {
			Type string
		}
		Runtime           string
		Binds             []string
		Mounts            []json.RawMessage
		Devices           []json.RawMessage
		DeviceRequests    []json.RawMessage
		DeviceCgroupRules []string
		PortBindings      map[string]json.RawMessage
		PublishAllPorts   bool
		VolumesFrom       []string
		Sysctls           map[string]string
		MaskedPaths       []string
		ReadonlyPaths     []string
		Memory            int64
		MemorySwap        int64
		NanoCpus          int64
		PidsLimit         *int64
		Ulimits           []struct {
			Name       string
			Soft, Hard int64
		}
		OomKillDisable *bool
	}
}

func inspect(t *testing.T, id string) inspected {
	t.Helper()
	out, err := kilntest.Docker("inspect", id)
	if err != nil {
		t.Fatalf("docker inspect %s: %v: %s", id, err, out)
	}
	var list []inspected
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 {
		t.Fatalf("docker inspect %s: %v (%d objects)", id, err, len(list))
	}
	return list[0]
}

// tmpfsOptions splits a Tmpfs option string into a set, sizes in bytes.
func tmpfsOptions(s string) map[string]string {
	opts := map[string]string{}
	for _, o := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(o, "=")
		opts[k] = v
	}
	if size, ok := opts["size"]; ok {
		mult := int64(1)
		switch {
		case strings.HasSuffix(size, "k"):
			mult = 1 << 10
		case strings.HasSuffix(size, "m"):
			mult = 1 << 20
		case strings.HasSuffix(size, "g"):
			mult = 1 << 30
		}
		n, err := strconv.ParseInt(strings.TrimRight(size, "kmg"), 10, 64)
		if err == nil {
			opts["size"] = strconv.FormatInt(n*mult, 10)
		}
	}
	return opts
}

// TestContainerSpec inspects a real pool container and checks every field of
// security.md's "Every sandbox container" list; on Kubernetes, a pool Pod's fields (see
// checkPod) and its log.
func TestContainerSpec(t *testing.T) {
	pool := settle(t)
	if kubernetes {
		checkPod(t, pool.containers[0], srv.Instance, limits)
		checkPodLog(t)
		return
	}
	c := inspect(t, pool.containers[0])
	// The runtime kiln was configured with (KILN_TEST_RUNTIME), else the daemon's default.
	runtime := os.Getenv("KILN_TEST_RUNTIME")
	if runtime == "" {
		out, err := kilntest.Docker("info", "--format", "{{.DefaultRuntime}}")
		if err != nil {
			t.Fatalf("docker info: %v: %s", err, out)
		}
		runtime = strings.TrimSpace(out)
	}
	checkSpec(t, c, srv.Instance, runtime, limits)
}

// checkSpec checks c against security.md; runtime is the one configured (or the
// daemon's default when none is), lim the limits kiln was given.
func checkSpec(t *testing.T, c inspected, instance, runtime string, lim sandboxLimits) {
	t.Helper()
	cfg, host := c.Config, c.HostConfig
	eq := func(field string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", field, got, want)
		}
	}
	empty := func(field string, n int) {
		t.Helper()
		if n != 0 {
			t.Errorf("%s has %d entries, want none", field, n)
		}
	}

	t.Run("Config", func(t *testing.T) {
		eq("User", cfg.User, "10001:10001")
		eq("Tty", cfg.Tty, false)
		eq("OpenStdin", cfg.OpenStdin, true)
		eq("StdinOnce", cfg.StdinOnce, false)
		eq("AttachStdin", cfg.AttachStdin, true)
		eq("AttachStdout", cfg.AttachStdout, true)
		eq("AttachStderr", cfg.AttachStderr, true)
		eq("NetworkDisabled", cfg.NetworkDisabled, true)
		empty("ExposedPorts", len(cfg.ExposedPorts))
		// Env: an allowlist, and nothing of kiln's environment. KILN_PRELOAD and
		// KILN_WARM_HEAP_MB are the REPL's settings from kiln's configuration.
		allowed := []string{"PATH", "HOME", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH",
			"KILN_PRELOAD", "KILN_WARM_HEAP_MB"}
		for _, kv := range cfg.Env {
			name, value, _ := strings.Cut(kv, "=")
			if !slices.Contains(allowed, name) {
				t.Errorf("Env holds %s, which is not on the allowlist %v", name, allowed)
			}
			for _, secret := range []string{keyA, keyB, canary, dataDir} {
				if strings.Contains(value, secret) {
					t.Errorf("Env %s holds kiln's %q", name, secret)
				}
			}
		}
		if !slices.Contains(cfg.Env, "HOME=/tmp") {
			t.Errorf("Env = %v, want HOME=/tmp", cfg.Env)
		}
		// Hostname: neutral, neither Docker's default (the id) nor anything of the host.
		host, _ := os.Hostname()
		if cfg.Hostname == "" || strings.HasPrefix(c.ID, cfg.Hostname) || cfg.Hostname == host || strings.Contains(cfg.Hostname, instance) {
			t.Errorf("Hostname = %q, want a neutral name (not the id, the host's %q or the instance %q)", cfg.Hostname, host, instance)
		}
		eq("Labels[kiln.managed]", cfg.Labels["kiln.managed"], "true")
		eq("Labels[kiln.service]", cfg.Labels["kiln.service"], "kiln")
		eq("Labels[kiln.instance]", cfg.Labels["kiln.instance"], instance)
		created, err := time.Parse(time.RFC3339, cfg.Labels["kiln.created-at"])
		if err != nil || time.Since(created) > time.Hour || time.Until(created) > time.Minute {
			t.Errorf("Labels[kiln.created-at] = %q (%v), want an RFC 3339 time of the last hour", cfg.Labels["kiln.created-at"], err)
		}
	})

	t.Run("HostConfig", func(t *testing.T) {
		eq("NetworkMode", host.NetworkMode, "none")
		eq("ReadonlyRootfs", host.ReadonlyRootfs, true)
		if len(host.Tmpfs) != 2 {
			t.Errorf("Tmpfs = %v, want /tmp and /mnt/data only", host.Tmpfs)
		}
		mounts := []struct {
			path  string
			bytes int64
			flags []string
		}{
			{"/tmp", tmpMB << 20, []string{"nosuid", "nodev", "noexec"}},
			{"/mnt/data", dataMB << 20, []string{"nosuid", "nodev"}},
		}
		for _, m := range mounts {
			raw, ok := host.Tmpfs[m.path]
			if !ok {
				t.Errorf("Tmpfs has no %s", m.path)
				continue
			}
			opts := tmpfsOptions(raw)
			eq("Tmpfs["+m.path+"] size", opts["size"], m.bytes)
			if n, err := strconv.Atoi(opts["nr_inodes"]); err != nil || n <= 0 {
				t.Errorf("Tmpfs[%s] = %q, want a positive nr_inodes", m.path, raw)
			}
			for _, f := range m.flags {
				if _, ok := opts[f]; !ok {
					t.Errorf("Tmpfs[%s] = %q, want %s", m.path, raw, f)
				}
			}
		}
		eq("CapDrop", host.CapDrop, []string{"ALL"})
		empty("CapAdd", len(host.CapAdd))
		eq("SecurityOpt", host.SecurityOpt, []string{"no-new-privileges=true"}) // no seccomp=unconfined
		eq("Privileged", host.Privileged, false)
		eq("IpcMode", host.IpcMode, "private")
		eq("PidMode", host.PidMode, "")
		eq("UTSMode", host.UTSMode, "")
		eq("UsernsMode", host.UsernsMode, "")
		if host.Init == nil || !*host.Init {
			t.Errorf("Init = %v, want true", host.Init)
		}
		eq("AutoRemove", host.AutoRemove, false)
		eq("RestartPolicy.Name", host.RestartPolicy.Name, "no")
		eq("LogConfig.Type", host.LogConfig.Type, "none")
		eq("Runtime", host.Runtime, runtime)
		empty("Binds", len(host.Binds))
		empty("Mounts", len(host.Mounts))
		empty("container Mounts (volumes)", len(c.Mounts))
		empty("Devices", len(host.Devices))
		empty("DeviceRequests", len(host.DeviceRequests))
		empty("DeviceCgroupRules", len(host.DeviceCgroupRules))
		empty("PortBindings", len(host.PortBindings))
		eq("PublishAllPorts", host.PublishAllPorts, false)
		empty("VolumesFrom", len(host.VolumesFrom))
		empty("Sysctls", len(host.Sysctls))
		// Left unset by kiln, so the daemon fills in Docker's defaults.
		if !slices.Contains(host.MaskedPaths, "/proc/kcore") || !slices.Contains(host.MaskedPaths, "/proc/keys") {
			t.Errorf("MaskedPaths = %v, want Docker's defaults (/proc/kcore, /proc/keys, ...)", host.MaskedPaths)
		}
		if !slices.Contains(host.ReadonlyPaths, "/proc/sys") || !slices.Contains(host.ReadonlyPaths, "/proc/sysrq-trigger") {
			t.Errorf("ReadonlyPaths = %v, want Docker's defaults (/proc/sys, /proc/sysrq-trigger, ...)", host.ReadonlyPaths)
		}
	})

	t.Run("Resources", func(t *testing.T) {
		// SANDBOX_MEMORY_MB for the code, and the REPL's warm heap on top (kiln's default:
		// SANDBOX_MEMORY_MB / 16, at most 64).
		eq("Memory", host.Memory, int64(lim.memoryMB+min(64, lim.memoryMB/16))<<20)
		eq("MemorySwap", host.MemorySwap, host.Memory)
		eq("NanoCpus", host.NanoCpus, int64(1e9))
		if host.PidsLimit == nil || *host.PidsLimit != int64(lim.pidsLimit) {
			t.Errorf("PidsLimit = %v, want %d", host.PidsLimit, lim.pidsLimit)
		}
		ulimits := map[string][2]int64{}
		for _, u := range host.Ulimits {
			ulimits[u.Name] = [2]int64{u.Soft, u.Hard}
		}
		if nofile, ok := ulimits["nofile"]; !ok || nofile[0] <= 0 || nofile[0] != nofile[1] {
			t.Errorf("Ulimits nofile = %v (set %v), want soft = hard > 0", nofile, ok)
		}
		if _, ok := ulimits["nproc"]; ok {
			t.Errorf("Ulimits has nproc, which is per host user: the pids limit is the one")
		}
		eq("Ulimits fsize", ulimits["fsize"], [2]int64{dataMB << 20, dataMB << 20})
		if core, ok := ulimits["core"]; !ok || core != [2]int64{0, 0} {
			t.Errorf("Ulimits core = %v (set %v), want 0/0", core, ok)
		}
		if host.OomKillDisable != nil && *host.OomKillDisable {
			t.Errorf("OomKillDisable = true, want it never set")
		}
	})
}

// TestSandboxProcessView checks the same walls from inside: the REPL's user, its
// capabilities, no_new_privs and Docker's default seccomp filter, its rlimits, and that
// it runs on the host's kernel.
//
// On Kubernetes the rlimits are the REPL's own (KILN_RLIMITS), and PID 1 is the Pod's
// pause process (shareProcessNamespace), which the code can see and signal: it must be
// behind the same walls as the REPL (docs/security.md, "The pause process is visible").
//
// Under gVisor the REPL runs on gVisor's kernel (its release is not the host's), which
// shows less: its /proc/self/status has no CapAmb and no NoNewPrivs line (prctl still
// reports no_new_privs on), and there is no seccomp filter. runsc does not install the
// container's seccomp profile (Docker's default) inside the sandbox: the code's system
// calls go to gVisor's kernel, which implements them itself, and gVisor runs on the
// host under a seccomp filter of its own. Safe: the filter guards the host's kernel,
// which the code cannot reach. The other fields are as under runc.
func TestSandboxProcessView(t *testing.T) {
	t.Parallel()
	var got map[string]string
	observe(t, `
import ctypes, json, os, resource
want = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
out = {k: " ".join(status[k].split()) for k in want if k in status}
libc = ctypes.CDLL(None, use_errno=True)
out["prctl NO_NEW_PRIVS"] = str(libc.prctl(39, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS
out["prctl SECCOMP"] = str(libc.prctl(21, 0, 0, 0, 0))  # PR_GET_SECCOMP
out["kernel"] = os.uname().release
for name in ("NOFILE", "FSIZE", "CORE"):
    out["rlimit " + name] = "%d %d" % resource.getrlimit(getattr(resource, "RLIMIT_" + name))
init = dict(l.split(":", 1) for l in open("/proc/1/status").read().splitlines())
out.update({"pid 1 " + k: " ".join(init[k].split()) for k in want if k in init})
out["pid 1"] = open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode()
print(json.dumps(out))
`, &got)
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	hostKernel := strings.TrimSpace(string(release))
	want := map[string]string{
		"Uid": "10001 10001 10001 10001", "Gid": "10001 10001 10001 10001", "Groups": "10001",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2", // 2: a seccomp filter is on
		"prctl NO_NEW_PRIVS": "1", "prctl SECCOMP": "2",
		"kernel":        hostKernel,
		"rlimit NOFILE": "1024 1024", "rlimit FSIZE": fmt.Sprint(dataMB<<20, " ", dataMB<<20), "rlimit CORE": "0 0",
	}
	if kubernetes {
		// The pause container keeps the runtime's default bounding set (a Pod has no
		// capabilities field for it), which gives it nothing: it holds no capability, runs
		// as 10001 and with no_new_privs, so it can never gain one.
		want["pid 1"] = "/pause"
		for _, k := range []string{"Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs", "Seccomp"} {
			want["pid 1 "+k] = want[k]
		}
	}
	if gvisor {
		delete(want, "CapAmb")
		delete(want, "NoNewPrivs")
		delete(want, "kernel")
		want["Seccomp"], want["prctl SECCOMP"] = "0", "0"
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
	if gvisor {
		if got["kernel"] == "" || got["kernel"] == hostKernel {
			t.Errorf("kernel release = %q, want gVisor's, not the host's %q", got["kernel"], hostKernel)
		}
		for _, k := range []string{"CapAmb", "NoNewPrivs"} {
			if v, ok := got[k]; ok {
				t.Errorf("/proc/self/status shows %s = %q; gVisor's has no such line: is this gVisor?", k, v)
			}
		}
	}
}

// TestContainerSpecGVisor starts a second kiln with SANDBOX_RUNTIME=runsc (and the
// limits the suite gives gVisor) and checks that its sandboxes run under gVisor with
// the same spec and still no network.
func TestContainerSpecGVisor(t *testing.T) {
	if kubernetes {
		t.Skip("SANDBOX_RUNTIME=runsc is Docker's: on Kubernetes gVisor is a RuntimeClass (KUBE_RUNTIME_CLASS), which the test cluster has not; gVisor is tested in the Docker pass")
	}
	t.Parallel()
	lim := limitsFor("runsc")
	runtimes, err := kilntest.Docker("info", "--format", "{{json .Runtimes}}")
	if err != nil || !strings.Contains(runtimes, `"runsc"`) {
		t.Skipf("the Docker daemon has no runsc runtime registered (deploy/ensure-docker.sh registers it): %s", runtimes)
	}
	g, err := kilntest.Start(kilntest.Options{Key: keyA, Env: []string{
		"API_KEYS=" + keyA, "POOL_SIZE=1", "POOL_WARMERS=1", "SANDBOX_RUNTIME=runsc",
		fmt.Sprint("SANDBOX_MEMORY_MB=", lim.memoryMB), fmt.Sprint("SANDBOX_TMP_MB=", tmpMB),
		fmt.Sprint("SANDBOX_DATA_MB=", dataMB), fmt.Sprint("SANDBOX_PIDS_LIMIT=", lim.pidsLimit),
		"DATA_DIR=" + t.TempDir(), "LOG_LEVEL=info",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Stop(60 * time.Second); err != nil {
			t.Errorf("stopping the gVisor kiln: %v", err)
		}
		if left, _ := kilntest.Containers(g.Instance); len(left) != 0 {
			t.Errorf("containers left by the gVisor kiln: %v", left)
		}
	}()
	ids, err := kilntest.Containers(g.Instance)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no container for the gVisor kiln: %v", err)
	}
	checkSpec(t, inspect(t, ids[0]), g.Instance, "runsc", lim)

	var res kilntest.ExecResponse
	resp, err := g.PostJSON("/exec", map[string]any{"state": nil, "code": `
import os
print(sorted(os.listdir("/sys/class/net")), os.getuid(), os.getgid())
`}, &res)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("exec under gVisor: %v (%v)", err, resp)
	}
	checkOutcome(t, res, outcome{status: "ok"})
	if want := "['lo'] 10001 10001\n"; res.Stdout != want {
		t.Errorf("under gVisor: interfaces, uid and gid = %q, want %q", res.Stdout, want)
	}
}
