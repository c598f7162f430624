package api_test

import (
	"net/http"
	"testing"

	"github.com/kilnsh/kiln"
)

// TestMalformedPathIDs: an id in a path that is no kiln id is a 404 in the envelope,
// whichever route it is on, as an id that names nothing is.
func TestMalformedPathIDs(t *testing.T) {
	const id = "aaaaaaaaaaaaaaaaaaaaa"
	h := newServer(t)
	for _, r := range []struct{ method, path string }{
		{"POST", "/sessions/x/fork"},
		{"POST", "/sessions/" + id + "x/fork"},
		{"GET", "/sessions/a.b"},
		{"DELETE", "/sessions/" + id[:20]},
		{"GET", "/state/x"},
		{"POST", "/state/x"},
		{"GET", "/state/x/info"},
		{"DELETE", "/state/x"},
		{"GET", "/sessions/x/objects/" + id},
		{"DELETE", "/files/" + id + "/x"},
		{"POST", "/executions/x/cancel"},
	} {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			checkError(t, serve(t, h, r.method, r.path, "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
		})
	}
}
