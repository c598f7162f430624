package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Labels kiln puts on every sandbox Pod, the same as on its Docker containers: the
// NetworkPolicy selects LabelManaged, the sweeps LabelInstance.
const (
	LabelManaged  = "kiln.managed"
	LabelService  = "kiln.service"
	LabelInstance = "kiln.instance"
	// AnnotationCreated is when kiln created the Pod, RFC 3339.
	AnnotationCreated = "kiln.created-at"
)

// container is the name of a sandbox Pod's one container.
const container = "sandbox"

// sandboxUID is the uid and gid sandboxes run as (the image's "sandbox" user).
const sandboxUID = 10001

// idleCommand is a sandbox Pod's own process: it only keeps the Pod running. The REPL is
// started by kiln through the API server's exec (Client.Start), so that what it says never
// reaches the container's log: a Pod's stdout, which an attach would use, is written to
// the node's disk by the container runtime (every output, state and file of every run),
// and counts against the Pod's ephemeral storage, which a large state would overrun.
var idleCommand = []string{"sleep", "infinity"}

// replCommand starts the image's REPL, silent until kiln's hello (docs/protocol.md, Ready).
var replCommand = []string{"python3", "/opt/kiln/repl_server.py", "--await-hello"}

// Spec is everything that decides what a sandbox Pod looks like. It comes from kiln's
// configuration only; no request field reaches it.
type Spec struct {
	Image string
	// PullPolicy is the image's (IfNotPresent unless set; Never for images imported
	// into the nodes by hand).
	PullPolicy corev1.PullPolicy
	// RuntimeClass, when set, names the RuntimeClass the Pods run under (gVisor's).
	RuntimeClass string
	Instance     string   // the owning kiln instance, for the ownership label
	Env          []string // NAME=value, an allowlist: nothing of kiln's own environment
	MemoryMB     int64    // covers the memory-backed /tmp and /mnt/data too
	MilliCPU     int64    // the CPU limit
	// MilliCPURequest is the CPU the scheduler sets aside for a sandbox: an idle warm one
	// uses next to none, so less than its limit (0 is the limit).
	MilliCPURequest int64
	TmpMB           int64 // size of /tmp
	DataMB          int64 // size of /mnt/data
	EphemeralMB     int64 // the container's writable layer and logs: what is left on the node's disk
	// NodeSelector and Tolerations place the Pods (a node pool of sandboxes, say).
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
}

// labelValue is what a label value may look like.
var labelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

// InstanceLabel is the value of LabelInstance for an instance id: the id when it is a
// valid label value, else a digest of it.
func InstanceLabel(instance string) string {
	if len(instance) <= 63 && labelValue.MatchString(instance) {
		return instance
	}
	sum := sha256.Sum256([]byte(instance))
	return "i-" + hex.EncodeToString(sum[:12])
}

// pod builds a sandbox Pod, as docs/security.md lays it out: non-root, read-only root,
// no capability, no privilege escalation, the runtime's default seccomp profile, no
// service account token, no service links, no host namespaces, memory-backed scratch
// space of a fixed size; memory and disk requested as much as their limits (a sandbox's
// memory is never overcommitted), CPU limited but requested less (a warm sandbox idles).
// The network is closed by the NetworkPolicy that selects LabelManaged.
func (s Spec) pod(namespace string, now time.Time) *corev1.Pod {
	quantity := func(mb int64) resource.Quantity { return *resource.NewQuantity(mb<<20, resource.BinarySI) }
	limits := corev1.ResourceList{
		corev1.ResourceMemory: quantity(s.MemoryMB),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(s.MilliCPU, resource.DecimalSI),
	}
	if s.EphemeralMB > 0 {
		limits[corev1.ResourceEphemeralStorage] = quantity(s.EphemeralMB)
	}
	requests := limits.DeepCopy()
	if s.MilliCPURequest > 0 && s.MilliCPURequest < s.MilliCPU {
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(s.MilliCPURequest, resource.DecimalSI)
	}
	tmp, data := quantity(s.TmpMB), quantity(s.DataMB)
	env := make([]corev1.EnvVar, 0, len(s.Env))
	for _, kv := range s.Env {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "kiln-sandbox-",
			Namespace:    namespace,
			Labels: map[string]string{
				LabelManaged:  "true",
				LabelService:  "kiln",
				LabelInstance: InstanceLabel(s.Instance),
			},
			Annotations: map[string]string{AnnotationCreated: now.UTC().Format(time.RFC3339)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			// The pause process is PID 1: it reaps what user code orphans, as Docker's
			// init does for a container, and the REPL is not a PID 1 that signals pass by.
			ShareProcessNamespace: ptr.To(true),
			Hostname:              "sandbox",
			HostNetwork:           false,
			HostPID:               false,
			HostIPC:               false,
			// No cluster DNS: the sandbox has no network to reach it by anyway.
			DNSPolicy:    corev1.DNSNone,
			DNSConfig:    &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			NodeSelector: s.NodeSelector,
			Tolerations:  s.Tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](sandboxUID),
				RunAsGroup:     ptr.To[int64](sandboxUID),
				FSGroup:        ptr.To[int64](sandboxUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            container,
				Image:           s.Image,
				ImagePullPolicy: s.pullPolicy(),
				Command:         idleCommand,
				WorkingDir:      "/mnt/data",
				Env:             env,
				Stdin:           true,
				StdinOnce:       false,
				TTY:             false,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To[int64](sandboxUID),
					RunAsGroup:               ptr.To[int64](sandboxUID),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Privileged:               ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "data", MountPath: "/mnt/data"},
				},
				// The kubelet bind-mounts a file of the node's disk, writable by every uid,
				// at this path in every container. In the image's /root (0700, root's) the
				// sandbox's uid cannot reach it, so nothing code writes lands on the node's
				// disk; kiln reads no termination message anyway.
				TerminationMessagePath:   terminationMessagePath,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &tmp}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &data}}},
			},
		},
	}
	if s.RuntimeClass != "" {
		p.Spec.RuntimeClassName = ptr.To(s.RuntimeClass)
	}
	return p
}

// terminationMessagePath is where the kubelet's termination-log file is mounted: inside
// a directory the sandbox's uid may not enter (/root is 0700 in kiln's images).
const terminationMessagePath = "/root/termination-log"

func (s Spec) pullPolicy() corev1.PullPolicy {
	if s.PullPolicy == "" {
		return corev1.PullIfNotPresent
	}
	return s.PullPolicy
}

// createdAt is when kiln created a Pod: its annotation, else the API server's stamp.
func createdAt(p *corev1.Pod) time.Time {
	if t, err := time.Parse(time.RFC3339, p.Annotations[AnnotationCreated]); err == nil {
		return t
	}
	return p.CreationTimestamp.Time
}
