package abuse

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kilnsh/kiln/test/kilntest"
)

// checkPod is checkSpec on Kubernetes: it reads a sandbox Pod as the API server holds it
// (kubectl, independent of kiln's code) and checks every field of security.md's "Around
// the sandbox on Kubernetes" table; lim are the limits kiln was given. The walls a Pod has
// no field for are checked from inside: the process limit by case 1, the REPL's own
// rlimits and the pause process by TestSandboxProcessView, the closed network by case 11.
func checkPod(t *testing.T, id, instance string, lim sandboxLimits) {
	t.Helper()
	var p corev1.Pod
	if err := kilntest.KubePod(id, &p); err != nil {
		t.Fatal(err)
	}
	spec := p.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("the Pod has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]

	t.Run("Metadata", func(t *testing.T) {
		checkField(t, "labels[kiln.managed]", p.Labels["kiln.managed"], "true")
		checkField(t, "labels[kiln.service]", p.Labels["kiln.service"], "kiln")
		checkField(t, "labels[kiln.instance]", p.Labels["kiln.instance"], instance)
		created, err := time.Parse(time.RFC3339, p.Annotations["kiln.created-at"])
		if err != nil || time.Since(created) > time.Hour || time.Until(created) > time.Minute {
			t.Errorf("annotations[kiln.created-at] = %q (%v), want an RFC 3339 time of the last hour", p.Annotations["kiln.created-at"], err)
		}
	})

	t.Run("Pod", func(t *testing.T) {
		checkField(t, "restartPolicy", spec.RestartPolicy, corev1.RestartPolicyNever)
		checkField(t, "terminationGracePeriodSeconds", deref(spec.TerminationGracePeriodSeconds), 0)
		checkField(t, "automountServiceAccountToken", deref(spec.AutomountServiceAccountToken), false)
		checkField(t, "enableServiceLinks", deref(spec.EnableServiceLinks), false)
		checkField(t, "hostNetwork", spec.HostNetwork, false)
		checkField(t, "hostPID", spec.HostPID, false)
		checkField(t, "hostIPC", spec.HostIPC, false)
		// Docker's Init=true: the pause process is PID 1 and reaps orphans.
		checkField(t, "shareProcessNamespace", deref(spec.ShareProcessNamespace), true)
		checkField(t, "hostname", spec.Hostname, "sandbox")
		// No cluster DNS: the only nameserver is the Pod's own loopback.
		checkField(t, "dnsPolicy", spec.DNSPolicy, corev1.DNSNone)
		if spec.DNSConfig == nil || !slices.Equal(spec.DNSConfig.Nameservers, []string{"127.0.0.1"}) || len(spec.DNSConfig.Searches) != 0 {
			t.Errorf("dnsConfig = %+v, want the nameserver 127.0.0.1 alone", spec.DNSConfig)
		}
		checkField(t, "runtimeClassName", deref(spec.RuntimeClassName), "unset") // the suite names none
		checkField(t, "initContainers", len(spec.InitContainers), 0)
		checkField(t, "ephemeralContainers", len(spec.EphemeralContainers), 0)
		sc := spec.SecurityContext
		if sc == nil {
			t.Fatal("the Pod has no securityContext")
		}
		checkField(t, "securityContext.runAsNonRoot", deref(sc.RunAsNonRoot), true)
		checkField(t, "securityContext.runAsUser", deref(sc.RunAsUser), 10001)
		checkField(t, "securityContext.runAsGroup", deref(sc.RunAsGroup), 10001)
		checkField(t, "securityContext.fsGroup", deref(sc.FSGroup), 10001)
		checkField(t, "securityContext.seccompProfile", seccomp(sc.SeccompProfile), corev1.SeccompProfileTypeRuntimeDefault)
		checkField(t, "securityContext.sysctls", len(sc.Sysctls), 0)
		// Two memory-backed emptyDirs, the tmpfs mounts of Docker, and nothing else: no
		// host path, no Secret, no projected token.
		sizes := map[string]int64{}
		for _, v := range spec.Volumes {
			if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil {
				t.Errorf("volume %s = %+v, want a memory-backed emptyDir with a sizeLimit", v.Name, v.VolumeSource)
				continue
			}
			sizes[v.Name] = v.EmptyDir.SizeLimit.Value()
		}
		mounts := map[string]int64{}
		for _, m := range c.VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" || m.MountPropagation != nil {
				t.Errorf("volumeMount %s = %+v, want the volume whole, without propagation", m.MountPath, m)
			}
			mounts[m.MountPath] = sizes[m.Name]
		}
		want := map[string]int64{"/tmp": tmpMB << 20, "/mnt/data": dataMB << 20}
		if len(spec.Volumes) != 2 || fmt.Sprint(mounts) != fmt.Sprint(want) {
			t.Errorf("volumes %d, mounted with sizes %v; want the two emptyDirs %v", len(spec.Volumes), mounts, want)
		}
	})

	t.Run("Container", func(t *testing.T) {
		// The Pod's own process writes nothing (Docker's LogConfig none): kiln starts the
		// REPL by exec.
		checkField(t, "command", c.Command, []string{"sleep", "infinity"})
		checkField(t, "args", len(c.Args), 0)
		checkField(t, "stdin", c.Stdin, true)
		checkField(t, "stdinOnce", c.StdinOnce, false)
		checkField(t, "tty", c.TTY, false)
		checkField(t, "ports", len(c.Ports), 0)
		// The kubelet's termination-log file, on the node's disk and writable by every uid,
		// is mounted where the sandbox's uid cannot reach it (case 13 tries).
		checkField(t, "terminationMessagePath", c.TerminationMessagePath, "/root/termination-log")
		checkField(t, "volumeDevices", len(c.VolumeDevices), 0)
		checkField(t, "envFrom", len(c.EnvFrom), 0)
		sc := c.SecurityContext
		if sc == nil {
			t.Fatal("the container has no securityContext")
		}
		checkField(t, "securityContext.runAsNonRoot", deref(sc.RunAsNonRoot), true)
		checkField(t, "securityContext.runAsUser", deref(sc.RunAsUser), 10001)
		checkField(t, "securityContext.runAsGroup", deref(sc.RunAsGroup), 10001)
		checkField(t, "securityContext.readOnlyRootFilesystem", deref(sc.ReadOnlyRootFilesystem), true)
		checkField(t, "securityContext.allowPrivilegeEscalation", deref(sc.AllowPrivilegeEscalation), false)
		checkField(t, "securityContext.privileged", deref(sc.Privileged), false)
		checkField(t, "securityContext.seccompProfile", seccomp(sc.SeccompProfile), corev1.SeccompProfileTypeRuntimeDefault)
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("securityContext.capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
		}
		// The runtime's masked and read-only /proc paths (Docker's MaskedPaths).
		if pm := deref(sc.ProcMount); pm != "unset" && pm != corev1.DefaultProcMount {
			t.Errorf("securityContext.procMount = %v, want Default", pm)
		}
		// Env: the allowlist of checkSpec, and KILN_RLIMITS, Docker's Ulimits, which the
		// REPL applies to itself; nothing of kiln's environment, nothing from a Secret.
		allowed := []string{"PATH", "HOME", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH",
			"KILN_PRELOAD", "KILN_WARM_HEAP_MB", "KILN_RLIMITS"}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if !slices.Contains(allowed, e.Name) {
				t.Errorf("env holds %s, which is not on the allowlist %v", e.Name, allowed)
			}
			if e.ValueFrom != nil {
				t.Errorf("env %s comes from %+v, want a plain value", e.Name, e.ValueFrom)
			}
			for _, secret := range []string{keyA, keyB, canary, dataDir} {
				if strings.Contains(e.Value, secret) {
					t.Errorf("env %s holds kiln's %q", e.Name, secret)
				}
			}
		}
		checkField(t, "env HOME", env["HOME"], "/tmp")
		rlimits := map[string]string{}
		for _, kv := range strings.Split(env["KILN_RLIMITS"], ",") {
			k, v, _ := strings.Cut(kv, "=")
			rlimits[k] = v
		}
		if n, err := strconv.Atoi(rlimits["nofile"]); err != nil || n <= 0 {
			t.Errorf("KILN_RLIMITS = %q, want nofile > 0", env["KILN_RLIMITS"])
		}
		if _, ok := rlimits["nproc"]; ok {
			t.Errorf("KILN_RLIMITS = %q has nproc, which is per host user: the pids limit is the one", env["KILN_RLIMITS"])
		}
		checkField(t, "KILN_RLIMITS fsize", rlimits["fsize"], dataMB<<20)
		checkField(t, "KILN_RLIMITS core", rlimits["core"], 0)
	})

	t.Run("Resources", func(t *testing.T) {
		limits, requests := c.Resources.Limits, c.Resources.Requests
		// SANDBOX_MEMORY_MB and the REPL's warm heap, as on Docker; requested whole, so that
		// the scheduler never overcommits a sandbox's memory.
		memory := int64(lim.memoryMB+min(64, lim.memoryMB/16)) << 20
		checkField(t, "limits.memory", limits.Memory().Value(), memory)
		checkField(t, "requests.memory", requests.Memory().Value(), memory)
		checkField(t, "limits.cpu", limits.Cpu().MilliValue(), 1000) // SANDBOX_CPUS, 1 by default
		if cpu := requests.Cpu().MilliValue(); cpu <= 0 || cpu > 1000 {
			t.Errorf("requests.cpu = %dm, want above 0 and at most the limit", cpu)
		}
		// The writable layer and the logs: what a sandbox may leave on the node's disk.
		if disk := limits.StorageEphemeral().Value(); disk <= 0 || requests.StorageEphemeral().Value() != disk {
			t.Errorf("ephemeral-storage limit %d, request %d; want a limit, requested whole", disk, requests.StorageEphemeral().Value())
		}
	})
}

// checkPodLog runs code that prints in a session and checks that its live Pod's log is
// still empty: the REPL's output goes to kiln through the exec's streams, never to the
// container's log on the node's disk (Docker's LogConfig none).
func checkPodLog(t *testing.T) {
	t.Helper()
	marker := kilntest.NewMarker()
	res := execAs(t, keyA, map[string]any{"code": kilntest.WhoAmICode + `import sys
print("` + marker + `")
print("` + marker + `", file=sys.stderr)
print(sandbox_ref)
`})
	checkOutcome(t, res, outcome{status: "ok"})
	lines := strings.Fields(res.Stdout)
	id, err := kilntest.SandboxID(lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	out, err := kilntest.Kubectl("logs", id, "--container", "sandbox")
	if err != nil || out != "" {
		t.Errorf("the log of the session's Pod %s after a run that printed: %q (err %v), want it empty", id, out, err)
	}
}

// checkField fails t unless got prints as want.
func checkField(t *testing.T, field string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

// deref is what a pointer field holds, or "unset".
func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// seccomp is a seccomp profile's type, or "unset".
func seccomp(p *corev1.SeccompProfile) any {
	if p == nil {
		return "unset"
	}
	return p.Type
}
