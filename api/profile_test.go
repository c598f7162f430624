package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/kilnsh/kiln/api"
)

// The execution profile a client expects is checked before anything else (auth
// included): no profile passes, a profile served passes and is named back, one not
// served is a 409 and a value that is no profile a 400, each in the shape LibreChat
// reads; a bridge worker cannot be honoured.
func TestExecutionProfiles(t *testing.T) {
	only := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, Profiles: []string{"default"}})
	both := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}})
	key := http.Header{"X-Api-Key": {"k1"}}
	tests := []struct {
		name     string
		h        *api.Harness
		header   http.Header
		status   int
		error    string
		answered string // X-CodeAPI-Execution-Profile
	}{
		{"none expected", both, key, http.StatusOK, "", "default"},
		{"default expected", both, with(key, "X-Codeapi-Expected-Profile", "default"), http.StatusOK, "", "default"},
		{"stateful expected", both, with(key, "X-Codeapi-Expected-Profile", "stateful"), http.StatusOK, "", "stateful"},
		{"stateful where only default is served", only, with(key, "X-Codeapi-Expected-Profile", "stateful"), http.StatusConflict, "execution_profile_mismatch", "default"},
		{"no profile", both, with(key, "X-Codeapi-Expected-Profile", "turbo"), http.StatusBadRequest, "invalid_execution_profile", "default"},
		{"before auth", both, http.Header{"X-Codeapi-Expected-Profile": {"turbo"}}, http.StatusBadRequest, "invalid_execution_profile", "default"},
		{"repeated", both, with(with(key, "X-Codeapi-Expected-Profile", "stateful"), "X-Codeapi-Expected-Profile", "stateful"), http.StatusBadRequest, "invalid_execution_profile", "default"},
		{"a bridge worker", both, with(key, "X-Librechat-Code-Worker-Id", "w1"), http.StatusBadRequest, "unsupported_capability", "default"},
		{"refused auth still names its profile", both, http.Header{"X-Api-Key": {"wrong"}}, http.StatusUnauthorized, "unauthorized", "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, tt.h, "POST", "/v1/exec", "application/json", `{"code":"print(1)"}`, tt.header)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if got := rec.Header().Get("X-CodeAPI-Execution-Profile"); got != tt.answered {
				t.Errorf("X-CodeAPI-Execution-Profile = %q, want %q", got, tt.answered)
			}
			if tt.error == "" {
				return
			}
			var body struct {
				Error   string `json:"error"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if body.Error != tt.error || body.Message == "" {
				t.Errorf("body %s, want error %q with a message", rec.Body, tt.error)
			}
		})
	}
}

// with returns a copy of h with one more value of name.
func with(h http.Header, name, value string) http.Header {
	out := h.Clone()
	out.Add(name, value)
	return out
}
