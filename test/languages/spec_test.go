package languages

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestSameHardeningInEveryPool: a polyglot sandbox is made exactly as a python one is
// (test/abuse checks every field of that spec on a python sandbox); only the image
// differs. HostConfig is compared whole, and the parts of Config that security.md lists.
func TestSameHardeningInEveryPool(t *testing.T) {
	settledPools(t)
	ids, err := kilntest.Containers(srv.Instance)
	if err != nil {
		t.Fatal(err)
	}
	if kilntest.OnKubernetes() {
		samePodSpecs(t, ids)
		return
	}
	type container struct {
		Config struct {
			Image           string
			User            string
			NetworkDisabled bool
			Labels          map[string]string
		}
		HostConfig json.RawMessage
	}
	byImage := map[string]container{}
	for _, id := range ids {
		out, err := kilntest.Docker("inspect", id)
		if err != nil && strings.Contains(out, "No such object") {
			continue // a used sandbox whose removal was still under way when listed
		}
		if err != nil {
			t.Fatalf("docker inspect %s: %v: %s", id, err, out)
		}
		var list []container
		if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 {
			t.Fatalf("docker inspect %s: %v", id, err)
		}
		byImage[list[0].Config.Image] = list[0]
	}
	py, okPy := byImage["kiln-python:latest"]
	poly, okPoly := byImage["kiln-polyglot:latest"]
	if !okPy || !okPoly {
		t.Fatalf("want a sandbox of each image among %d containers, got images %v", len(ids), len(byImage))
	}
	if string(py.HostConfig) != string(poly.HostConfig) {
		t.Errorf("HostConfig differs between the pools:\npython   %s\npolyglot %s", py.HostConfig, poly.HostConfig)
	}
	if py.Config.User != poly.Config.User || poly.Config.User == "" || !poly.Config.NetworkDisabled ||
		poly.Config.Labels["kiln.managed"] != "true" || poly.Config.Labels["kiln.instance"] != srv.Instance {
		t.Errorf("polyglot sandbox Config: user %q (python %q), network disabled %v, labels %v",
			poly.Config.User, py.Config.User, poly.Config.NetworkDisabled, poly.Config.Labels)
	}
}

// samePodSpecs is TestSameHardeningInEveryPool on Kubernetes: the Pods' specs are the same
// but for the image (test/abuse checks every field on a python Pod).
func samePodSpecs(t *testing.T, ids []string) {
	type pod struct {
		Metadata struct {
			Labels map[string]string
		}
		Spec map[string]any
	}
	byImage := map[string]pod{}
	for _, id := range ids {
		var p pod
		if err := kilntest.KubePod(id, &p); err != nil {
			if strings.Contains(err.Error(), "NotFound") {
				continue // a used sandbox whose removal was under way when listed
			}
			t.Fatal(err)
		}
		containers, _ := p.Spec["containers"].([]any)
		if len(containers) != 1 {
			t.Fatalf("pod %s has %d containers, want 1", id, len(containers))
		}
		c := containers[0].(map[string]any)
		image, _ := c["image"].(string)
		delete(c, "image")
		delete(p.Spec, "nodeName") // where the scheduler put it
		byImage[image] = p
	}
	py, okPy := byImage["kiln-python:latest"]
	poly, okPoly := byImage["kiln-polyglot:latest"]
	if !okPy || !okPoly {
		t.Fatalf("want a sandbox Pod of each image among %d, got images %v", len(ids), len(byImage))
	}
	a, _ := json.Marshal(py.Spec)
	b, _ := json.Marshal(poly.Spec)
	if string(a) != string(b) {
		t.Errorf("the Pod spec differs between the pools:\npython   %s\npolyglot %s", a, b)
	}
	if poly.Metadata.Labels["kiln.managed"] != "true" || poly.Metadata.Labels["kiln.instance"] != srv.Instance {
		t.Errorf("polyglot sandbox Pod labels %v", poly.Metadata.Labels)
	}
}
