// Package pool keeps a number of sandboxes warm and hands each out exactly once, or
// keeps it for a live session until it is given back. It knows sandboxes only through
// the sandbox package's contract: a Starter (any sandbox.Runtime) makes them from the
// pool's sandbox.Spec, and a sandbox can tell when it has died and remove itself.
// Checked-out sandboxes are never returned to the pool; they are removed in the
// background and replaced. A Set lends from several pools by language, as each pool's
// sandboxes said in their handshakes. The Reaper removes this instance's sandboxes that
// nobody holds.
package pool
