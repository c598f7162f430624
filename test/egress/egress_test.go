package egress

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln/test/kilntest"
)

// exec runs code and returns the answer, failing the test unless kiln answers 200.
func exec(t *testing.T, body map[string]any) kilntest.ExecResponse {
	t.Helper()
	if body["lang"] == nil {
		body["lang"] = "py"
	}
	var out kilntest.ExecResponse
	resp, err := srv.PostJSON("/exec", body, &out)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec = %d: %s", resp.StatusCode, out.Message)
	}
	return out
}

// ok runs code and fails the test unless it ends ok; it returns the answer.
func ok(t *testing.T, body map[string]any) kilntest.ExecResponse {
	t.Helper()
	out := exec(t, body)
	if out.Status != "ok" {
		t.Fatalf("status %s, error %s\nstdout: %s\nstderr: %s", out.Status, kilntest.Str(out.Error), out.Stdout, out.Stderr)
	}
	return out
}

func plainURL(host, path string) string { return fmt.Sprintf("http://%s:%d%s", host, plainPort, path) }
func secureURL(host, path string) string {
	return fmt.Sprintf("https://%s:%d%s", host, securePort, path)
}

// Python's three usual clients reach an allowed host over plain HTTP and over HTTPS,
// whose certificate the sandbox trusts through EGRESS_CA_BUNDLE.
func TestAllowedHostsAnswer(t *testing.T) {
	code := fmt.Sprintf(`
import urllib.request, requests, httpx
print(urllib.request.urlopen(%[1]q, timeout=30).read().decode())
print(requests.get(%[2]q, timeout=30).text)
print(httpx.get(%[2]q, timeout=30).text)
print(urllib.request.urlopen(%[2]q, timeout=30).read().decode())
`, plainURL("allowed.test", "/hello"), secureURL("secure.test", "/hello"))
	out := ok(t, map[string]any{"code": code})
	want := []string{
		greeting + fmt.Sprintf(" (allowed.test:%d)", plainPort),
		greeting + fmt.Sprintf(" (secure.test:%d)", securePort),
		greeting + fmt.Sprintf(" (secure.test:%d)", securePort),
		greeting + fmt.Sprintf(" (secure.test:%d)", securePort),
	}
	if got := strings.Split(strings.TrimSpace(out.Stdout), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.Stdout, strings.Join(want, "\n"))
	}
}

// A host the policy does not allow is refused with its reason, over HTTP (the proxy's
// answer) and HTTPS (the CONNECT's answer), and the reason reaches the code's traceback.
func TestHostNotAllowedIsRefusedWithItsReason(t *testing.T) {
	code := fmt.Sprintf(`
import urllib.request, urllib.error, requests
try:
    urllib.request.urlopen(%[1]q, timeout=30)
except urllib.error.HTTPError as e:
    print("http", e.code, e.read().decode().strip())
try:
    requests.get(%[2]q, timeout=30)
except requests.exceptions.ProxyError as e:
    print("https", e)
`, plainURL("other.test", "/hello"), fmt.Sprintf("https://other.test:%d/hello", plainPort))
	out := ok(t, map[string]any{"code": code})
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("stdout %q, stderr %q", out.Stdout, out.Stderr)
	}
	if !strings.HasPrefix(lines[0], "http 403 egress denied: other.test") {
		t.Errorf("plain HTTP refusal: %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "https ") || !strings.Contains(lines[1], "403") {
		t.Errorf("HTTPS refusal: %q", lines[1])
	}
	// The same refusal, uncaught: the code's error names it.
	out = exec(t, map[string]any{"code": fmt.Sprintf("import urllib.request\nurllib.request.urlopen(%q, timeout=30)", plainURL("other.test", "/"))})
	if out.Status != "error" || !strings.Contains(out.Stderr+kilntest.Str(out.Error), "403") {
		t.Errorf("uncaught refusal: status %s, error %s, stderr %s", out.Status, kilntest.Str(out.Error), out.Stderr)
	}
}

// The sandbox still has no network: a socket to the upstream's address, or to anywhere,
// fails, whatever the proxy allows.
func TestDirectSocketsStillFail(t *testing.T) {
	code := fmt.Sprintf(`
import socket
for addr in [("127.0.0.1", %d), ("10.0.0.1", 80), ("1.1.1.1", 443)]:
    try:
        socket.create_connection(addr, timeout=5).close()
        print("connected", addr)
    except OSError as e:
        print("refused", addr[0], type(e).__name__)
`, plainPort)
	out := ok(t, map[string]any{"code": code})
	if strings.Contains(out.Stdout, "connected") || strings.Count(out.Stdout, "refused") != 3 {
		t.Errorf("direct sockets: %s", out.Stdout)
	}
}

// A request's network narrows the policy and can never widen it; false shuts it.
func TestRequestNarrowsNeverWidens(t *testing.T) {
	probe := fmt.Sprintf(`
import urllib.request, urllib.error
for url in [%q, %q]:
    try:
        print(url.split("/")[2].split(":")[0], urllib.request.urlopen(url, timeout=30).status)
    except urllib.error.HTTPError as e:
        print(url.split("/")[2].split(":")[0], e.code, e.read().decode().strip())
`, plainURL("allowed.test", "/hello"), plainURL("other.test", "/hello"))
	cases := []struct {
		name    string
		network any
		allowed bool // allowed.test answers
	}{
		{"no field", nil, true},
		{"narrowed to allowed.test", map[string]any{"allow": []string{fmt.Sprintf("allowed.test:%d", plainPort)}}, true},
		{"narrowed to secure.test", map[string]any{"allow": []string{fmt.Sprintf("secure.test:%d", securePort)}}, false},
		{"widened to other.test", map[string]any{"allow": []string{"other.test", "*"}}, false},
		{"false", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"code": probe}
			if c.network != nil {
				body["network"] = c.network
			}
			out := ok(t, body)
			lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
			if len(lines) != 2 {
				t.Fatalf("stdout %q", out.Stdout)
			}
			if got := lines[0] == "allowed.test 200"; got != c.allowed {
				t.Errorf("allowed.test: %q", lines[0])
			}
			if !strings.HasPrefix(lines[1], "other.test 403 egress denied") {
				t.Errorf("other.test: %q", lines[1])
			}
		})
	}
	var e kilntest.ErrorBody
	resp, err := srv.PostJSON("/exec", map[string]any{"lang": "py", "code": "1", "network": true}, &e)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("network: true = %v %v %+v, want 400", resp.StatusCode, err, e)
	}
}

// curl in bash goes through the same proxy and the same policy.
func TestCurlFollowsThePolicy(t *testing.T) {
	code := fmt.Sprintf(`curl -sS %s; echo; curl -sS %s; echo; curl -sS -o /dev/null -w '%%{http_code}\n' %s; curl -sS %s 2>&1 | tail -n 1`,
		plainURL("allowed.test", "/hello"), secureURL("secure.test", "/hello"), plainURL("other.test", "/"),
		fmt.Sprintf("https://other.test:%d/", securePort))
	out := ok(t, map[string]any{"lang": "bash", "code": code})
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], greeting) || !strings.HasPrefix(lines[1], greeting) ||
		lines[2] != "403" || !strings.Contains(lines[3], "403") {
		t.Errorf("curl:\n%s\nstderr: %s", out.Stdout, out.Stderr)
	}
}

// pip installs from the operator's index into the session: the package imports in the
// same call and the next, none of its files comes back as an output, and a session resumed
// in a new sandbox (its live one died) has it again, with an object of its class.
func TestPipInstallInASession(t *testing.T) {
	out := ok(t, map[string]any{"code": `
import subprocess, sys
r = subprocess.run([sys.executable, "-m", "pip", "install", "` + pkgName + `"], capture_output=True, text=True)
print(r.returncode, r.stdout[-500:], r.stderr[-2000:])
import ` + pkgName + `
p = ` + pkgName + `.Point(3, 4)
print("value", ` + pkgName + `.VALUE)
`})
	if !strings.Contains(out.Stdout, "value 42") {
		t.Fatalf("pip install: %s\nstderr: %s", out.Stdout, out.Stderr)
	}
	for _, f := range out.Files {
		t.Errorf("an installed file came back as an output: %s", f.Name)
	}
	if out.StateError != nil {
		t.Errorf("state error after the install: %s", *out.StateError)
	}
	next := ok(t, map[string]any{"session_id": out.SessionID, "code": "import " + pkgName + "\nprint(" + pkgName + ".mean([1, 2, 3, 6]), p)"})
	if strings.TrimSpace(next.Stdout) != "3.0 Point(3, 4)" {
		t.Errorf("next call: %q (%s)", next.Stdout, next.Stderr)
	}
	if len(next.Files) != 0 {
		t.Errorf("next call returned files: %+v", next.Files)
	}
	died := exec(t, map[string]any{"session_id": out.SessionID, "code": "import os\nos.kill(os.getpid(), 9)"})
	if died.Status != "sandbox_died" {
		t.Fatalf("the kill: status %s", died.Status)
	}
	resumed := ok(t, map[string]any{"session_id": out.SessionID, "code": "import " + pkgName + "\nprint(" + pkgName + ".VALUE, p, type(p).__module__)"})
	if resumed.RuntimeStatus != "resumed" || strings.TrimSpace(resumed.Stdout) != "42 Point(3, 4) "+pkgName {
		t.Errorf("resumed: runtime %q, stdout %q, stderr %q, state error %s", resumed.RuntimeStatus, resumed.Stdout, resumed.Stderr, kilntest.Str(resumed.StateError))
	}
}

// A download of many megabytes arrives whole, through the window of the channel.
func TestLargeDownloadArrivesWhole(t *testing.T) {
	const n = 50 << 20
	out := ok(t, map[string]any{"code": fmt.Sprintf(`
import hashlib, requests
h = hashlib.sha256(); size = 0
with requests.get(%q, stream=True, timeout=60) as r:
    for chunk in r.iter_content(1 << 20):
        h.update(chunk); size += len(chunk)
print(size, h.hexdigest())
`, plainURL("allowed.test", fmt.Sprintf("/bytes?n=%d", n)))})
	want := fmt.Sprintf("%d %s", n, kilntest.PatternDigest(n))
	if strings.TrimSpace(out.Stdout) != want {
		t.Errorf("download: %q, want %q", out.Stdout, want)
	}
}

// The metrics count the proxy's decisions, refusals included.
func TestMetricsCountDecisions(t *testing.T) {
	ok(t, map[string]any{"code": fmt.Sprintf(`
import urllib.request, urllib.error
urllib.request.urlopen(%q, timeout=30).read()
try:
    urllib.request.urlopen(%q, timeout=30)
except urllib.error.HTTPError:
    pass
`, plainURL("allowed.test", "/hello"), plainURL("other.test", "/hello"))})
	text := srv.Metrics(t)
	if kilntest.MetricSum(text, `kiln_egress_connections_total{decision="allowed"}`) < 1 ||
		kilntest.MetricSum(text, `kiln_egress_connections_total{decision="host"}`) < 1 ||
		kilntest.MetricSum(text, `kiln_egress_bytes_total{direction="down"}`) < float64(len(greeting)) {
		t.Errorf("egress metrics:\n%s", grep(text, "kiln_egress"))
	}
}

func grep(text []byte, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, prefix) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// The MCP tool narrows the policy as /exec does: a list keeps what both allow, an empty
// one shuts it.
func TestMCPExecuteNarrows(t *testing.T) {
	c := sdk.NewClient(&sdk.Implementation{Name: "kiln-egress-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	code := fmt.Sprintf(`
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen(%q, timeout=30).status)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, plainURL("allowed.test", "/hello"))
	for _, c := range []struct {
		name    string
		network any
		want    string
	}{
		{"no network", nil, "200"},
		{"allowed.test", []string{fmt.Sprintf("allowed.test:%d", plainPort)}, "200"},
		{"empty", []string{}, "403 egress denied"},
	} {
		args := map[string]any{"code": code}
		if c.network != nil {
			args["network"] = c.network
		}
		res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "execute", Arguments: args})
		if err != nil {
			t.Fatalf("%s: execute: %v", c.name, err)
		}
		var out struct {
			Stdout string `json:"stdout"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		if !strings.HasPrefix(strings.TrimSpace(out.Stdout), c.want) {
			t.Errorf("%s: stdout %q, want %q (error %v)", c.name, out.Stdout, c.want, res.IsError)
		}
	}
}

// The programmatic route carries network too: code that calls the client's tools runs
// under the narrowed policy.
func TestProgrammaticNarrows(t *testing.T) {
	var out map[string]any
	resp, err := srv.PostJSON("/exec/programmatic", map[string]any{
		"lang": "py", "tools": []map[string]any{{"name": "noop"}}, "network": false,
		"code": fmt.Sprintf(`
import urllib.request, urllib.error
try:
    urllib.request.urlopen(%q, timeout=30)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, plainURL("allowed.test", "/hello"))}, &out)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec/programmatic = %v %v: %v", resp.StatusCode, err, out)
	}
	if stdout, _ := out["stdout"].(string); !strings.HasPrefix(stdout, "403 egress denied: network is off") {
		t.Errorf("programmatic run with network false: %v", out)
	}
}

// A policy file changed and reloaded (SIGHUP) applies to the next call, without a restart.
func TestPolicyReloadAppliesToTheNextCall(t *testing.T) {
	probe := map[string]any{"code": fmt.Sprintf(`
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen(%q, timeout=30).status)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, plainURL("allowed.test", "/hello"))}
	reload := func(doc string) {
		t.Helper()
		if err := os.WriteFile(policyFile, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(srv.PID(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		kilntest.WaitFor(t, 10*time.Second, "the reload in kiln's log", func() bool {
			return strings.Count(srv.Logs(), "egress policy reloaded") > reloads
		})
		reloads++
	}
	t.Cleanup(func() { reload(policyNone) })
	if out := ok(t, probe); strings.TrimSpace(out.Stdout) != "200" {
		t.Fatalf("before the reload: %q", out.Stdout)
	}
	reload(`{"default": {"allow": []}}`)
	if out := ok(t, probe); !strings.HasPrefix(strings.TrimSpace(out.Stdout), "403 egress denied") {
		t.Errorf("after a reload that closes it: %q", out.Stdout)
	}
}

// reloads counts the reloads the tests asked for.
var reloads int

// An allowed name that resolves to an address the policy keeps closed is refused, before
// any connection: a private address EGRESS_ALLOW_PRIVATE does not name (DNS rebinding),
// and the cloud metadata address.
func TestAllowedNameOnAClosedAddressIsRefused(t *testing.T) {
	out := ok(t, map[string]any{"code": fmt.Sprintf(`
import urllib.request, urllib.error
for url in [%q, "http://meta.test/latest/meta-data/"]:
    try:
        urllib.request.urlopen(url, timeout=30)
        print("reached", url)
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
`, plainURL("rebind.test", "/hello"))})
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "403 egress denied") || !strings.Contains(lines[0], "127.0.0.2") ||
		!strings.HasPrefix(lines[1], "403 egress denied") || !strings.Contains(lines[1], "metadata") {
		t.Errorf("closed addresses behind allowed names:\n%s", out.Stdout)
	}
}

// Real data through the proxy: a table read with pandas, a model fitted on it, an array
// of bytes past 64 KiB, and a package installed, all in one session; after its sandbox
// dies, the resumed session has every one of them back.
func TestRealDataThroughTheProxySurvivesTheSandbox(t *testing.T) {
	out := ok(t, map[string]any{"code": fmt.Sprintf(`
import subprocess, sys
import numpy as np, pandas as pd, requests
from sklearn.linear_model import LinearRegression
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "%s"], check=True)
import %s
df = pd.read_csv(%q)
model = LinearRegression().fit(df[["x1", "x2"]], df["y"])
arr = np.frombuffer(requests.get(%q, timeout=60).content, dtype=np.uint8)
point = %s.Point(len(df), arr.size)
print(df.shape, model.coef_.round(3).tolist(), round(float(model.intercept_), 3), arr.size, int(arr[:16].sum()))
`, pkgName, pkgName, plainURL("allowed.test", "/data.csv"), plainURL("allowed.test", "/bytes?n=300000"), pkgName)})
	want := "(5000, 4) [2.0, -3.0] 1.0 300000 1122" // the bytes of "0123456789abcdef" add up to 1122
	if strings.TrimSpace(out.Stdout) != want || out.StateError != nil {
		t.Fatalf("first call: %q (want %q), state error %s, stderr %s", out.Stdout, want, kilntest.Str(out.StateError), out.Stderr)
	}
	if died := exec(t, map[string]any{"session_id": out.SessionID, "code": "import os\nos.kill(os.getpid(), 9)"}); died.Status != "sandbox_died" {
		t.Fatalf("the kill: status %s", died.Status)
	}
	next := ok(t, map[string]any{"session_id": out.SessionID, "code": "print(len(df), abs(float(model.predict(df[['x1', 'x2']].iloc[:1])[0] - df.y[0])) < 1e-6, arr.size, point)"})
	if next.RuntimeStatus != "resumed" || strings.TrimSpace(next.Stdout) != "5000 True 300000 Point(5000, 300000)" {
		t.Errorf("resumed: runtime %q, stdout %q, stderr %s, state error %s", next.RuntimeStatus, next.Stdout, next.Stderr, kilntest.Str(next.StateError))
	}
}

// With REPL_ENABLED=false (Docker only) each call's REPL is exec'd afresh: its
// connections go through the proxy under the call's policy all the same.
func TestPerCallREPLReachesThroughTheProxy(t *testing.T) {
	if kilntest.OnKubernetes() {
		t.Skip("REPL_ENABLED=false exists only with RUNTIME=docker; the Docker pass of make test runs this")
	}
	env := slices.DeleteFunc(slices.Clone(egressEnv), func(v string) bool { return strings.HasPrefix(v, "POOLS=") })
	env = append(env, "REPL_ENABLED=false", "POOL_SIZE=1")
	s, err := kilntest.Start(kilntest.Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Minute)
	code := fmt.Sprintf(`
import urllib.request, urllib.error
print(urllib.request.urlopen(%q, timeout=30).read().decode())
try:
    urllib.request.urlopen(%q, timeout=30)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
`, plainURL("allowed.test", "/hello"), plainURL("other.test", "/hello"))
	var out kilntest.ExecResponse
	if resp, err := s.PostJSON("/exec", map[string]any{"lang": "py", "code": code}, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec: %v %v", resp, err)
	}
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if out.Status != "ok" || len(lines) != 2 || !strings.HasPrefix(lines[0], greeting) || !strings.HasPrefix(lines[1], "403 egress denied") {
		t.Errorf("per-call REPL: status %s, stdout %q, stderr %q", out.Status, out.Stdout, out.Stderr)
	}
}

// wayOut is code that tells how the sandbox reaches the proxy (kiln's port in its
// namespace, the socket, a relay process), then speaks HTTP to the proxy's address itself
// for an allowed host and one not allowed: it gets the policy there as everywhere.
func wayOut() string {
	return fmt.Sprintf(`
import os, socket
proxy = os.environ["HTTPS_PROXY"]
def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # gone since the listing
        return b""
relay = any(b"relay.py" in cmdline(p) for p in os.listdir("/proc") if p.isdigit())
print("proxy", proxy, "socket", os.path.exists("/run/kiln/egress.sock"), "relay", relay)
def ask(host, connect):
    if connect == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.connect("/run/kiln/egress.sock")
    else:
        s = socket.create_connection(connect)
    s.sendall(b"GET http://%%s:%d/hello HTTP/1.1\r\nHost: %%s:%d\r\nConnection: close\r\n\r\n" %% (host.encode(), host.encode()))
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    print(host, answer.split(b"\r\n", 1)[0].decode(), answer.rsplit(b"\r\n\r\n", 1)[1].decode().strip())
where = "socket" if os.path.exists("/run/kiln/egress.sock") else ("127.0.0.1", int(proxy.rsplit(":", 1)[1]))
for host in ("allowed.test", "other.test"):
    ask(host, where)
try:
    socket.create_server(("127.0.0.1", int(proxy.rsplit(":", 1)[1])))
    print("port taken: False")
except OSError as e:
    print("port taken:", e.errno == 98)
`, plainPort, plainPort)
}

// On Docker with runc, kiln listens on 127.0.0.1:3128 in each sandbox's own network
// namespace (it may enter it: root on the host): no socket, no relay, no frames, and the
// code cannot take the port. Under gVisor and on Kubernetes net frames carry every
// connection, through the REPL's own port. The code that speaks HTTP to the proxy's
// address itself gets the policy as through any client.
func TestTheWayOutServesThePolicy(t *testing.T) {
	out := ok(t, map[string]any{"code": wayOut()})
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	policy := fmt.Sprintf("allowed.test HTTP/1.1 200 OK %s (allowed.test:%d)\nother.test HTTP/1.1 403 egress denied: other.test", greeting, plainPort)
	if len(lines) != 4 || !strings.HasPrefix(strings.Join(lines[1:3], "\n"), policy) || lines[3] != "port taken: True" {
		t.Fatalf("the way out:\n%s\nwant the policy:\n%s\nand the port taken; stderr %s", out.Stdout, policy, out.Stderr)
	}
	want := "proxy http://127.0.0.1:3128 socket False relay False"
	if kilntest.OnKubernetes() || kilntest.Runtime() == "runsc" {
		want = "socket False relay False" // the REPL's own port, on whatever port it got
	}
	if !strings.HasSuffix(lines[0], want) {
		t.Errorf("the way out: %q, want %q", lines[0], want)
	}
}

// With EGRESS_SANDBOX_PORT=false (or a kiln that may not enter namespaces: kiln in a
// container of its own) a runc sandbox reaches the proxy through a Unix socket of its own,
// mounted at /run/kiln, by a relay process beside the REPL: the policy holds there too,
// for the code that talks to the socket itself, and real bytes arrive whole.
func TestTheSocketAndItsRelayServeThePolicy(t *testing.T) {
	if kilntest.OnKubernetes() || kilntest.Runtime() == "runsc" {
		t.Skip("the socket is Docker's with runc; the Docker pass of make test runs this")
	}
	env := slices.DeleteFunc(slices.Clone(egressEnv), func(v string) bool { return strings.HasPrefix(v, "POOLS=") })
	env = append(env, "EGRESS_SANDBOX_PORT=false", "POOL_SIZE=1")
	s, err := kilntest.Start(kilntest.Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Minute)
	var out kilntest.ExecResponse
	if resp, err := s.PostJSON("/exec", map[string]any{"lang": "py", "code": wayOut()}, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec: %v %v", resp, err)
	}
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	policy := fmt.Sprintf("allowed.test HTTP/1.1 200 OK %s (allowed.test:%d)\nother.test HTTP/1.1 403 egress denied: other.test", greeting, plainPort)
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "socket True relay True") || !strings.HasPrefix(strings.Join(lines[1:3], "\n"), policy) {
		t.Fatalf("through the socket:\n%s\nwant the socket, the relay and the policy:\n%s\nstderr %s", out.Stdout, policy, out.Stderr)
	}
	const size = 20 << 20
	code := fmt.Sprintf("import hashlib, urllib.request\nh = hashlib.sha256()\nwith urllib.request.urlopen(%q, timeout=60) as r:\n    while b := r.read(1 << 20):\n        h.update(b)\nprint(h.hexdigest())",
		plainURL("allowed.test", fmt.Sprintf("/bytes?n=%d", size)))
	out = kilntest.ExecResponse{}
	if resp, err := s.PostJSON("/exec", map[string]any{"lang": "py", "code": code}, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec: %v %v", resp, err)
	}
	if got, want := strings.TrimSpace(out.Stdout), kilntest.PatternDigest(size); got != want {
		t.Errorf("20 MB through the relay: digest %q, want %q (stderr %s)", got, want, out.Stderr)
	}
}

// Node's fetch ignores the proxy variables on its own; the polyglot image preloads a
// dispatcher that honours them: https:// as a CONNECT tunnel, http:// as plain HTTP in
// one (which kiln reads request by request), and a host not allowed is refused.
func TestNodeFetchGoesThroughTheProxy(t *testing.T) {
	code := fmt.Sprintf(`
for (const url of [%q, %q, %q]) {
  try {
    const r = await fetch(url);
    console.log(r.status, (await r.text()).trim());
  } catch (e) {
    console.log("failed", e.cause ? e.cause.message : e.message);
  }
}
`, plainURL("allowed.test", "/hello"), secureURL("secure.test", "/hello"), plainURL("other.test", "/hello"))
	out := exec(t, map[string]any{"lang": "js", "code": "(async () => {" + code + "})();"})
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if out.Status != "ok" || len(lines) != 3 {
		t.Fatalf("status %s, stdout %q, stderr %q", out.Status, out.Stdout, out.Stderr)
	}
	if want := fmt.Sprintf("200 %s (allowed.test:%d)", greeting, plainPort); lines[0] != want {
		t.Errorf("plain HTTP: %q, want %q", lines[0], want)
	}
	if want := fmt.Sprintf("200 %s (secure.test:%d)", greeting, securePort); lines[1] != want {
		t.Errorf("HTTPS: %q, want %q", lines[1], want)
	}
	if !strings.HasPrefix(lines[2], "failed") && !strings.HasPrefix(lines[2], "403") {
		t.Errorf("a host not allowed: %q", lines[2])
	}
	if strings.Contains(out.Stderr, "Warning") {
		t.Errorf("the preload warned on the code's stderr: %s", out.Stderr)
	}
}

// IPython's ways to install a package, as notebooks write them: !pip install and %pip
// install go through the proxy to the operator's index, as a subprocess's pip does, and
// what they install comes back with the session after its sandbox dies.
func TestPipMagicsInstallFromTheIndex(t *testing.T) {
	for _, install := range []string{"!pip install " + pkgName, "%pip install " + pkgName} {
		t.Run(strings.Fields(install)[0], func(t *testing.T) {
			out := ok(t, map[string]any{"code": install + "\nimport " + pkgName + "\np = " + pkgName + ".Point(1, 2)\nprint('value', " + pkgName + ".VALUE)"})
			if !strings.Contains(out.Stdout, "value 42") || !strings.Contains(out.Stdout, "Successfully installed") {
				t.Fatalf("%s: %s\nstderr: %s", install, out.Stdout, out.Stderr)
			}
			if died := exec(t, map[string]any{"session_id": out.SessionID, "code": "import os\nos.kill(os.getpid(), 9)"}); died.Status != "sandbox_died" {
				t.Fatalf("the kill: status %s", died.Status)
			}
			resumed := ok(t, map[string]any{"session_id": out.SessionID, "code": "import " + pkgName + "\nprint(" + pkgName + ".VALUE, p)"})
			if resumed.RuntimeStatus != "resumed" || strings.TrimSpace(resumed.Stdout) != "42 Point(1, 2)" {
				t.Errorf("resumed: runtime %q, stdout %q, stderr %q", resumed.RuntimeStatus, resumed.Stdout, resumed.Stderr)
			}
		})
	}
}
