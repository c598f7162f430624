// Package docker is kiln's only user of the Docker Engine SDK. It turns a Spec into a
// hardened sandbox container, runs the create → attach → wait → start sequence, holds
// the one attach connection each sandbox has for its whole life, demultiplexes that
// stream with a bounded reader of its own, and kills and removes containers, including
// the orphans a previous kiln left behind.
package docker
