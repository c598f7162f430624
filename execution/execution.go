// Package execution is the vocabulary every front end (REST, MCP, Jupyter) shares for
// one run of code: what a client may ask of it (Request), how it ended (the statuses),
// the languages and what a failed run leaves of the state. The executor's plumbing (the
// sandbox a run goes to, its state base, its egress) is the executor's own
// (executor.Request), filled by the session layer alone.
package execution

import (
	"regexp"
	"strings"
	"time"

	"github.com/kilnsh/kiln/protocol"
)

// What a failed run leaves of the state (Request.OnError).
const (
	OnErrorKeep     = "keep"
	OnErrorRollback = "rollback"
)

// How a run ended, as the API reports it.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusTimeout     = "timeout"
	StatusOOM         = "oom"
	StatusSandboxDied = "sandbox_died"
	StatusCancelled   = "cancelled"
)

// The languages every kiln image's REPL runs itself. The others are whatever the
// sandboxes' ready frames list: kiln has no table of them.
const (
	LangPython = "python"
	LangBash   = "bash"
)

// langName is what a language's name may look like: js, cpp, f90, c++, c#.
var langName = regexp.MustCompile(`^[a-z][a-z0-9+#_-]{0,15}$`)

// LangName maps what a client calls a language to kiln's name: the aliases of python and
// bash (the empty name is python), and any other name, lower-cased, as it is; whether a
// sandbox runs it is the pools' to say. false when it cannot be a name.
func LangName(lang string) (string, bool) {
	switch lang = strings.ToLower(lang); lang {
	case "", "py", "python", "python3":
		return LangPython, true
	case "bash", "sh":
		return LangBash, true
	}
	return lang, langName.MatchString(lang)
}

// Request is what a client may ask of one run.
type Request struct {
	Lang         string // a name from LangName: LangPython, LangBash, or one a pool runs
	Code         string
	Args         []string
	State        []byte // the state blob to restore (stateless mode), or nil
	CaptureState bool
	// OnError chooses what a run that does not end ok leaves of the state: OnErrorKeep (what
	// it bound before the error) or OnErrorRollback (the state it was given); empty means
	// the configured default.
	OnError string
	// PlainPython runs a Python cell in Python's syntax alone, without IPython's
	// (magics, !cmd, obj?) and its history. ReadOnly marks kiln's own read of a live
	// namespace (a completion): it binds nothing and counts as no cell.
	PlainPython bool
	ReadOnly    bool
	Timeout     time.Duration // zero means the default; clamped to the limits
	// ExecutionID names the run for a cancel; a fresh id when empty.
	ExecutionID string
	// MilliCPU and MemoryMB are the sandbox's CPU (thousandths of a core) and memory the
	// request asks for; 0 is the default.
	MilliCPU, MemoryMB int64
	// Tools are the client's tools the code may call. When the code waits on calls,
	// OnToolCalls gets them (it must not block for long) and the run waits, its clock
	// stopped, until they are answered or the tool result timeout passes.
	Tools       []protocol.Tool
	OnToolCalls func(ToolCalls)
}

// ToolCalls is a pause of a run with tools: the calls its code made together, which
// the client answers. Token is the pause's secret: single use, it names this pause only.
type ToolCalls struct {
	Round int // 1 for the run's first pause
	Calls []protocol.ToolCall
	Token string
}
