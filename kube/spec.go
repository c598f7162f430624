package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kilnsh/kiln/sandbox"
)

// AnnotationCreated is when kiln created a sandbox Pod, RFC 3339.
const AnnotationCreated = sandbox.LabelCreated

// container is the name of a sandbox Pod's one container.
const container = "sandbox"

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

// newPod builds a sandbox Pod of spec, as docs/security.md lays it out: non-root, read-only root,
// no capability, no privilege escalation, the runtime's default seccomp profile, no
// service account token, no service links, no host namespaces, memory-backed scratch
// space of a fixed size; memory and disk requested as much as their limits (a sandbox's
// memory is never overcommitted), CPU limited but requested less (a warm sandbox idles).
// The network is closed by the NetworkPolicy that selects LabelManaged.
//
// The Pod's own process only keeps it running: the REPL is started by kiln through the
// API server's exec (Runtime.Start), so that what it says never reaches the container's
// log. A Pod's stdout, which an attach would use, is written to the node's disk by the
// container runtime (every output, state and file of every run), and counts against the
// Pod's ephemeral storage, which a large state would overrun. The limits Kubernetes has
// no field for (open files, file size, core dumps) the REPL sets on itself.
func (c *Runtime) newPod(s sandbox.Spec, now time.Time) *corev1.Pod {
	cfg := c.cfg
	quantity := func(mb int64) resource.Quantity { return *resource.NewQuantity(mb<<20, resource.BinarySI) }
	limits := corev1.ResourceList{
		corev1.ResourceMemory: quantity(s.MemoryMB),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(s.MilliCPU, resource.DecimalSI),
	}
	if cfg.EphemeralMB > 0 {
		limits[corev1.ResourceEphemeralStorage] = quantity(cfg.EphemeralMB)
	}
	requests := limits.DeepCopy()
	if cfg.MilliCPURequest > 0 && cfg.MilliCPURequest < s.MilliCPU {
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(cfg.MilliCPURequest, resource.DecimalSI)
	}
	tmp, data := quantity(s.TmpMB), quantity(s.DataMB)
	vars := append(slices.Clone(s.Environment()),
		fmt.Sprintf("%s=nofile=%d,fsize=%d,core=0", sandbox.RlimitsVar, s.NoFile, s.DataMB<<20))
	env := make([]corev1.EnvVar, 0, len(vars))
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "kiln-sandbox-",
			Namespace:    c.ns,
			Labels: map[string]string{
				sandbox.LabelManaged:  "true",
				sandbox.LabelService:  "kiln",
				sandbox.LabelInstance: c.instance,
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
			NodeSelector: cfg.NodeSelector,
			Tolerations:  cfg.Tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](sandbox.UID),
				RunAsGroup:     ptr.To[int64](sandbox.UID),
				FSGroup:        ptr.To[int64](sandbox.UID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            container,
				Image:           s.Image,
				ImagePullPolicy: pullPolicy(cfg.PullPolicy),
				Command:         sandbox.IdleCommand,
				WorkingDir:      sandbox.DataDir,
				Env:             env,
				Stdin:           true,
				StdinOnce:       false,
				TTY:             false,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					RunAsUser:                ptr.To[int64](sandbox.UID),
					RunAsGroup:               ptr.To[int64](sandbox.UID),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Privileged:               ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "data", MountPath: sandbox.DataDir},
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
	if cfg.RuntimeClass != "" {
		p.Spec.RuntimeClassName = ptr.To(cfg.RuntimeClass)
	}
	if c.owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*c.owner}
	}
	return p
}

// terminationMessagePath is where the kubelet's termination-log file is mounted: inside
// a directory the sandbox's uid may not enter (/root is 0700 in kiln's images).
const terminationMessagePath = "/root/termination-log"

func pullPolicy(p corev1.PullPolicy) corev1.PullPolicy {
	if p == "" {
		return corev1.PullIfNotPresent
	}
	return p
}

// createdAt is when kiln created a Pod: its annotation, else the API server's stamp.
func createdAt(p *corev1.Pod) time.Time {
	if t, err := time.Parse(time.RFC3339, p.Annotations[AnnotationCreated]); err == nil {
		return t
	}
	return p.CreationTimestamp.Time
}
