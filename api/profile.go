package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// LibreChat's execution profiles: "default" runs each call on its own, "stateful"
// keeps a runtime per conversation (runtime_session_hint). kiln serves both unless the
// operator narrows them (EXECUTION_PROFILES).
const (
	ProfileDefault  = "default"
	ProfileStateful = "stateful"
)

// Profile headers: the one a client sends to say which profile it expects, and the one
// every answer carries to say which it got.
const (
	expectedProfileHeader = "X-CodeAPI-Expected-Profile"
	profileHeader         = "X-CodeAPI-Execution-Profile"
	bridgeWorkerHeader    = "X-LibreChat-Code-Worker-ID"
)

// profileError is the body of a refused profile, in the shape LibreChat reads.
type profileError struct {
	Error           string `json:"error"`
	Message         string `json:"message"`
	ExpectedProfile string `json:"expected_profile"`
	ActualProfile   string `json:"actual_profile"`
	RequestID       string `json:"request_id"`
}

// withProfile holds requests to the execution profile they expect, before anything
// else looks at them: a value that is no profile is a 400, one kiln does not serve a
// 409 (which LibreChat reports to the model as unsupported, not to be retried). Every
// answer names the profile it was served under.
func (s *Server) withProfile(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served := s.profiles[0]
		// Repeated headers are one list, which is no profile.
		want := strings.TrimSpace(strings.Join(r.Header.Values(expectedProfileHeader), ","))
		switch {
		case want == "":
		case want != ProfileDefault && want != ProfileStateful:
			w.Header().Set(profileHeader, served)
			writeJSON(w, http.StatusBadRequest, profileError{Error: "invalid_execution_profile",
				Message:         fmt.Sprintf("invalid execution profile %q: expected %q or %q", want, ProfileDefault, ProfileStateful),
				ExpectedProfile: want, ActualProfile: served, RequestID: requestID(r)})
			return
		case !slices.Contains(s.profiles, want):
			w.Header().Set(profileHeader, served)
			writeJSON(w, http.StatusConflict, profileError{Error: "execution_profile_mismatch",
				Message:         fmt.Sprintf("expected the %s execution profile; this kiln serves %s", want, strings.Join(s.profiles, " and ")),
				ExpectedProfile: want, ActualProfile: served, RequestID: requestID(r)})
			return
		default:
			served = want
		}
		w.Header().Set(profileHeader, served)
		if r.Header.Get(bridgeWorkerHeader) != "" {
			// A bridge worker is a runtime on the user's own machine: kiln has none to route to.
			writeJSON(w, http.StatusBadRequest, profileError{Error: "unsupported_capability",
				Message:         "kiln runs code in its own sandboxes: it cannot route to a bridge worker (" + bridgeWorkerHeader + ")",
				ExpectedProfile: want, ActualProfile: served, RequestID: requestID(r)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ParseProfiles reads EXECUTION_PROFILES: profile names, comma-separated, the first the
// one an answer names when its request expects none.
func ParseProfiles(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			continue
		case p != ProfileDefault && p != ProfileStateful:
			return nil, fmt.Errorf("unknown execution profile %q: use %q and/or %q", p, ProfileDefault, ProfileStateful)
		case !slices.Contains(out, p):
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no execution profile: use %q and/or %q", ProfileDefault, ProfileStateful)
	}
	return out, nil
}
