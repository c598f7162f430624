// Package observability holds black-box tests of kiln's operational surface against a
// real kiln process and the real Docker daemon: the metrics that the Grafana dashboard
// and the Prometheus alerts query exist on a live /metrics, the dashboard page renders
// live numbers in headless Chromium, /health/ready turns 503 when the daemon freezes and
// recovers by itself, and the Compose deployment serves an execution.
package observability
