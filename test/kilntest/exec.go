package kilntest

import "encoding/json"

// ExecResponse is the body of a 200 from POST /exec.
type ExecResponse struct {
	SessionID string  `json:"session_id"`
	Status    string  `json:"status"`
	ExitCode  int     `json:"exit_code"`
	Stdout    string  `json:"stdout"`
	Stderr    string  `json:"stderr"`
	Error     *string `json:"error"`
	Result    *string `json:"result"`
	Files     []File  `json:"files"`
	// Outputs are the rich outputs (docs/api.md, Outputs).
	Outputs   []Output `json:"outputs"`
	Truncated bool     `json:"truncated"`
	State     *string  `json:"state"`
	HasState  bool     `json:"has_state"`
	// StatePending: the call answered before its state was stored (docs/api.md).
	StatePending bool    `json:"state_pending"`
	StateSize    int     `json:"state_size"`
	StateError   *string `json:"state_error"`
	// DeletedFiles and RuntimeStatus: see docs/api.md.
	DeletedFiles  []string `json:"deleted_files"`
	RuntimeStatus string   `json:"runtime_status"`
	Timing        struct {
		QueueMS float64 `json:"queue_ms"`
		ExecMS  float64 `json:"exec_ms"`
		TotalMS float64 `json:"total_ms"`
	} `json:"timing"`
	// Error envelope fields, set on non-200 answers.
	Code    string `json:"-"`
	Message string `json:"message"`
}

// Output is one rich output: a display_data or an execute_result.
type Output struct {
	Type     string                     `json:"type"`
	Data     map[string]json.RawMessage `json:"data"`
	Metadata map[string]json.RawMessage `json:"metadata"`
}

// Text returns a text MIME type's content, "" without it.
func (o Output) Text(mime string) string {
	var s string
	_ = json.Unmarshal(o.Data[mime], &s)
	return s
}

// File is a file listed in an exec response.
type File struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	SessionID   string `json:"session_id"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
}

// ErrorBody is the API's error envelope.
type ErrorBody struct {
	Error             string `json:"error"`
	Message           string `json:"message"`
	RequestID         string `json:"request_id"`
	RetryAfterSeconds int    `json:"retry_after_seconds"`
}

// Str returns *p, or "<nil>".
func Str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
