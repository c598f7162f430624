package session

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// Output is one rich output of a run, in the shape of Jupyter's display_data and
// execute_result messages: what the code displayed, or its last value, as a MIME
// bundle. A figure the run showed is one too, its PNG in Data["image/png"].
type Output struct {
	Type     string                     `json:"type"` // "display_data" or "execute_result"
	Data     map[string]json.RawMessage `json:"data"`
	Metadata map[string]json.RawMessage `json:"metadata"`
	// Figure names a figure's PNG among the run's files; it is not part of the bundle.
	Figure string `json:"-"`
}

// rawOutput is an output as the REPL sends it: a figure names its PNG among the run's
// files instead of carrying it (protocol.Response.Outputs).
type rawOutput struct {
	Output
	Figure string `json:"figure,omitempty"`
}

// decodeOutputs reads a run's outputs (a JSON array) and puts each figure's PNG in its
// bundle, from png (a figure's bytes by its name); a figure whose bytes are not there
// (the file was over a limit) keeps its text alone.
func decodeOutputs(raw json.RawMessage, png func(name string) []byte) ([]Output, error) {
	if len(raw) == 0 {
		return []Output{}, nil
	}
	var items []rawOutput
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("rich outputs: %w", err)
	}
	out := make([]Output, 0, len(items))
	for _, it := range items {
		out = append(out, it.fill(png))
	}
	return out, nil
}

// decodeOutput reads one output event's.
func decodeOutput(raw json.RawMessage, png func(name string) []byte) (Output, error) {
	var it rawOutput
	if err := json.Unmarshal(raw, &it); err != nil {
		return Output{}, fmt.Errorf("rich output: %w", err)
	}
	return it.fill(png), nil
}

func (it rawOutput) fill(png func(string) []byte) Output {
	o := it.Output
	o.Figure = it.Figure
	if o.Data == nil {
		o.Data = map[string]json.RawMessage{}
	}
	if o.Metadata == nil {
		o.Metadata = map[string]json.RawMessage{}
	}
	if it.Figure != "" {
		if b := png(it.Figure); b != nil {
			enc, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
			o.Data["image/png"] = enc
		}
	}
	return o
}
