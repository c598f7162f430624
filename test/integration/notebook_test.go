package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The rule of docs/api.md, "What a session keeps", through the API: after a call each
// name holds its end-of-call value, or is absent and named in state_error.

func TestRealDataIsKept(t *testing.T) {
	first := run(t, map[string]any{"code": "from sklearn.datasets import load_digits\n" +
		"from sklearn.linear_model import Ridge\n" +
		"past = np.zeros(8192)\nseries = pd.Series(np.arange(8192.0))\n" +
		"frame = pd.DataFrame({'n': np.arange(20_000), 'city': ['Lyon', 'Oslo'] * 10_000})\ndigits = load_digits()\n" +
		"model = Ridge(alpha=1.0).fit(digits.data, digits.target)\nscore = round(model.score(digits.data, digits.target), 6)"})
	if first.Status != "ok" || first.StateError != nil {
		t.Fatalf("setup: %s %s, state_error %s", first.Status, kilntest.Str(first.Error), kilntest.Str(first.StateError))
	}
	const check = "past.shape, float(series.sum()), frame.shape, digits.data.shape, " +
		"bool(round(model.score(digits.data, digits.target), 6) == score), model.coef_.shape"
	const want = "((8192,), 33550336.0, (20000, 2), (1797, 64), True, (64,))"
	next := run(t, map[string]any{"session_id": first.SessionID, "code": check})
	if got := kilntest.Str(next.Result); got != want {
		t.Errorf("live: got %s (%s), want %s", got, kilntest.Str(next.Error), want)
	}
	// The same through the stored state: a fork resumes in a fresh sandbox, the whole state
	// sent to its REPL over the runtime's stream (an attach, or an exec on Kubernetes).
	forked := fork(t, first.SessionID)
	stored := run(t, map[string]any{"session_id": forked, "code": check})
	if got := kilntest.Str(stored.Result); got != want || stored.RuntimeStatus != "resumed" {
		t.Errorf("restored: got %s (%s, %s), want %s, resumed", got, stored.RuntimeStatus, kilntest.Str(stored.Error), want)
	}
}

func TestFunctionsSeeTheGlobalsOfNow(t *testing.T) {
	first := run(t, map[string]any{"code": "x = 1\ndef f():\n    return x"})
	next := run(t, map[string]any{"session_id": first.SessionID, "code": "x = 5\nf()"})
	if got := kilntest.Str(next.Result); got != "5" {
		t.Errorf("f() after x = 5 gave %s, want 5", got)
	}
}

func TestFailedRunKeepsOrRollsBack(t *testing.T) {
	for _, tt := range []struct {
		onError   string
		want      string
		wantState string // in state_error
	}{
		{"", "(2, True)", ""},
		{"keep", "(2, True)", ""},
		{"rollback", "(1, False)", "rolled back (on_error: rollback)"},
	} {
		t.Run("on_error="+tt.onError, func(t *testing.T) {
			first := run(t, map[string]any{"code": "model = 1"})
			body := map[string]any{"session_id": first.SessionID, "code": "model = 2\ny = 'bound'\n1 / 0"}
			if tt.onError != "" {
				body["on_error"] = tt.onError
			}
			failed := run(t, body)
			if failed.Status != "error" || !strings.Contains(kilntest.Str(failed.StateError), tt.wantState) {
				t.Fatalf("got %s, state_error %s; want error and a state_error with %q", failed.Status, kilntest.Str(failed.StateError), tt.wantState)
			}
			after := run(t, map[string]any{"session_id": first.SessionID, "code": "model, 'y' in globals()"})
			if got := kilntest.Str(after.Result); got != tt.want {
				t.Errorf("after the failed run: %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOverTheCapKeepsWhatFits(t *testing.T) {
	// The shared server's sandboxes have 256 MB: STATE_MAX_RAW_MB is 32. The stored state
	// keeps the names that fit; the live session keeps the big one too, while it lives.
	first := run(t, map[string]any{"code": "big = bytes(40 << 20)\nsmall = [1, 2, 3]"})
	if want := "kept only while the session is live (over the state limit of 32.0 MB before compression): big (over 32.0 MB)"; kilntest.Str(first.StateError) != want {
		t.Errorf("state_error %s, want %s", kilntest.Str(first.StateError), want)
	}
	next := run(t, map[string]any{"session_id": first.SessionID, "code": "small, 'big' in globals()"})
	if got := kilntest.Str(next.Result); got != "([1, 2, 3], True)" || next.RuntimeStatus != "reused" {
		t.Errorf("live: got %s (%s), want both names", got, next.RuntimeStatus)
	}
	// Forked, the session is its stored state: the big name is absent, with state_error
	// having said why.
	forked := fork(t, first.SessionID)
	stored := run(t, map[string]any{"session_id": forked, "code": "small, 'big' in globals()"})
	if got := kilntest.Str(stored.Result); got != "([1, 2, 3], False)" || stored.RuntimeStatus != "resumed" {
		t.Errorf("the stored state: got %s (%s), want the small name kept and the big one absent", got, stored.RuntimeStatus)
	}
}

func TestSettingsAndModulesCarryOver(t *testing.T) {
	first := run(t, map[string]any{"code": "import matplotlib as mpl\nplt.style.use('ggplot')\n" +
		"pd.set_option('display.max_columns', 3)\nnp.random.seed(7)\na = np.random.rand()"})
	next := run(t, map[string]any{"session_id": first.SessionID,
		"code": "mpl.rcParams['axes.facecolor'], pd.get_option('display.max_columns'), np.random.rand() != a"})
	if got := kilntest.Str(next.Result); got != "('#E5E5E5', 3, True)" {
		t.Errorf("got %s (%s), want the style, the option and the generator carried", got, kilntest.Str(next.Error))
	}
}

// fork copies session sid's stored state into a new session and returns its id.
func fork(t *testing.T, sid string) string {
	t.Helper()
	resp, body, err := srv.Request(http.MethodPost, "/sessions/"+sid+"/fork", nil, nil)
	if err != nil || resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("fork: %v %s", err, body)
	}
	var forked struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(body, &forked); err != nil || forked.SessionID == "" {
		t.Fatalf("fork answered %s", body)
	}
	return forked.SessionID
}
