package librechat

import (
	"net/http"
	"testing"
)

// ptcAnswer is what the tests read of an answer of POST /exec/programmatic.
type ptcAnswer struct {
	Status            string `json:"status"`
	ContinuationToken string `json:"continuation_token"`
	ExecutionID       string `json:"execution_id"`
	ToolCalls         []struct {
		ID    string         `json:"id"`
		Name  string         `json:"name"`
		Input map[string]any `json:"input"`
	} `json:"tool_calls"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	SessionID string `json:"session_id"`
}

// TestProgrammaticRunsAreTheirs checks that a paused programmatic run belongs to the
// user who started it, not to their tenant: another user of the tenant can neither feed
// it tool results nor cancel it, by execution or by LibreChat's request id.
func TestProgrammaticRunsAreTheirs(t *testing.T) {
	requestID := randomUUID()
	start := postJSON(t, "/exec/programmatic", with(alice.auth(t), "X-LibreChat-Code-Request-ID", requestID), map[string]any{
		"code":  "rate = await get_fx_rate(currency='EUR')\nprint(round(1250 * rate['rate'], 2))",
		"tools": []map[string]any{{"name": "get_fx_rate", "description": "an exchange rate", "parameters": map[string]any{"type": "object"}}},
	})
	var paused ptcAnswer
	start.json(t, &paused)
	if start.status != http.StatusOK || paused.Status != "tool_call_required" || len(paused.ToolCalls) != 1 {
		t.Fatalf("alice's start: %d %s", start.status, start.body)
	}
	results := func(rate float64) map[string]any {
		return map[string]any{"continuation_token": paused.ContinuationToken, "tool_results": []map[string]any{
			{"call_id": paused.ToolCalls[0].ID, "result": map[string]any{"rate": rate}, "is_error": false}}}
	}
	for _, u := range []user{bob, carol} {
		if a := postJSON(t, "/exec/programmatic", u.auth(t), results(1000)); a.status != http.StatusNotFound {
			t.Errorf("%s continues alice's run: %d %s, want 404", u.name, a.status, a.body)
		}
		if a := postJSON(t, "/exec/programmatic/cancel", u.auth(t), map[string]string{"request_id": requestID}); a.status != http.StatusForbidden {
			t.Errorf("%s cancels alice's request: %d %s, want 403", u.name, a.status, a.body)
		}
		if a := postJSON(t, "/executions/"+paused.ExecutionID+"/cancel", u.auth(t), map[string]any{}); a.status != http.StatusNotFound {
			t.Errorf("%s cancels alice's execution: %d %s, want 404", u.name, a.status, a.body)
		}
	}
	if a := postJSON(t, "/exec/programmatic", platform(), results(1000)); a.status != http.StatusNotFound {
		t.Errorf("the API key continues alice's run: %d %s, want 404", a.status, a.body)
	}
	done := postJSON(t, "/exec/programmatic", alice.auth(t), results(0.92))
	var end ptcAnswer
	done.json(t, &end)
	if done.status != http.StatusOK || end.Status != "completed" || end.Stdout != "1150.0\n" {
		t.Fatalf("alice's continuation: %d %s, want completed with 1150.0", done.status, done.body)
	}
	// Her session id in bob's programmatic run starts a session of his own.
	bobs := postJSON(t, "/exec/programmatic", bob.auth(t), map[string]any{
		"session_id": end.SessionID, "code": "import os\nprint(sorted(os.listdir('/mnt/data')), 'rate' in globals())",
		"tools": []map[string]any{{"name": "noop", "parameters": map[string]any{"type": "object"}}},
	})
	var other ptcAnswer
	bobs.json(t, &other)
	if bobs.status != http.StatusOK || other.Status != "completed" || other.SessionID == end.SessionID || other.Stdout != "[] False\n" {
		t.Errorf("bob's run with alice's session_id: %d %s, want a session of his own, empty", bobs.status, bobs.body)
	}
}
