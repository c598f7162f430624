// Package replica lets several kilns behind one load balancer, sharing a store, answer
// any request. What lives in one replica's memory (a live session's interpreter, a run
// under way, an MCP session) is claimed by that replica in the Directory, kept in the
// Redis server the replicas share. Besides the store's Redis file, this is the one
// package that imports go-redis: the directory shares the store's client and key prefix
// (store.Redis.Client), and keeps its own keys (peer:, own:) under that prefix.
package replica
