// Package helm checks kiln's Helm chart (deploy/helm/kiln) with the real helm binary:
// it lints, it renders what each configuration needs, it refuses what cannot work, and
// its Role is the one of the plain manifests. Its install into a cluster is checked by
// the integration suite on Kubernetes (test/integration/helm_test.go).
package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kilnsh/kiln/test/kilntest"
)

var chart = filepath.Join(kilntest.Root(), "deploy", "helm", "kiln")

func helm(t *testing.T, args ...string) (string, error) { return kilntest.RunHelm(t, args...) }

// object is one rendered manifest, as JSON would decode it.
type object map[string]any

func (o object) kind() string { return o["kind"].(string) }

// get walks a path of map keys and list indexes.
func (o object) get(path ...any) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := cur.(map[string]any)
			cur = m[k]
		case int:
			l, _ := cur.([]any)
			if k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

// render runs helm template with the given --set values and returns the objects by kind.
func render(t *testing.T, set ...string) map[string]object {
	t.Helper()
	args := []string{"template", "kiln", chart, "--namespace", "code"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", set, err, out)
	}
	objs := map[string]object{}
	for _, doc := range strings.Split(out, "\n---") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("a rendered document does not parse: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		if _, dup := objs[o.kind()]; dup {
			t.Fatalf("two %s objects rendered", o.kind())
		}
		objs[o.kind()] = o
	}
	return objs
}

// envOf returns the kiln container's env entries, by name, as their value or valueFrom.
func envOf(d object) map[string]any {
	env := map[string]any{}
	list, _ := d.get("spec", "template", "spec", "containers", 0, "env").([]any)
	for _, e := range list {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			env[m["name"].(string)] = v
		} else {
			env[m["name"].(string)] = m["valueFrom"]
		}
	}
	return env
}

func TestChartLints(t *testing.T) {
	for _, set := range [][]string{
		nil,
		{"replicaCount=3", "redis.url=redis://redis:6379/0", "s3.endpoint=http://minio:9000", "s3.bucket=kiln", "autoscaling.enabled=true"},
	} {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", set, err, out)
		}
	}
}

// One kiln, as the defaults have it: everything it needs, hardened, and nothing that
// only replicas need.
func TestChartDefaults(t *testing.T) {
	objs := render(t)
	for _, kind := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget"} {
		if objs[kind] == nil {
			t.Errorf("no %s rendered", kind)
		}
	}
	if objs["HorizontalPodAutoscaler"] != nil {
		t.Error("an autoscaler rendered with autoscaling off")
	}
	// The namespace the Role may create Pods in admits only restricted ones, kiln checks
	// that, and the namespace outlives the release.
	ns := objs["Namespace"]
	if ns.get("metadata", "name") != "code" || ns.get("metadata", "labels", "pod-security.kubernetes.io/enforce") != "restricted" ||
		ns.get("metadata", "annotations", "helm.sh/resource-policy") != "keep" {
		t.Errorf("the Namespace: %v, want code, labelled to enforce restricted, kept", ns["metadata"])
	}
	if got := objs["ConfigMap"].get("data", "KUBE_REQUIRE_RESTRICTED"); got != "true" {
		t.Errorf("KUBE_REQUIRE_RESTRICTED %v, want true", got)
	}
	if objs := render(t, "namespace.create=false"); objs["Namespace"] != nil {
		t.Error("a Namespace rendered with namespace.create=false")
	}
	d := objs["Deployment"]
	if got := d.get("spec", "strategy", "type"); got != "Recreate" {
		t.Errorf("strategy %v, want Recreate for one kiln with its sessions in its Pod", got)
	}
	for path, want := range map[string]any{
		"runAsNonRoot":           true,
		"seccompProfile.type":    "RuntimeDefault",
		"enableServiceLinks":     false,
		"serviceAccountName":     "kiln",
		"readOnlyRootFilesystem": true,
	} {
		var got any
		switch path {
		case "runAsNonRoot":
			got = d.get("spec", "template", "spec", "securityContext", "runAsNonRoot")
		case "seccompProfile.type":
			got = d.get("spec", "template", "spec", "securityContext", "seccompProfile", "type")
		case "enableServiceLinks", "serviceAccountName":
			got = d.get("spec", "template", "spec", path)
		case "readOnlyRootFilesystem":
			got = d.get("spec", "template", "spec", "containers", 0, "securityContext", path)
		}
		if got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	env := envOf(d)
	for _, name := range []string{"INSTANCE_ID", "KUBE_OWNER_POD"} {
		b, _ := json.Marshal(env[name])
		if !strings.Contains(string(b), "metadata.name") {
			t.Errorf("%s = %s, want the Pod's name", name, b)
		}
	}
	if _, ok := env["ADVERTISE_URL"]; ok {
		t.Error("ADVERTISE_URL set for a lone kiln")
	}
	cm := objs["ConfigMap"]
	for k, want := range map[string]string{"RUNTIME": "kubernetes", "KUBE_NAMESPACE": "code", "KUBE_NETWORK_POLICY": "kiln-sandboxes-deny-all"} {
		if got := cm.get("data", k); got != want {
			t.Errorf("ConfigMap %s = %v, want %q", k, got, want)
		}
	}
	if got := objs["NetworkPolicy"].get("spec", "podSelector", "matchLabels", "kiln.managed"); got != "true" {
		t.Errorf("the NetworkPolicy selects %v, want the sandboxes (kiln.managed=true)", got)
	}
	if s := objs["Secret"].get("stringData"); s != nil {
		if _, ok := s.(map[string]any)["PEER_SECRET"]; ok {
			t.Error("a peer secret for a lone kiln (kiln refuses PEER_SECRET without ADVERTISE_URL)")
		}
	}

	// The chart's Role is the plain manifests' Role: the same rules, nothing more.
	raw, err := os.ReadFile(filepath.Join(kilntest.Root(), "deploy", "k8s", "manifests", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifestRules any
	for _, doc := range strings.Split(string(raw), "\n---") {
		var o object
		if yaml.Unmarshal([]byte(doc), &o) == nil && o != nil && o.kind() == "Role" {
			manifestRules = o["rules"]
		}
	}
	if manifestRules == nil || !reflect.DeepEqual(objs["Role"]["rules"], manifestRules) {
		t.Errorf("the chart's Role rules %v differ from deploy/k8s/manifests/rbac.yaml's %v", objs["Role"]["rules"], manifestRules)
	}
}

// Replicas on a shared Redis: a rolling update, each announcing its Pod's address, with
// a generated peer secret; the bucket's settings where kiln reads them.
func TestChartReplicas(t *testing.T) {
	objs := render(t, "replicaCount=3", "redis.url=redis://:pw@redis:6379/0", "s3.endpoint=http://minio:9000", "s3.bucket=kiln-files",
		"s3.accessKeyID=AK", "s3.secretAccessKey=SK", "auth.apiKeys={k1,k2}")
	d := objs["Deployment"]
	if got := d.get("spec", "replicas"); got != float64(3) {
		t.Errorf("replicas %v, want 3", got)
	}
	if got := d.get("spec", "strategy", "type"); got != "RollingUpdate" {
		t.Errorf("strategy %v, want RollingUpdate", got)
	}
	env := envOf(d)
	if env["ADVERTISE_URL"] != "http://$(POD_IP):8080" {
		t.Errorf("ADVERTISE_URL = %v", env["ADVERTISE_URL"])
	}
	b, _ := json.Marshal(env["POD_IP"])
	if !strings.Contains(string(b), "status.podIP") {
		t.Errorf("POD_IP = %s, want the Pod's IP", b)
	}
	sec, _ := objs["Secret"].get("stringData").(map[string]any)
	if p, _ := sec["PEER_SECRET"].(string); len(p) < 32 {
		t.Errorf("PEER_SECRET %q, want a generated one of at least 32 characters", p)
	}
	for k, want := range map[string]string{"REDIS_URL": "redis://:pw@redis:6379/0", "API_KEYS": "k1,k2", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"} {
		if sec[k] != want {
			t.Errorf("Secret %s = %v, want %q", k, sec[k], want)
		}
	}
	cm := objs["ConfigMap"]
	if cm.get("data", "S3_ENDPOINT") != "http://minio:9000" || cm.get("data", "S3_BUCKET") != "kiln-files" {
		t.Errorf("the bucket's settings: %v", cm.get("data"))
	}
	if cm.get("data", "REDIS_URL") != nil {
		t.Error("REDIS_URL, which may hold a password, is in the ConfigMap")
	}

	auto := render(t, "redis.url=redis://redis:6379/0", "autoscaling.enabled=true", "autoscaling.maxReplicas=9")
	if auto["HorizontalPodAutoscaler"] == nil || auto["HorizontalPodAutoscaler"].get("spec", "maxReplicas") != float64(9) {
		t.Errorf("autoscaler: %v", auto["HorizontalPodAutoscaler"])
	}
	if auto["Deployment"].get("spec", "replicas") != nil {
		t.Error("the Deployment fixes replicas while the autoscaler owns them")
	}
}

// What cannot work is refused at render time, with the reason.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"replicaCount=2"}, "needs redis.url"},
		{[]string{"autoscaling.enabled=true"}, "needs redis.url"},
		{[]string{"s3.endpoint=http://minio:9000", "s3.bucket=b"}, "s3.endpoint needs redis.url"},
		{[]string{"redis.url=redis://r:6379/0", "s3.endpoint=http://minio:9000"}, "needs s3.bucket"},
	} {
		args := []string{"template", "kiln", chart}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template %v: err %v, output %q, want a refusal saying %q", c.set, err, out, c.want)
		}
	}
}
