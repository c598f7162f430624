// Package live keeps the sandboxes of live sessions: between a session's calls its
// sandbox stays bound to it, so that the next call runs in the same interpreter, with no
// restore and no new sandbox. The Registry owns those sandboxes: it lends a session's to
// one call at a time, takes it back, and ends it when it has been idle too long, has
// lived too long, when the cap needs room (the least recently used first), when it
// died, or at shutdown. The session layer decides what a call does with it; the
// session's stored state stays the durable copy, so that nothing ends with a sandbox.
package live
