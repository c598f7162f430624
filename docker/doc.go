// Package docker is kiln's Docker runtime and its only user of the Docker Engine SDK. It
// turns a sandbox.Spec into a hardened container, runs the create → attach → wait → start
// sequence, gives the attach connection (or a docker exec's, with no warm REPL) to the
// shared sandbox.Conn as byte streams, demultiplexing Docker's stream format with a
// bounded reader of its own, tells how a container exited (its code, the out-of-memory
// flag), and removes containers, the orphans of an earlier kiln included.
package docker
