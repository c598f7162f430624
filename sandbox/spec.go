package sandbox

import "slices"

// Spec is everything that decides what a sandbox is, whichever runtime makes it. It comes
// from kiln's configuration only; no request field reaches it.
type Spec struct {
	Image string
	// Env is the REPL's environment, NAME=value: an allowlist, nothing of kiln's own.
	// Nil is DefaultEnv.
	Env       []string
	MemoryMB  int64 // covers the memory-backed /tmp and /mnt/data too; no swap
	MilliCPU  int64 // the CPU limit, in thousandths of a core
	PidsLimit int64 // processes at once, where the runtime can bound them
	TmpMB     int64 // size of /tmp
	DataMB    int64 // size of /mnt/data, and the largest file the REPL may write
	NoFile    int64 // open files
	// PerCall, when set, keeps no warm REPL: each request starts a fresh one with
	// PerCallCommand (REPL_ENABLED=false).
	PerCall bool
	// Egress, when set, means the REPL opens its proxy port (KILN_EGRESS in Env): a
	// runtime that can give the sandbox a faster way to kiln's proxy than net frames on
	// the channel (Docker: a Unix socket of the sandbox's own) does.
	Egress bool
}

// Environment returns the REPL's environment: Env, or DefaultEnv when it is nil.
func (s Spec) Environment() []string {
	if s.Env == nil {
		return DefaultEnv
	}
	return s.Env
}

// The commands a sandbox runs, the same on every runtime.
var (
	// REPLCommand starts the image's REPL, silent until the host's hello
	// (docs/protocol.md, Ready): a runtime whose output is not replayed to a late
	// reader loses nothing.
	REPLCommand = []string{"python3", "/opt/kiln/repl_server.py", "--await-hello"}
	// PerCallCommand starts a REPL for one request (Spec.PerCall): a fresh interpreter,
	// no pre-imports, one request, then exit.
	PerCallCommand = []string{"python3", "/opt/kiln/repl_server.py", "--once", "--no-preload", "--await-hello"}
	// IdleCommand is a sandbox's own process when its REPLs are started beside it: it only
	// keeps the sandbox running.
	IdleCommand = []string{"sleep", "infinity"}
)

// Labels kiln puts on every sandbox it creates, on every runtime: a NetworkPolicy
// selects LabelManaged, the sweeps LabelInstance.
const (
	LabelManaged  = "kiln.managed"
	LabelService  = "kiln.service"
	LabelInstance = "kiln.instance"
	LabelCreated  = "kiln.created-at"
)

// UID is the uid and gid sandboxes run as (the image's "sandbox" user).
const UID = 10001

// DataDir is where the REPL works and where the files of a run go in and out.
const DataDir = "/mnt/data"

// DefaultEnv is the environment of a sandbox unless the Spec sets one. What the image
// sets and this does not (its matplotlib backend, say) stays as the image has it.
var DefaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/tmp",
	"LANG=C.UTF-8",
	"PYTHONDONTWRITEBYTECODE=1",
}

// PreloadVar is the sandbox environment variable that tells the REPL which groups of
// modules to pre-import (docs/protocol.md); unset means all of them.
const PreloadVar = "KILN_PRELOAD"

// WarmHeapVar is the sandbox environment variable that tells the REPL how many MB to
// touch while it warms up, so that the request's big buffers find their pages.
const WarmHeapVar = "KILN_WARM_HEAP_MB"

// EgressSocketVar is the sandbox environment variable with the path of the Unix socket
// the REPL carries the code's connections over instead of net frames (Spec.Egress, on a
// runtime that can mount one); it falls back to frames when the socket cannot be reached.
const EgressSocketVar = "KILN_EGRESS_SOCKET"

// EgressPortVar is the sandbox environment variable with the port kiln itself listens on,
// on 127.0.0.1 in the sandbox's own network namespace, for the code's proxy connections
// (Spec.Egress, on a runtime that can open one: Docker with runc, kiln on the host). The
// REPL points the proxy variables at it and runs no relay and no forwarder.
const EgressPortVar = "KILN_EGRESS_PORT"

// EgressPort is that port: the sandbox's namespace is its own, so one port serves all.
const EgressPort = 3128

// RlimitsVar is the sandbox environment variable with the limits the REPL sets on itself
// where the runtime has no field for them ("nofile=1024,fsize=...,core=0").
const RlimitsVar = "KILN_RLIMITS"

// WithEnv returns DefaultEnv followed by extra, or nil (the default) when there is none.
func WithEnv(extra ...string) []string {
	if len(extra) == 0 {
		return nil
	}
	return append(slices.Clone(DefaultEnv), extra...)
}
