// Package metrics owns kiln's Prometheus instrumentation: one private registry with
// every kiln_ metric, the Go and process collectors, and the small adapters that feed
// it. Metrics implements pool.Observer and api.Observer, wraps an execution runner as
// a decorator (so the executor itself knows nothing about metrics), reads the gauges
// of the pools and of the live sessions at scrape time, and keeps a short ring of
// recent failed executions for the dashboard. Labels are bounded sets (status, phase,
// reason, route pattern): never a session, a user, a container id or anything the
// user's code produced.
package metrics
