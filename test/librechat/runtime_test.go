package librechat

import (
	"net/http"
	"testing"
)

// TestRuntimeHintResumes follows one conversation's runtime (runtime_session_hint) through
// its three states: new, reused while its sandbox lives, and resumed from the stored state
// once other sessions have taken its place (the server keeps LIVE_SESSIONS_MAX=4).
func TestRuntimeHintResumes(t *testing.T) {
	hint := "v2:conversation:" + randomUUID()
	stateful := with(alice.auth(t), "X-CodeAPI-Expected-Profile", "stateful")
	call := func(code string) execAnswer {
		t.Helper()
		return exec(t, stateful, map[string]any{"code": code, "runtime_session_hint": hint, "codeSessionKey": "execute_code"})
	}
	first := call("import statistics\nsamples = [12.5, 14.0, 13.25, 15.5]\nprint(statistics.mean(samples))")
	if first.RuntimeStatus != "new" || first.RuntimeSessionID == nil || first.Stdout != "13.8125\n" {
		t.Fatalf("first call: %+v", first)
	}
	runtime := *first.RuntimeSessionID
	second := call("samples.append(20.0)\nprint(len(samples))")
	if second.RuntimeStatus != "reused" || second.SessionID != runtime || second.Stdout != "5\n" {
		t.Fatalf("second call: %+v, want reused in %s", second, runtime)
	}
	// Four other live sessions push the runtime's sandbox out.
	for range 4 {
		exec(t, alice.auth(t), map[string]any{"code": "print('elsewhere')"})
	}
	third := call("print(len(samples), max(samples))")
	if third.RuntimeStatus != "resumed" || third.SessionID != runtime || third.Stdout != "5 20.0\n" {
		t.Errorf("third call, after the sandbox went: %+v, want resumed in %s with the samples", third, runtime)
	}
	// The runtime is alice's: bob's call with her hint is a new runtime of his.
	bobs := exec(t, with(bob.auth(t), "X-CodeAPI-Expected-Profile", "stateful"),
		map[string]any{"code": "print('samples' in globals())", "runtime_session_hint": hint})
	if bobs.RuntimeStatus != "new" || bobs.SessionID == runtime || bobs.Stdout != "False\n" {
		t.Errorf("bob with alice's hint: %+v", bobs)
	}
	if a := send(t, http.MethodGet, "/sessions/"+runtime, bob.auth(t), nil); a.status != http.StatusNotFound {
		t.Errorf("bob reads alice's runtime: %d", a.status)
	}
}
