// Package pool keeps a number of sandboxes warm and hands each out exactly once. It
// knows nothing of Docker: a Factory makes sandboxes and a Sandbox can tell when it has
// died and remove itself. Checked-out sandboxes are never returned to the pool; they
// are removed in the background and replaced.
package pool
