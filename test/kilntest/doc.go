// Package kilntest starts real kiln processes for black-box tests and benchmarks: it
// builds cmd/kiln once, runs it on a loopback port of the kernel's choosing with the
// environment a test gives, waits until it is ready, and offers small HTTP and Docker
// helpers. Everything it starts it stops.
package kilntest
