// Package replica lets several kilns behind one load balancer, sharing a store, answer
// any request. What lives in one replica's memory (a live session's interpreter, a run
// under way, an MCP session) is claimed by that replica in the Directory, and a request
// about it that reaches another replica is forwarded to the owner over HTTP, signed with
// the replicas' shared secret (Forwarder). An owner that is gone owns nothing: the
// request is served where it landed (a session resumes from its stored state). Clients
// never route.
//
// The package owns the directory (in the Redis server the replicas share), the
// signature of forwarded requests, and the proxy to an owner, with its transport. It
// knows nothing of routes: package api says which request is about what (Owned), and
// writes the answers of those that cannot be forwarded.
//
// Besides the store's Redis file, this is the one package that imports go-redis: the
// directory shares the store's client and key prefix (store.Redis.Client), and keeps its
// own keys (peer:, own:) under that prefix. The keys, their values and the signature are
// read by every replica of a deployment, of this version or the one before: they do not
// change.
package replica
