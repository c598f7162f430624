package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/kilnsh/kiln/session"
)

// box is one held sandbox, as the control plane knows it.
type box struct {
	id       string
	template string
	owner    string // the caller's Principal
	token    string // envdAccessToken; empty when the sandbox is not secure
	metadata map[string]string
	envs     map[string]string
	held     *session.Held
	started  time.Time

	mu       sync.Mutex
	end      time.Time
	timer    *time.Timer
	watchers map[string]*watcher // the polled watchers, by id
}

func (b *box) endAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.end
}

// boxes is the table of this process's held sandboxes.
type boxes struct {
	mu       sync.Mutex
	m        map[string]*box
	reserved map[string]int // by owner: creates between reserve and add or unreserve
	closed   bool           // after close, add refuses
}

// reserve takes one of the owner's max places for a create under way, so that creates at
// once cannot together hold more than max.
func (t *boxes) reserve(owner string, max int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.reserved[owner]
	for _, b := range t.m {
		if b.owner == owner {
			n++
		}
	}
	if n >= max {
		return false
	}
	if t.reserved == nil {
		t.reserved = map[string]int{}
	}
	t.reserved[owner]++
	return true
}

// unreserve gives back a place reserve took, after the create added its box or failed.
func (t *boxes) unreserve(owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reserved[owner]--; t.reserved[owner] <= 0 {
		delete(t.reserved, owner)
	}
}

func (t *boxes) get(id string) *box {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// add enters b, unless the table is closed.
func (t *boxes) add(b *box) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.m == nil {
		t.m = map[string]*box{}
	}
	t.m[b.id] = b
	return true
}

// take removes the box from the table; the one caller that gets it ends it.
func (t *boxes) take(id string) *box {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[id]
	delete(t.m, id)
	return b
}

// signedFor returns the secure box whose token signed r (expired or not), a /files
// request of a URL that downloadUrl or uploadUrl made, or nil. With E2B_SANDBOX_URL set
// those URLs name no sandbox, so the signature, which only its token makes, names it.
func (t *boxes) signedFor(r *http.Request) *box {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.m {
		if b.token != "" && signedBy(r, b) {
			return b
		}
	}
	return nil
}

// owned returns the owner's boxes, oldest first, ties by id.
func (t *boxes) owned(owner string) []*box {
	t.mu.Lock()
	var out []*box
	for _, b := range t.m {
		if b.owner == owner {
			out = append(out, b)
		}
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].started.Equal(out[j].started) {
			return out[i].started.Before(out[j].started)
		}
		return out[i].id < out[j].id
	})
	return out
}

// close makes add refuse from now on and returns the boxes in the table.
func (t *boxes) close() []*box {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	out := make([]*box, 0, len(t.m))
	for _, b := range t.m {
		out = append(out, b)
	}
	return out
}

// newID is a sandbox id as E2B's look: lower-case letters and digits, fit for a host
// name's label, and unguessable (100 bits).
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var raw [20]byte
	_, _ = rand.Read(raw[:])
	out := make([]byte, len(raw))
	for i, c := range raw {
		out[i] = alphabet[int(c)%len(alphabet)]
	}
	return "i" + string(out)
}

func newToken() string {
	var raw [24]byte
	_, _ = rand.Read(raw[:])
	return hex.EncodeToString(raw[:])
}
