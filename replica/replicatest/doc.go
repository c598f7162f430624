// Package replicatest holds an in-memory replica directory, for the tests of forwarding
// (in package replica, and the HTTP side in package api) that need several replicas
// without a Redis server.
package replicatest
