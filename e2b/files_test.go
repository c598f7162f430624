package e2b

import (
	"net/http"
	"testing"
	"time"
)

func TestOnlyGzip(t *testing.T) {
	for accept, want := range map[string]bool{
		"gzip": true, "GZIP": true, "gzip;q=1": true,
		"": false, "gzip, deflate": false, "br, gzip, deflate": false, "gzip;q=0": false, "identity": false,
	} {
		if got := onlyGzip(accept); got != want {
			t.Errorf("onlyGzip(%q) = %v, want %v", accept, got, want)
		}
	}
}

func TestMetadataOfKeepsKeysInLowerCase(t *testing.T) {
	hdr := http.Header{}
	hdr.Set("X-Metadata-author", "ada") // made canonical: X-Metadata-Author
	hdr.Set("X-Metadata-", "no key")
	hdr.Set("Content-Type", "text/plain")
	got := metadataOf(hdr)
	if len(got) != 1 || got["author"] != "ada" {
		t.Fatalf("metadataOf = %v, want map[author:ada]", got)
	}
	if metadataOf(http.Header{"Accept": {"*/*"}}) != nil {
		t.Fatal("an upload without metadata headers has metadata")
	}
}

func TestAPageMarkFollowsOnInEitherOrder(t *testing.T) {
	now := time.Now()
	a := &box{id: "a", started: now}
	b := &box{id: "b", started: now.Add(time.Second)}
	m, ok := parseMark(markOf(a).String())
	if !ok || m != markOf(a) {
		t.Fatalf("parseMark(%q) = %v, %v", markOf(a).String(), m, ok)
	}
	if !m.before(b, false) || m.before(a, false) {
		t.Error("oldest first: after a comes b, and not a again")
	}
	if mb := markOf(b); !mb.before(a, true) || mb.before(b, true) {
		t.Error("newest first: after b comes a, and not b again")
	}
	for _, bad := range []string{"", "12", "x.a", "12."} {
		if _, ok := parseMark(bad); ok {
			t.Errorf("parseMark(%q) took a token kiln never gives", bad)
		}
	}
}
