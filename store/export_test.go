package store

import (
	"context"
	"time"
)

// OpenRedisPrefix opens a Redis store whose keys start with prefix instead of "kiln:",
// so that tests sharing one server stay apart.
func OpenRedisPrefix(ctx context.Context, url, prefix string, ttl time.Duration, maxFileBytes int64) (*Redis, error) {
	return openRedis(ctx, url, prefix, ttl, maxFileBytes)
}

// KeyTTLs returns every key under the store's prefix with its time to live (negative
// for a key without one).
func (r *Redis) KeyTTLs(ctx context.Context) (map[string]time.Duration, error) {
	keys, err := r.client.Keys(ctx, r.prefix+"*").Result()
	if err != nil {
		return nil, err
	}
	ttls := make(map[string]time.Duration, len(keys))
	for _, k := range keys {
		if ttls[k], err = r.client.PTTL(ctx, k).Result(); err != nil {
			return nil, err
		}
	}
	return ttls, nil
}

// SweepObjects runs the sweep of unreferenced objects now, over objects written before
// olderThan.
func (r *Redis) SweepObjects(ctx context.Context, olderThan time.Time) (int, error) {
	return r.sweepObjects(ctx, olderThan)
}

// SHA256Hex is the store's hash of a blob, as object keys carry it.
func SHA256Hex(b []byte) string { return sha256Hex(b) }
