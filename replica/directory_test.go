package replica_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kilnsh/kiln/replica"
	"github.com/kilnsh/kiln/test/kilntest"
)

// redisClient connects to the Redis server at url for the test's life.
func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("ping redis: %v", err)
	}
	return c
}

// Replicas find each other and their claims in the Redis they share: a claim stays
// with an owner that is up, passes to the next claimer once the owner is gone, and is
// released only by its owner.
func TestDirectory(t *testing.T) {
	url := kilntest.StartRedis(t)
	c := redisClient(t, url)
	a, b := replica.NewDirectory(c, "kiln:test:", "a", "http://a:8080"), replica.NewDirectory(c, "kiln:test:", "b", "http://b:8080")
	ctx := t.Context()
	if err := a.Announce(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.Announce(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if url, owner, err := a.Claim(ctx, "s:1", time.Minute); err != nil || url != "" || owner != "a" {
		t.Fatalf("a claims a free key: %q %q %v", url, owner, err)
	}
	if url, owner, err := b.Claim(ctx, "s:1", time.Minute); err != nil || url != "http://a:8080" || owner != "a" {
		t.Fatalf("b claims a's key: %q %q %v, want a's URL", url, owner, err)
	}
	if url, owner, _ := b.Owner(ctx, "s:1"); url != "http://a:8080" || owner != "a" {
		t.Fatalf("owner seen by b: %q %q", url, owner)
	}
	if url, _, _ := a.Owner(ctx, "s:1"); url != "" {
		t.Fatalf("owner seen by a itself: %q, want none", url)
	}
	if err := b.Release(ctx, "s:1"); err != nil {
		t.Fatal(err)
	}
	if url, _, _ := b.Owner(ctx, "s:1"); url != "http://a:8080" {
		t.Fatalf("b released a's claim: owner now %q", url)
	}
	// b could not reach a: it takes over what a holds, and only that.
	if _, _, err := a.Claim(ctx, "s:3", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TakeOver(ctx, "s:3", "a", time.Minute); err != nil || !ok {
		t.Fatalf("b takes over s:3 from a: %v %v", ok, err)
	}
	if ok, _ := a.TakeOver(ctx, "s:3", "c", time.Minute); ok {
		t.Error("a took over from c a key c does not hold")
	}
	if url, owner, _ := a.Owner(ctx, "s:3"); owner != "b" || url != "http://b:8080" {
		t.Errorf("after the take-over a sees s:3 owned by %q at %q, want b", owner, url)
	}
	// a drains: its sessions pass to the next claimer, and it is still reached for
	// what it runs; once withdrawn, it is gone.
	if _, _, err := a.Claim(ctx, "x:run", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Drain(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if url, owner, err := b.Claim(ctx, "s:1", time.Minute); err != nil || url != "" || owner != "b" {
		t.Fatalf("b claims a draining replica's session: %q %q %v, want it b's", url, owner, err)
	}
	if url, owner, _ := b.Owner(ctx, "x:run"); url != "http://a:8080" || owner != "a" {
		t.Errorf("a draining replica's run is seen at %q (%q), want a's URL", url, owner)
	}
	if p, _ := b.Peer(ctx, "a"); p != "http://a:8080" {
		t.Errorf("a draining replica is reached at %q", p)
	}
	if err := a.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if url, _, _ := b.Owner(ctx, "x:run"); url != "" {
		t.Fatalf("a withdrew, and b still sees it own x:run at %q", url)
	}
	if p, _ := b.Peer(ctx, "a"); p != "" {
		t.Errorf("a withdrawn replica still has a URL: %q", p)
	}
	// A claim and an announcement expire by themselves.
	if err := a.Announce(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Claim(ctx, "x:2", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	if p, _ := b.Peer(ctx, "a"); p != "" {
		t.Errorf("a's announcement outlived its TTL: %q", p)
	}
	if url, owner, _ := b.Claim(ctx, "x:2", time.Minute); url != "" || owner != "b" {
		t.Errorf("an expired claim held: %q %q", url, owner)
	}
}

// The directory's keys are read by every replica sharing the server, whatever its
// version: their names and values stay as they are.
func TestDirectoryKeys(t *testing.T) {
	c := redisClient(t, kilntest.StartRedis(t))
	const prefix = "kiln:"
	d := replica.NewDirectory(c, prefix, "a", "http://a:8080")
	ctx := t.Context()
	get := func(key string) string {
		t.Helper()
		v, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v
	}
	if err := d.Announce(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, want := get("kiln:peer:a"), "http://a:8080"; got != want {
		t.Errorf("peer key holds %q, want %q", got, want)
	}
	if _, _, err := d.Claim(ctx, "s:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, want := get("kiln:own:s:1"), "a"; got != want {
		t.Errorf("claim key holds %q, want %q", got, want)
	}
	if err := d.Drain(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, want := get("kiln:peer:a"), "draining http://a:8080"; got != want {
		t.Errorf("a draining replica's peer key holds %q, want %q", got, want)
	}
	// Another replica's claim and announcement are read from the same keys.
	if err := c.Set(ctx, "kiln:peer:b", "http://b:8080", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "kiln:own:x:1", "b", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if url, owner, err := d.Owner(ctx, "x:1"); err != nil || url != "http://b:8080" || owner != "b" {
		t.Errorf("Owner(x:1) = %q, %q, %v, want b's", url, owner, err)
	}
}
