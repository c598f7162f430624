package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typednetworkingv1 "k8s.io/client-go/kubernetes/typed/networking/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox"
)

// removeTimeout bounds the create of a Pod, and the deletion of one that failed to warm up.
const removeTimeout = 30 * time.Second

// Name is the runtime's name (RUNTIME=kubernetes).
const Name = "kubernetes"

// Config is what the Kubernetes runtime needs beyond sandbox.Options: where its Pods go,
// and what of a Pod has no runtime-neutral word in sandbox.Spec.
type Config struct {
	// Namespace holds the sandbox Pods; "" is the kubeconfig's, or kiln's own Pod's.
	Namespace string
	// OwnerPod, when set, names the Pod kiln runs in, in Namespace: every sandbox Pod
	// names it as its owner, so that the cluster's garbage collector deletes them when
	// that Pod goes (a kiln Pod that died or was replaced leaves none behind). Open checks
	// that it exists there: an owner reference names a uid in the dependent's namespace,
	// and one that does not resolve makes the collector delete the dependents at once.
	OwnerPod string
	// NetworkPolicy, when set, names the NetworkPolicy that closes the sandboxes' network:
	// Open checks it is there, and creates it when it is missing and kiln may.
	NetworkPolicy string
	// RequireRestricted makes Open refuse a namespace that admits a Pod the restricted Pod
	// Security Standard refuses (checkRestricted): kiln may create Pods there, and whoever
	// took it over could otherwise start a privileged one.
	RequireRestricted bool
	// PullPolicy is the image's (IfNotPresent unless set; Never for images imported
	// into the nodes by hand).
	PullPolicy corev1.PullPolicy
	// RuntimeClass, when set, names the RuntimeClass the Pods run under (gVisor's).
	RuntimeClass string
	// MilliCPURequest is the CPU the scheduler sets aside for a sandbox: an idle warm one
	// uses next to none, so less than its limit (0 is the limit).
	MilliCPURequest int64
	// EphemeralMB bounds the container's writable layer and logs: what is left on the
	// node's disk.
	EphemeralMB int64
	// NodeSelector and Tolerations place the Pods (a node pool of sandboxes, say).
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
}

// Runtime makes and removes sandbox Pods through the API server. One informer watches
// this instance's Pods: warm-ups wait on it for their Pod to run, and exits and the
// reaper read it, so that no sandbox costs a watch of its own.
type Runtime struct {
	core     typedcorev1.CoreV1Interface
	network  typednetworkingv1.NetworkingV1Interface
	rest     *rest.Config
	ns       string
	instance string // the label value
	frames   sandbox.FrameLimits
	log      *slog.Logger
	owner    *metav1.OwnerReference // Config.OwnerPod's, or nil
	cfg      Config

	pods    corelisters.PodNamespaceLister
	stop    chan struct{}
	watched chan struct{} // closed when the informer and its goroutines have stopped

	mu      sync.Mutex
	waiting map[string]chan struct{} // by Pod name: poked on every change of the Pod
	running map[string]*Sandbox      // by Pod name: the sandboxes Start returned, until removed
}

var _ sandbox.Runtime = (*Runtime)(nil)

// Open connects to the API server, checks the NetworkPolicy that closes the sandboxes'
// network when one is named, and starts watching this instance's Pods; it returns once
// the watch has caught up, or fails within ctx.
func Open(ctx context.Context, o sandbox.Options, cfg Config) (*Runtime, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	routeKlog(o.Log)
	// $KUBECONFIG, else ~/.kube/config, else the service account of the Pod kiln runs in.
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	ns := cfg.Namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, fmt.Errorf("kubernetes namespace: %w", err)
		}
	}
	// A pool refills by creating Pods and removes them after every use: the client's
	// default of 5 requests a second would be the pool's pace.
	rc.QPS, rc.Burst = 100, 200
	rc.UserAgent = "kiln"
	// The typed clients of the two API groups kiln touches, not the whole clientset: it
	// would compile every group's client, informer and lister into kiln.
	core, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	network, err := typednetworkingv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	r, err := newRuntime(ctx, core, network, rc, ns, o, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NetworkPolicy != "" {
		created, err := r.EnsureNetworkPolicy(ctx, cfg.NetworkPolicy)
		if err != nil {
			return nil, errors.Join(err, r.Close())
		}
		if created {
			o.Log.Info("created the NetworkPolicy that closes the sandboxes' network", "name", cfg.NetworkPolicy, "namespace", ns)
		}
	}
	if cfg.RequireRestricted {
		if err := r.checkRestricted(ctx); err != nil {
			return nil, errors.Join(err, r.Close())
		}
	}
	return r, nil
}

// checkRestricted asks the API server to create, in a dry run that keeps nothing, a Pod
// that breaks the restricted Pod Security Standard (a container with no security context
// at all): a namespace that admits it is refused. It needs no right beyond creating Pods,
// and holds whatever enforces the standard: the namespace's label, the cluster's default,
// or a policy engine. A refusal for another reason (a quota, say) is logged and let pass.
func (c *Runtime) checkRestricted(ctx context.Context) error {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kiln-pod-security-probe-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "probe", Image: "kiln-pod-security-probe"}},
		},
	}
	_, err := c.core.Pods(c.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return fmt.Errorf("namespace %s admits Pods that break the restricted Pod Security Standard (a dry run of one was accepted): "+
			"label it pod-security.kubernetes.io/enforce=restricted (as deploy/k8s/manifests/namespace.yaml and the Helm chart do), "+
			"or set KUBE_REQUIRE_RESTRICTED=false", c.ns)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity"):
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		c.log.Warn("the namespace refused the Pod Security probe for another reason than Pod Security: kiln cannot tell whether it enforces the restricted standard",
			"namespace", c.ns, "err", err)
		return nil
	}
	return fmt.Errorf("checking the Pod Security of namespace %s (a dry-run Pod): %w", c.ns, err)
}

// ownerOf reads the Pod named name in ns and returns a reference to it as the owner of
// sandbox Pods: not a controller, and not blocking its deletion (which would need the
// finalizers of kiln's own Pod in kiln's Role).
func ownerOf(ctx context.Context, core typedcorev1.CoreV1Interface, ns, name string) (*metav1.OwnerReference, error) {
	p, err := core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("KUBE_OWNER_POD: reading the Pod %s in namespace %s (it must be kiln's own, in the sandboxes' namespace: "+
			"an owner reference cannot cross namespaces): %w", name, ns, err)
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}, nil
}

func newRuntime(ctx context.Context, core typedcorev1.CoreV1Interface, network typednetworkingv1.NetworkingV1Interface,
	rc *rest.Config, ns string, o sandbox.Options, cfg Config) (*Runtime, error) {
	c := &Runtime{
		core: core, network: network, rest: rc, ns: ns, instance: InstanceLabel(o.Instance), frames: o.Frames, log: o.Log, cfg: cfg,
		stop: make(chan struct{}), watched: make(chan struct{}),
		waiting: map[string]chan struct{}{}, running: map[string]*Sandbox{},
	}
	if cfg.OwnerPod != "" {
		owner, err := ownerOf(ctx, core, ns, cfg.OwnerPod)
		if err != nil {
			return nil, err
		}
		c.owner = owner
	}
	pods := core.Pods(ns)
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = c.selector()
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = c.selector()
			return pods.Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	name := func(obj any) string {
		if p, ok := obj.(*corev1.Pod); ok {
			return p.Name
		} else if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return strings.TrimPrefix(t.Key, ns+"/")
		}
		return ""
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.poke(name(obj)) },
		UpdateFunc: func(_, obj any) { c.poke(name(obj)) },
		DeleteFunc: func(obj any) { c.gone(name(obj)) },
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	c.pods = corelisters.NewPodLister(informer.GetIndexer()).Pods(ns)
	go func() {
		defer close(c.watched)
		informer.Run(c.stop) // returns once its goroutines have
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		_ = c.Close()
		return nil, fmt.Errorf("%w: watching pods in namespace %s did not catch up (can kiln list and watch pods there?)", kiln.ErrRuntime, ns)
	}
	return c, nil
}

// selector selects this instance's sandbox Pods.
func (c *Runtime) selector() string {
	return labels.Set{sandbox.LabelManaged: "true", sandbox.LabelInstance: c.instance}.String()
}

// Close stops the watch and waits for its goroutines. It is idempotent.
func (c *Runtime) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.watched
	return nil
}

// Name returns "kubernetes".
func (c *Runtime) Name() string { return Name }

// Traits implements sandbox.Runtime: a Pod's limits are fixed once it runs.
func (c *Runtime) Traits() sandbox.Traits {
	return sandbox.Traits{Isolation: cmp.Or(c.cfg.RuntimeClass, "default")}
}

// Ping checks that the API server answers.
func (c *Runtime) Ping(ctx context.Context) error {
	if err := c.core.RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("cannot reach the Kubernetes API server (KUBECONFIG, or the Pod's service account): %w", err)
	}
	return nil
}

// ImageID names the image: each node pulls it (or holds it, with the pull policy
// Never), and a Pod that cannot have it fails its warm-up, which says why.
func (c *Runtime) ImageID(_ context.Context, image string) (string, error) { return image, nil }

// watch returns a channel poked whenever the named Pod changes, and the function that
// stops it.
func (c *Runtime) watch(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.waiting[name] = ch
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		if c.waiting[name] == ch {
			delete(c.waiting, name)
		}
		c.mu.Unlock()
	}
}

func (c *Runtime) poke(name string) {
	c.mu.Lock()
	ch := c.waiting[name]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default: // a poke is waiting already: the watcher reads the latest state anyway
		}
	}
}

// gone hears that a Pod was deleted. A sandbox still running in it is dead from now on,
// whatever its stream says: the kubelet may take seconds to kill the container of a Pod
// someone else deleted (or that the cluster deleted with its lost node), and no call may
// run in it meanwhile.
func (c *Runtime) gone(name string) {
	c.mu.Lock()
	sb := c.running[name]
	delete(c.running, name)
	c.mu.Unlock()
	if sb != nil {
		sb.Conn.Close()
	}
	c.poke(name)
}

// pod returns the watch's view of a Pod; nil once it is gone (or not seen yet).
func (c *Runtime) pod(name string) *corev1.Pod {
	p, err := c.pods.Get(name)
	if err != nil {
		return nil
	}
	return p
}

// Start creates a sandbox Pod from spec and returns it once its REPL has answered the
// handshake. A Pod no node has room for is reported at once (sandbox.NoRoomError), and
// its Wait goes on waiting for the scheduler to place it.
func (c *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	return sandbox.Started(c.startPod(ctx, spec, true))
}

// StartPod is Start with the Pod's own type, for tests and benchmarks that measure a
// sandbox without kiln. It creates the Pod, waits for it to run, starts its REPL through
// the API server's exec (WebSocket, or SPDY where the server does not speak it) and greets
// it. ctx bounds the whole warm-up: a Pod still Pending (unschedulable, an image that
// cannot be had) when it ends is removed, and so is one whose image or container cannot
// be made at all, at once.
func (c *Runtime) StartPod(ctx context.Context, spec sandbox.Spec) (*Sandbox, error) {
	return c.startPod(ctx, spec, false)
}

// startPod is StartPod; with tellNoRoom, a Pod found unschedulable returns a
// sandbox.NoRoomError whose Wait finishes the start.
func (c *Runtime) startPod(ctx context.Context, spec sandbox.Spec, tellNoRoom bool) (*Sandbox, error) {
	if spec.PerCall {
		return nil, fmt.Errorf("%w: a REPL per call is not supported on Kubernetes: sandbox Pods run the warm REPL", kiln.ErrRuntime)
	}
	// The create is not cut short by ctx: one the API server carries out after its caller
	// gave up would leave a Pod no one knows of (until the reaper). ctx is checked after.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	pod := c.newPod(spec, time.Now())
	created, err := c.core.Pods(c.ns).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: pod create: %w", kiln.ErrRuntime, err)
	}
	changed, unwatch := c.watch(created.Name)
	st := &starting{c: c, s: &Sandbox{name: created.Name, rt: c}, changed: changed, unwatch: unwatch}
	return st.finish(ctx, tellNoRoom)
}

// starting is a Pod on its way to ready: what finish needs, across a NoRoomError.
type starting struct {
	c       *Runtime
	s       *Sandbox
	changed <-chan struct{}
	unwatch func()
}

// finish waits for the Pod to run, then starts and greets its REPL; with tellNoRoom, a
// Pod no node can take returns a NoRoomError that finishes later instead.
func (st *starting) finish(ctx context.Context, tellNoRoom bool) (*Sandbox, error) {
	c, s := st.c, st.s
	err := c.awaitRunning(ctx, s.name, st.changed, tellNoRoom)
	if why := unplaced(""); errors.As(err, &why) {
		return nil, &sandbox.NoRoomError{Why: string(why), Wait: func(ctx context.Context) (sandbox.Sandbox, error) {
			return sandbox.Started(st.finish(ctx, false))
		}}
	}
	defer st.unwatch()
	fail := func(err error) (*Sandbox, error) {
		rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		return nil, errors.Join(err, s.Remove(rctx))
	}
	if err != nil {
		return fail(err)
	}
	ex, err := c.exec(s.name, sandbox.REPLCommand)
	if err != nil {
		return fail(fmt.Errorf("%w: exec: %w", kiln.ErrRuntime, err))
	}
	s.streams = openExec(ex)
	s.Conn = sandbox.Open(s.streams, c.frames, c.log, s.name)
	if _, err = s.Handshake(ctx); err != nil {
		return fail(err)
	}
	c.mu.Lock()
	c.running[s.name] = s
	c.mu.Unlock()
	if c.pod(s.name) == nil && ctx.Err() == nil {
		// Deleted between its start and now: gone ran before it was listed.
		if p, err := c.core.Pods(c.ns).Get(ctx, s.name, metav1.GetOptions{}); apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			return fail(fmt.Errorf("%w: pod %s deleted during warm-up", kiln.ErrSandboxExited, s.name))
		}
	}
	return s, nil
}

// oomKilled reports whether the kernel's out-of-memory killer struck in the Pod's
// container, from its memory cgroup's count of kills (cgroup v2's memory.events, v1's
// memory.oom_control), read by a short exec: the REPL is not the container's process, so
// the kubelet's OOMKilled flag does not cover it.
func (c *Runtime) oomKilled(ctx context.Context, name string) (bool, error) {
	ex, err := c.exec(name, []string{"sh", "-c",
		"cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"})
	if err != nil {
		return false, err
	}
	var out, errOut strings.Builder
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return false, fmt.Errorf("reading the memory cgroup: %w: %s", err, sandbox.LastLine(errOut.String()))
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			return f[1] != "0", nil
		}
	}
	return false, fmt.Errorf("reading the memory cgroup: no oom_kill count in %q", out.String())
}

// fatalWaiting are the reasons a container waits for something that will not come by
// waiting longer: a Pod stuck on one is removed at once.
var fatalWaiting = map[string]bool{
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"ImageInspectError":          true,
}

// awaitRunning waits until the Pod's container runs; exec cannot start before. An
// image still being pulled, or backing off, waits for ctx. With tellNoRoom, a Pod the
// scheduler could place on no node ends the wait with unplaced.
func (c *Runtime) awaitRunning(ctx context.Context, name string, changed <-chan struct{}, tellNoRoom bool) error {
	why := "not seen yet"
	for {
		if p := c.pod(name); p != nil {
			switch running, reason, fatal := podProgress(p); {
			case running:
				return nil
			case fatal:
				return fmt.Errorf("%w: pod %s: %s", kiln.ErrRuntime, name, reason)
			default:
				why = reason
			}
			if tellNoRoom && unschedulable(p) {
				return unplaced(why)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: pod %s did not run: %s: %w", kiln.ErrWarmupTimeout, name, why, ctx.Err())
		}
	}
}

// unplaced is awaitRunning's word that no node has room for the Pod: the scheduler's
// reason.
type unplaced string

func (u unplaced) Error() string { return "unschedulable: " + string(u) }

// podProgress reads a Pod's status: whether its container runs, else what it waits
// for, and whether that will never come.
func podProgress(p *corev1.Pod) (running bool, reason string, fatal bool) {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Sprintf("ended %s: %s %s", p.Status.Phase, p.Status.Reason, terminated(p)), true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		switch {
		case cs.State.Running != nil:
			return true, "", false
		case cs.State.Terminated != nil:
			return false, "the container ended: " + terminated(p), true
		case cs.State.Waiting != nil:
			w := cs.State.Waiting
			return false, strings.TrimSpace(w.Reason + " " + w.Message), fatalWaiting[w.Reason]
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return false, strings.TrimSpace(cond.Reason + ": " + cond.Message), false
		}
	}
	return false, string(p.Status.Phase), false
}

// unschedulable reports whether the scheduler found no node for the Pod.
func unschedulable(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// terminated describes how the Pod's container ended, when it has.
func terminated(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; cs.Name == container && t != nil {
			msg := ""
			if strings.TrimSpace(t.Message) != "" {
				msg = sandbox.LastLine(t.Message)
			}
			return strings.TrimSpace(fmt.Sprintf("exit code %d %s %s", t.ExitCode, t.Reason, msg))
		}
	}
	return ""
}

// exec returns the executor of a command in the Pod's container, with its stdin, stdout
// and stderr: WebSocket, falling back to SPDY when the API server (or a proxy on the way)
// cannot upgrade to it. What the command writes goes to kiln alone, never to the
// container's log.
func (c *Runtime) exec(name string, command []string) (remotecommand.Executor, error) {
	req := c.core.RESTClient().Post().Resource("pods").Namespace(c.ns).Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdin: true, Stdout: true, Stderr: true, TTY: false},
			scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.rest, "GET", req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.rest, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// Remove deletes a Pod at once, with no grace; one already gone is not an error.
func (c *Runtime) Remove(ctx context.Context, name string) error {
	c.mu.Lock()
	delete(c.running, name)
	c.mu.Unlock()
	err := c.core.Pods(c.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("pod delete %s: %w", name, err)
	}
	return nil
}

// List returns this instance's sandbox Pods, as the watch sees them.
func (c *Runtime) List(context.Context) ([]sandbox.Found, error) {
	list, err := c.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Found, 0, len(list))
	for _, p := range list {
		out = append(out, sandbox.Found{ID: p.Name, State: string(p.Status.Phase), Created: createdAt(p)})
	}
	return out, nil
}

// RemoveOrphans deletes every sandbox Pod of this instance, asking the API server (not
// the watch): at start-up these are leftovers of an earlier process of the instance, at
// shutdown those of failed removals. It returns how many it deleted.
func (c *Runtime) RemoveOrphans(ctx context.Context) (int, error) {
	list, err := c.core.Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: c.selector()})
	if err != nil {
		return 0, fmt.Errorf("pod list: %w", err)
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return sandbox.RemoveEach(ctx, names, c.Remove)
}

// EnsureNetworkPolicy makes sure the namespace holds the NetworkPolicy that closes the
// sandboxes' network: named name, selecting every kiln sandbox Pod, allowing nothing in
// or out. It creates it when it is missing and kiln may; a policy of that name that
// does not say so is an error, never overwritten.
func (c *Runtime) EnsureNetworkPolicy(ctx context.Context, name string) (created bool, err error) {
	want := DenyAllPolicy(c.ns, name)
	got, err := c.network.NetworkPolicies(c.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := c.network.NetworkPolicies(c.ns).Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return false, fmt.Errorf("the NetworkPolicy %s/%s that closes the sandboxes' network is missing, and creating it failed (apply deploy/k8s/manifests/networkpolicy.yaml): %w", c.ns, name, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("cannot read the NetworkPolicy %s/%s that closes the sandboxes' network (kiln's Role must allow get on networkpolicies): %w", c.ns, name, err)
	}
	if !deniesAll(got) {
		return false, fmt.Errorf("the NetworkPolicy %s/%s does not deny all traffic of the Pods labelled %s=true: fix or delete it (deploy/k8s/manifests/networkpolicy.yaml)", c.ns, name, sandbox.LabelManaged)
	}
	return false, nil
}

// DenyAllPolicy is the NetworkPolicy that closes every kiln sandbox's network: it
// selects them all and allows no traffic in either direction.
func DenyAllPolicy(namespace, name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{sandbox.LabelService: "kiln"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{sandbox.LabelManaged: "true"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// deniesAll reports whether a policy selects every kiln sandbox (and maybe more) and
// allows nothing.
func deniesAll(p *networkingv1.NetworkPolicy) bool {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set{sandbox.LabelManaged: "true"}) {
		return false
	}
	in, out := false, false
	for _, t := range p.Spec.PolicyTypes {
		in = in || t == networkingv1.PolicyTypeIngress
		out = out || t == networkingv1.PolicyTypeEgress
	}
	return in && out && len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0
}
