// Package protocol is the codec of the wire protocol between kiln and the REPL server
// inside a sandbox (docs/protocol.md): delimiter-framed JSON messages, the ready
// handshake, requests and responses, and their validation. It does no I/O of its own
// beyond the io.Writer and byte slices it is given.
package protocol
