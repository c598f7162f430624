package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kilnsh/kiln/health"
	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/pool"
)

type healthRuntime struct{}

func (healthRuntime) Name() string                                    { return "docker" }
func (healthRuntime) Ping(context.Context) error                      { return nil }
func (healthRuntime) ImageID(context.Context, string) (string, error) { return "sha256:abc", nil }

type healthPool pool.Stats

func (p healthPool) CanServe() bool    { return true }
func (p healthPool) Stats() pool.Stats { return pool.Stats(p) }
func (p healthPool) PoolStats() []pool.MemberStats {
	return []pool.MemberStats{{Name: "python", Languages: []string{"bash", "python"}, Stats: pool.Stats(p)}}
}

type healthExecutor struct{}

func (healthExecutor) Draining() bool { return false }

type healthLive live.Stats

func (l healthLive) Stats() live.Stats { return live.Stats(l) }

// TestDetailedMatchesOpenAPI serves /health/detailed from a real health.Checker and
// checks the body against the document's Detailed schema: every field it writes is
// declared, with its type, and every required one is there. With live sessions on and
// off, since the live object changes shape.
func TestDetailedMatchesOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	schema := doc.Components.Schemas["Detailed"]
	st := pool.Stats{Target: 2, Ready: 1, InUse: 1, Kept: 3, Counts: pool.Counts{Created: 6},
		Sandboxes: []pool.SandboxInfo{{ID: "0123456789ab", State: "ready", Age: 2 * time.Second}}}
	inUse := healthLive{Idle: 2, Busy: 1, Memory: 300 << 20, Max: 8, Counts: live.Counts{
		Calls:   map[string]int64{"new": 3, "reused": 7, "resumed": 1},
		Ended:   map[string]int64{"idle": 1, "capacity": 2},
		Flushes: map[string]int64{"stored": 4},
	}}
	tests := []struct {
		name     string
		live     health.Live
		wantLive map[string]any
	}{
		{"live sessions off", nil, map[string]any{"enabled": false}},
		{"live sessions on", inUse, map[string]any{
			"enabled": true, "idle": 2.0, "busy": 1.0, "max": 8.0, "memory_bytes": float64(300 << 20),
			"calls": map[string]any{"new": 3.0, "reused": 7.0, "resumed": 1.0},
			"ended": map[string]any{"idle": 1.0, "capacity": 2.0}, "flushes": map[string]any{"stored": 4.0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checker := &health.Checker{
				Runtime: healthRuntime{}, Pool: healthPool(st), Executor: healthExecutor{},
				Image: "kiln-python:latest", Images: map[string]string{"python": "kiln-python:latest"},
				Isolation: "runc", Repl: true, Store: "disk", Auth: true, Live: tt.live,
			}
			s := NewHarness(t, HarnessConfig{Keys: []string{"k"}, Health: checker})
			req := httptest.NewRequest(http.MethodGet, "/health/detailed", nil)
			req.Header.Set("X-API-Key", "k")
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET /health/detailed = %d, want 200: %s", rec.Code, rec.Body)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body: %v", err)
			}
			for _, problem := range conforms("Detailed", schema, body) {
				t.Error(problem)
			}
			if got := body["live"]; !reflect.DeepEqual(got, tt.wantLive) {
				t.Errorf("live: got %v, want %v", got, tt.wantLive)
			}
			if got := body["pool"].(map[string]any)["kept"]; got != 3.0 {
				t.Errorf("pool.kept: got %v, want 3", got)
			}
		})
	}
}

// conforms returns how v, decoded from JSON, departs from schema: the subset of JSON
// Schema the document's health schemas use (type, required, properties,
// additionalProperties, items, enum, const). A field the schema does not declare is
// a departure, so that the code cannot grow fields the document does not name.
func conforms(path string, schema any, v any) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		return []string{path + ": no schema"}
	}
	var problems []string
	if want, ok := s["type"]; ok && !hasType(schemaTypes(want), jsonType(v)) {
		return []string{fmt.Sprintf("%s: got %s %v, want type %v", path, jsonType(v), v, want)}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
		problems = append(problems, fmt.Sprintf("%s: got %v, want one of %v", path, v, enum))
	}
	if c, ok := s["const"]; ok && c != v {
		problems = append(problems, fmt.Sprintf("%s: got %v, want %v", path, v, c))
	}
	switch v := v.(type) {
	case map[string]any:
		required, _ := s["required"].([]any)
		for _, r := range required {
			if _, ok := v[r.(string)]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required %s missing", path, r))
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, declared := props[k]
			if !declared {
				sub, declared = s["additionalProperties"]
			}
			if !declared {
				problems = append(problems, fmt.Sprintf("%s: %s is not in the schema", path, k))
				continue
			}
			problems = append(problems, conforms(path+"."+k, sub, v[k])...)
		}
	case []any:
		for i, item := range v {
			problems = append(problems, conforms(fmt.Sprintf("%s[%d]", path, i), s["items"], item)...)
		}
	}
	return problems
}

func schemaTypes(t any) []string {
	if s, ok := t.(string); ok {
		return []string{s}
	}
	var out []string
	for _, x := range t.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// hasType reports whether a value of JSON type got is one of types: an integer is also
// a number.
func hasType(types []string, got string) bool {
	return slices.Contains(types, got) || got == "integer" && slices.Contains(types, "number")
}

// jsonType names v's JSON Schema type; a whole number is an integer (and a number).
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "unknown"
}
