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
