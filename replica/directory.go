package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Directory is where replicas of kiln that share a Redis server find each other and
// what each of them owns: a live session, a run under way, an MCP session. Keys, under
// the prefix of the store that shares the server (store.Redis.Client):
//
//	peer:<instance>   the URL the replica is reached at (its ADVERTISE_URL), after
//	                  "draining " while it drains; expires unless the replica
//	                  announces itself again
//	own:<key>         the instance that owns <key>; expires unless claimed again
//
// An owner whose peer key has expired is gone: its claims count for nothing, and the
// next replica to claim them takes them over. A draining owner keeps what it runs (its
// runs' continuations and cancels still reach it) but gives its sessions up to the next
// claimer.
type Directory struct {
	client   *redis.Client
	prefix   string
	instance string
	url      string
	draining atomic.Bool
}

// drainingMark starts the announcement of a draining replica.
const drainingMark = "draining "

// The claim of an owned key, in one step: it stays with a live other replica, or
// becomes this one's. KEYS[1] own:<key>; ARGV: instance, ttl in ms, the peer key prefix.
// It answers {owner, url}: url is empty when the owner is the caller. A draining
// owner's claim passes to the caller.
const luaClaim = `
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  local url = redis.call('GET', ARGV[3] .. cur)
  if url and string.sub(url, 1, 9) ~= 'draining ' then return {cur, url} end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[1], ''}
`

// KEYS[1] own:<key>; ARGV[1] instance. Deletes the claim only if it is the caller's.
const luaRelease = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`

// KEYS[1] own:<key>; ARGV: the owner that cannot be reached, instance, ttl in ms.
// Takes the claim over only if the unreachable owner still holds it.
const luaTakeOver = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`

// KEYS[1] peer:<instance>; ARGV: its URL, and that URL marked draining. Deletes the
// announcement only if it is the caller's.
const luaWithdraw = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
`

// KEYS[1] own:<key>; ARGV: instance, the peer key prefix. Answers {owner, url} of an
// owner that is another replica and is announced, {”, ”} otherwise.
const luaOwner = `
local cur = redis.call('GET', KEYS[1])
if not cur or cur == ARGV[1] then return {'', ''} end
local url = redis.call('GET', ARGV[2] .. cur)
if not url then return {'', ''} end
return {cur, url}
`

var (
	scriptOwner    = redis.NewScript(luaOwner)
	scriptWithdraw = redis.NewScript(luaWithdraw)
	scriptTakeOver = redis.NewScript(luaTakeOver)
	scriptClaim    = redis.NewScript(luaClaim)
	scriptRelease  = redis.NewScript(luaRelease)
)

// NewDirectory returns the directory of the replicas sharing client's Redis server, its
// keys under prefix, as seen by the replica instance, reached at url. The client stays
// its owner's to close.
func NewDirectory(client *redis.Client, prefix, instance, url string) *Directory {
	return &Directory{client: client, prefix: prefix, instance: instance, url: url}
}

// Announce says that this replica is up and reached at its URL, for ttl; once Drain
// has been called, that it drains.
func (d *Directory) Announce(ctx context.Context, ttl time.Duration) error {
	value := d.url
	if d.draining.Load() {
		value = drainingMark + d.url
	}
	if err := d.client.Set(ctx, d.prefix+"peer:"+d.instance, value, ttl).Err(); err != nil {
		return fmt.Errorf("announce replica: %w", err)
	}
	return nil
}

// Drain says, from now on, that this replica drains: its sessions go to the next
// replica that claims them, while its runs finish here.
func (d *Directory) Drain(ctx context.Context, ttl time.Duration) error {
	d.draining.Store(true)
	return d.Announce(ctx, ttl)
}

// Withdraw says that this replica is gone: its claims count for nothing from now on.
// An announcement with another URL (the instance id restarted elsewhere) stays.
func (d *Directory) Withdraw(ctx context.Context) error {
	if err := scriptWithdraw.Run(ctx, d.client, []string{d.prefix + "peer:" + d.instance}, d.url, drainingMark+d.url).Err(); err != nil {
		return fmt.Errorf("withdraw replica: %w", err)
	}
	return nil
}

// Claim makes this replica the owner of key for ttl, unless another replica that is up
// owns it: then it returns that replica's URL and instance, and changes nothing.
func (d *Directory) Claim(ctx context.Context, key string, ttl time.Duration) (url, owner string, err error) {
	res, err := scriptClaim.Run(ctx, d.client, []string{d.prefix + "own:" + key},
		d.instance, max(ttl.Milliseconds(), 1), d.prefix+"peer:").StringSlice()
	if err != nil {
		return "", "", fmt.Errorf("claim %s: %w", key, err)
	}
	if len(res) != 2 {
		return "", "", fmt.Errorf("claim %s: unexpected answer %q", key, res)
	}
	return res[1], res[0], nil
}

// TakeOver makes this replica the owner of key for ttl if gone, an owner this replica
// could not reach, still holds it; it reports whether it did.
func (d *Directory) TakeOver(ctx context.Context, key, gone string, ttl time.Duration) (bool, error) {
	n, err := scriptTakeOver.Run(ctx, d.client, []string{d.prefix + "own:" + key}, gone, d.instance, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, fmt.Errorf("take over %s: %w", key, err)
	}
	return n == 1, nil
}

// Release gives up this replica's claim of key; another replica's claim stays.
func (d *Directory) Release(ctx context.Context, key string) error {
	if err := scriptRelease.Run(ctx, d.client, []string{d.prefix + "own:" + key}, d.instance).Err(); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// Owner returns the URL and instance of the replica that owns key, if that is another
// replica and it is up; empty strings otherwise. One round trip: a script reads the
// claim and the owner's announcement.
func (d *Directory) Owner(ctx context.Context, key string) (url, owner string, err error) {
	res, err := scriptOwner.Run(ctx, d.client, []string{d.prefix + "own:" + key}, d.instance, d.prefix+"peer:").StringSlice()
	if err != nil {
		return "", "", fmt.Errorf("owner of %s: %w", key, err)
	}
	if len(res) != 2 {
		return "", "", fmt.Errorf("owner of %s: unexpected answer %q", key, res)
	}
	return strings.TrimPrefix(res[1], drainingMark), res[0], nil
}

// Peer returns the URL of the replica instance, draining or not, or "" when it is not up.
func (d *Directory) Peer(ctx context.Context, instance string) (string, error) {
	url, err := d.client.Get(ctx, d.prefix+"peer:"+instance).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("replica %s: %w", instance, err)
	}
	return strings.TrimPrefix(url, drainingMark), nil
}
