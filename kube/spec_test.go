package kube

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kilnsh/kiln/sandbox"
)

func testSpec() sandbox.Spec {
	return sandbox.Spec{Image: "kiln-python:latest", Env: []string{"HOME=/tmp", "A=b=c"},
		MemoryMB: 640, MilliCPU: 1000, TmpMB: 64, DataMB: 256, NoFile: 1024}
}

// testRuntime is a Runtime of instance kiln-0 in namespace kiln that is never connected:
// enough to build Pods.
func testRuntime(cfg Config) *Runtime {
	return &Runtime{ns: "kiln", instance: InstanceLabel("kiln-0"), cfg: cfg}
}

var testConfig = Config{PullPolicy: corev1.PullNever, MilliCPURequest: 100, EphemeralMB: 64}

// A sandbox Pod is as hardened as a sandbox container (docs/security.md), field by field.
func TestPodIsHardened(t *testing.T) {
	p := testRuntime(testConfig).newPod(testSpec(), time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC))
	s := p.Spec
	c := s.Containers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"labelled as kiln's, with its instance", p.Labels[sandbox.LabelManaged] == "true" && p.Labels[sandbox.LabelInstance] == "kiln-0" && p.Namespace == "kiln"},
		{"no service account token", s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken},
		{"no service links", s.EnableServiceLinks != nil && !*s.EnableServiceLinks},
		{"never restarted", s.RestartPolicy == corev1.RestartPolicyNever},
		{"no host namespaces", !s.HostNetwork && !s.HostPID && !s.HostIPC},
		{"removed with no grace", s.TerminationGracePeriodSeconds != nil && *s.TerminationGracePeriodSeconds == 0},
		{"non-root, pod and container", *s.SecurityContext.RunAsNonRoot && *c.SecurityContext.RunAsNonRoot && *c.SecurityContext.RunAsUser == sandbox.UID},
		{"read-only root", *c.SecurityContext.ReadOnlyRootFilesystem},
		{"no privilege escalation, not privileged", !*c.SecurityContext.AllowPrivilegeEscalation && !*c.SecurityContext.Privileged},
		{"every capability dropped", len(c.SecurityContext.Capabilities.Drop) == 1 && c.SecurityContext.Capabilities.Drop[0] == "ALL" && len(c.SecurityContext.Capabilities.Add) == 0},
		{"seccomp RuntimeDefault", s.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault && c.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"stdin open, no tty", c.Stdin && !c.StdinOnce && !c.TTY},
		{"idle, for kiln to start the REPL by exec", strings.Join(c.Command, " ") == "sleep infinity"},
		{"limited, memory and disk requested in full, CPU in part", c.Resources.Limits.Memory().Value() == 640<<20 &&
			c.Resources.Requests.Memory().Value() == 640<<20 && c.Resources.Limits.Cpu().MilliValue() == 1000 &&
			c.Resources.Requests.Cpu().MilliValue() == 100 && c.Resources.Limits.StorageEphemeral().Value() == 64<<20 &&
			c.Resources.Requests.StorageEphemeral().Value() == 64<<20},
		{"the image as configured", c.Image == "kiln-python:latest" && c.ImagePullPolicy == corev1.PullNever},
		{"env split at the first =", len(c.Env) == 3 && c.Env[1].Name == "A" && c.Env[1].Value == "b=c"},
		{"the limits with no Pod field set by the REPL", c.Env[2].Name == "KILN_RLIMITS" && c.Env[2].Value == "nofile=1024,fsize=268435456,core=0"},
		{"no RuntimeClass unless set", s.RuntimeClassName == nil},
		{"its termination log out of the sandbox user's reach", c.TerminationMessagePath == "/root/termination-log"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("the sandbox Pod is not %s", c.what)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range s.Volumes {
		vols[v.Name] = v
	}
	for name, size := range map[string]int64{"tmp": 64 << 20, "data": 256 << 20} {
		ed := vols[name].EmptyDir
		if ed == nil || ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Value() != size {
			t.Errorf("volume %s = %+v, want a memory-backed emptyDir of %d bytes", name, vols[name], size)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if mounts["/tmp"] != "tmp" || mounts["/mnt/data"] != "data" {
		t.Errorf("mounts %v, want /tmp and /mnt/data", mounts)
	}
	cfg := testConfig
	cfg.RuntimeClass = "gvisor"
	if rc := testRuntime(cfg).newPod(testSpec(), time.Now()).Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("RuntimeClassName = %v, want gvisor", rc)
	}
}

func TestInstanceLabel(t *testing.T) {
	for in, want := range map[string]string{"kiln-0": "kiln-0", "my.host_1": "my.host_1"} {
		if got := InstanceLabel(in); got != want {
			t.Errorf("InstanceLabel(%q) = %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"-bad", "a b", strings.Repeat("x", 64), "ü"} {
		got := InstanceLabel(in)
		if !strings.HasPrefix(got, "i-") || len(got) > 63 || !labelValue.MatchString(got) || got == InstanceLabel(in+"x") {
			t.Errorf("InstanceLabel(%q) = %q, want a distinct valid label value", in, got)
		}
	}
}

// A Pod's status says whether to start the REPL, to wait, or to give up at once.
func TestPodProgress(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			{Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}}
	}
	tests := []struct {
		name           string
		pod            *corev1.Pod
		running, fatal bool
		reason         string
	}{
		{"running", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: container, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}, true, false, ""},
		{"creating", waiting("ContainerCreating"), false, false, "ContainerCreating"},
		{"pulling, backing off", waiting("ImagePullBackOff"), false, false, "ImagePullBackOff"},
		{"an image never to be pulled", waiting("ErrImageNeverPull"), false, true, "ErrImageNeverPull"},
		{"unschedulable", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available"}}}},
			false, false, "Unschedulable: 0/1 nodes are available"},
		{"ended", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
			{Name: container, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}}},
			false, true, "exit code 137 OOMKilled"},
	}
	for _, tt := range tests {
		running, reason, fatal := podProgress(tt.pod)
		if running != tt.running || fatal != tt.fatal || !strings.Contains(reason, tt.reason) {
			t.Errorf("%s: running %v fatal %v reason %q, want %v %v %q", tt.name, running, fatal, reason, tt.running, tt.fatal, tt.reason)
		}
	}
}

// kiln makes the NetworkPolicy that closes its sandboxes' network when it is missing,
// accepts one that denies all, and refuses to start beside one of that name that lets
// traffic through.
func TestEnsureNetworkPolicy(t *testing.T) {
	cs := fake.NewClientset()
	c, err := newRuntime(context.Background(), cs.CoreV1(), cs.NetworkingV1(), nil, "kiln", sandbox.Options{Instance: "kiln-0", Log: slog.New(slog.DiscardHandler)}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	created, err := c.EnsureNetworkPolicy(t.Context(), "deny")
	if err != nil || !created {
		t.Fatalf("missing policy: created %v, err %v; want it created", created, err)
	}
	got, err := cs.NetworkingV1().NetworkPolicies("kiln").Get(t.Context(), "deny", metav1.GetOptions{})
	if err != nil || !deniesAll(got) {
		t.Fatalf("the policy made: %+v, %v; want one that denies all", got, err)
	}
	if created, err := c.EnsureNetworkPolicy(t.Context(), "deny"); err != nil || created {
		t.Errorf("present policy: created %v, err %v; want it accepted as it is", created, err)
	}
	open := DenyAllPolicy("kiln", "open")
	open.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}} // allows everything out
	if _, err := cs.NetworkingV1().NetworkPolicies("kiln").Create(t.Context(), open, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureNetworkPolicy(t.Context(), "open"); err == nil || !strings.Contains(err.Error(), "does not deny all") {
		t.Errorf("a policy that lets traffic out: err %v, want a refusal", err)
	}
	other := DenyAllPolicy("kiln", "other")
	other.Spec.PodSelector.MatchLabels = map[string]string{"app": "web"}
	if deniesAll(other) {
		t.Error("a policy that selects other Pods counts as closing the sandboxes")
	}
}

// client-go's report of a stream kiln closed itself is no error in kiln's log.
func TestQuietClosed(t *testing.T) {
	var buf strings.Builder
	log := slog.New(quietClosed{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})})
	log.Error("Unhandled Error", "err", "next reader: read tcp 127.0.0.1:1->127.0.0.1:2: use of closed network connection")
	log.Error("Unhandled Error", "err", "watch of *v1.Pod ended with: an error on the server")
	if out := buf.String(); strings.Contains(out, "closed network") || !strings.Contains(out, "watch of") {
		t.Errorf("log = %q, want the watch error alone", out)
	}
}
