package replica

import "time"

// Kind is a kind of thing one replica holds in memory, as the directory's keys name it
// ("<kind>:<id>"). The kinds' names are part of the keys every replica reads.
type Kind string

// The kinds of things a replica owns.
const (
	// Session is a live session: its interpreter runs on its owner.
	Session Kind = "s"
	// Run is an execution under way: its cancel, and a programmatic run's
	// continuations, go to the replica running it.
	Run Kind = "x"
	// Request is a programmatic request's id (LibreChat's X-LibreChat-Code-Request-ID):
	// its cancel goes to the replica that has the run it names.
	Request Kind = "r"
	// MCP is an MCP session (its Mcp-Session-Id).
	MCP Kind = "m"
)

// Key returns the directory's key of the thing of kind k named id.
func (k Kind) Key(id string) string { return string(k) + ":" + id }

// Owned is what a request is about, for routing (Forwarder.Owner): a thing of some Kind,
// or a replica the request names itself. The zero Owned is nothing: a request about it
// is served where it lands.
type Owned struct {
	kind     Kind
	id       string
	claim    bool
	instance string
}

// Of is the thing of kind named id: a request about it goes to its owner, if another
// replica that is up owns it.
func Of(kind Kind, id string) Owned { return Owned{kind: kind, id: id} }

// Claimed is the thing of kind named id, which a request about it claims for the
// replica it lands on when nobody owns it (a session's first call).
func Claimed(kind Kind, id string) Owned { return Owned{kind: kind, id: id, claim: true} }

// At is the replica instance, named by the request itself (a continuation token names
// the replica that runs its program).
func At(instance string) Owned { return Owned{instance: instance} }

// Key returns o's key in the directory; "" when o names a replica, or nothing.
func (o Owned) Key() string {
	if o.id == "" {
		return ""
	}
	return o.kind.Key(o.id)
}

// ttl is how long a claim of kind lasts without being claimed again.
func (c Config) ttl(kind Kind) time.Duration {
	switch kind {
	case Session:
		return c.SessionTTL
	case MCP:
		return c.MCPTTL
	default: // Run, Request
		return c.RunTTL
	}
}
