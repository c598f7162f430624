// Package kube is kiln's Kubernetes runtime (RUNTIME=kubernetes) and its only user of
// client-go. It turns a sandbox.Spec into a hardened sandbox Pod, waits for it to run
// through one watch of this instance's Pods, starts the REPL in it through the API
// server's exec (WebSocket, falling back to SPDY) and gives that session to the shared
// sandbox.Conn as byte streams, tells how a REPL exited (its code, the memory cgroup's
// out-of-memory count), removes Pods with no grace, sweeps this instance's orphans, and
// checks the NetworkPolicy that closes the sandboxes' network.
//
// Why exec and not attach to the container's own process: a Pod's stdout is written by the
// container runtime to the node's disk (kubectl logs), and counts against the Pod's
// ephemeral storage. Through it would go every output, state and file of every run. An
// exec's streams go to the API server alone.
package kube
