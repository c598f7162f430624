package replicatest

import (
	"context"
	"sync"
	"time"

	"github.com/kilnsh/kiln/replica"
)

// Directory is an in-memory replica directory with replica.Directory's rules, shared by
// the replicas of a test, each of which sees it through As. Claims and announcements
// never expire, and no replica drains: a test says who is up with Announce and Withdraw.
type Directory struct {
	mu    sync.Mutex
	peers map[string]string // instance → URL
	own   map[string]string // key → instance
}

// New returns an empty Directory.
func New() *Directory {
	return &Directory{peers: map[string]string{}, own: map[string]string{}}
}

// As returns the directory as the replica instance sees it.
func (d *Directory) As(instance string) replica.Peers { return view{d, instance} }

// Announce says that the replica instance is up, reached at url.
func (d *Directory) Announce(instance, url string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.peers[instance] = url
}

// Withdraw says that the replica instance is gone.
func (d *Directory) Withdraw(instance string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.peers, instance)
}

// SetOwner makes instance the owner of key, whatever held it.
func (d *Directory) SetOwner(key, instance string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.own[key] = instance
}

// OwnerOf returns the instance that holds key, up or not; "" for none.
func (d *Directory) OwnerOf(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.own[key]
}

type view struct {
	d        *Directory
	instance string
}

func (v view) Claim(_ context.Context, key string, _ time.Duration) (string, string, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if cur, ok := v.d.own[key]; ok && cur != v.instance {
		if url := v.d.peers[cur]; url != "" {
			return url, cur, nil
		}
	}
	v.d.own[key] = v.instance
	return "", v.instance, nil
}

func (v view) Owner(_ context.Context, key string) (string, string, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	cur := v.d.own[key]
	if cur == "" || cur == v.instance || v.d.peers[cur] == "" {
		return "", "", nil
	}
	return v.d.peers[cur], cur, nil
}

func (v view) Peer(_ context.Context, instance string) (string, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	return v.d.peers[instance], nil
}

func (v view) TakeOver(_ context.Context, key, gone string, _ time.Duration) (bool, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if v.d.own[key] != gone {
		return false, nil
	}
	v.d.own[key] = v.instance
	return true, nil
}

func (v view) Release(_ context.Context, key string) error {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if v.d.own[key] == v.instance {
		delete(v.d.own, key)
	}
	return nil
}
