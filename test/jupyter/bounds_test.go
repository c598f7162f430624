package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The replays of an outside review of the Jupyter layer: each finding, as the reviewer
// ran it, with what kiln answers now.

// Thirty completion requests of 8 MiB on one socket, while a cell holds the kernel,
// leave kiln's memory where it was: a request that is not a cell is refused past 1 MiB,
// and those waiting are bounded per connection. (Each one once held its whole message in
// a goroutine of its own: kiln went from 36 to 831 MB.)
func TestIntrospectionFloodsLeaveKilnsMemoryFlat(t *testing.T) {
	who := as{"X-Api-Key": {keyA}, "User-Id": {"flood-" + kilntest.NewMarker()}}
	id := startKernel(t, srv, who)
	sk := mustDial(t, srv, id, who)
	if r := sk.reply(sk.execute("x = 1"), 2*time.Minute); r.content()["status"] != "ok" {
		t.Fatalf("the first cell: %s", r.Content)
	}
	before := kilnRSS(t, srv)
	busy := sk.execute("import time\ntime.sleep(4)")
	big := strings.Repeat("a", 8<<20)
	var ids []string
	for range 30 {
		ids = append(ids, sk.send("complete_request", map[string]any{"code": big, "cursor_pos": len(big)}))
	}
	peak := before
	for _, id := range ids {
		r := sk.reply(id, time.Minute)
		if c := r.content(); c["status"] != "error" || !strings.Contains(c["evalue"].(string), "over kiln's limit") {
			t.Fatalf("an 8 MiB completion request: %s; want it refused as over the limit", r.Content)
		}
		peak = max(peak, kilnRSS(t, srv))
	}
	// Small ones, while the cell still runs: answered in order, past the queue's bound busy.
	var small []string
	for i := range 12 {
		small = append(small, sk.send("complete_request", map[string]any{"code": "x" + strings.Repeat(" ", i), "cursor_pos": 1}))
	}
	var answered []int
	refused := 0
	for i, id := range small {
		c := sk.reply(id, time.Minute).content()
		if c["status"] == "ok" {
			answered = append(answered, i)
		} else if strings.Contains(c["evalue"].(string), "busy") {
			refused++
		}
	}
	if refused == 0 || len(answered) == 0 {
		t.Errorf("12 completions behind a running cell: %d answered, %d refused as busy; want both", len(answered), refused)
	}
	if r := sk.reply(busy, time.Minute); r.content()["status"] != "ok" {
		t.Errorf("the cell: %s", r.Content)
	}
	_ = sk.ws.Close(websocket.StatusNormalClosure, "")
	if resp, _, err := srv.Request(http.MethodDelete, "/jupyter/api/kernels/"+id, nil, http.Header(who)); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE the kernel: %v %v", err, status(resp))
	}
	after := kilnRSS(t, srv)
	for deadline := time.Now().Add(30 * time.Second); after > before+48<<20 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		after = kilnRSS(t, srv)
	}
	t.Logf("kiln's RSS: %d MB before, %d MB at most during 240 MB of requests, %d MB after", before>>20, peak>>20, after>>20)
	if peak > before+128<<20 {
		t.Errorf("kiln grew from %d to %d MB under the flood, want at most 128 MB more", before>>20, peak>>20)
	}
	if after > before+48<<20 {
		t.Errorf("kiln holds %d MB after the socket and the kernel ended, %d before", after>>20, before>>20)
	}
}

// Two users of one API key (User-Id) do not reach each other's kernels, as they do not
// reach each other's sessions; the key without a user acts for all of its users, as on
// every route.
func TestAnotherUserOfTheKeyDoesNotReachTheKernel(t *testing.T) {
	marker := kilntest.NewMarker()
	u1 := as{"X-Api-Key": {keyA}, "User-Id": {"u1-" + marker}}
	u2 := as{"X-Api-Key": {keyA}, "User-Id": {"u2-" + marker}}
	id := startKernel(t, srv, u1)
	resp, body, err := srv.Request(http.MethodGet, "/jupyter/api/kernels", nil, http.Header(u2))
	if err != nil || resp.StatusCode != http.StatusOK || strings.Contains(string(body), id) {
		t.Errorf("u2 lists: %v %v %s; want u1's kernel not among them", err, status(resp), body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, ""}, {http.MethodPost, "/interrupt"}, {http.MethodPost, "/restart"}, {http.MethodDelete, ""},
		{http.MethodGet, "/channels"},
	} {
		resp, body, err := srv.Request(r.method, "/jupyter/api/kernels/"+id+r.path, nil, http.Header(u2))
		if err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("u2 %s %s: %v %v %s; want 404", r.method, r.path, err, status(resp), body)
		}
	}
	if _, resp, err := dial(t, srv, id, u2); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("u2 opens the kernel's WebSocket: %v %v; want 404", err, status(resp))
	}
	for _, who := range []as{u1, {"X-Api-Key": {keyA}}} {
		if resp, body, err := srv.Request(http.MethodGet, "/jupyter/api/kernels/"+id, nil, http.Header(who)); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%v GET the kernel: %v %v %s; want 200", who, err, status(resp), body)
		}
	}
}

// A kernel id is written in one spelling: the same id in upper case is not a second
// kernel of the same session (an interrupt under one spelling once missed the cell
// running under the other).
func TestAKernelIDInAnotherSpellingIsRefused(t *testing.T) {
	who := as{"X-Api-Key": {keyA}, "User-Id": {"spelling-" + kilntest.NewMarker()}}
	id := startKernel(t, srv, who)
	upper := strings.ToUpper(id)
	for _, path := range []string{"", "/interrupt", "/channels"} {
		method := http.MethodGet
		if path == "/interrupt" {
			method = http.MethodPost
		}
		resp, body, err := srv.Request(method, "/jupyter/api/kernels/"+upper+path, nil, http.Header(who))
		if err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s in upper case: %v %v %s; want 404", method, path, err, status(resp), body)
		}
	}
	resp, body, err := srv.Request(http.MethodGet, "/jupyter/api/kernels", nil, http.Header(who))
	if err != nil || resp.StatusCode != http.StatusOK || strings.Count(strings.ToLower(string(body)), id) != 1 {
		t.Errorf("the caller's kernels: %s; want the one kernel once", body)
	}
}

// Cells queued on a kernel when it is deleted never run: they are answered as aborted,
// the running one is interrupted, and no call of the caller runs afterwards. (They once
// ran after DELETE answered, each in a new session, egress and all.)
func TestCellsQueuedBeforeADeleteNeverRun(t *testing.T) {
	who := as{"X-Api-Key": {keyA}, "User-Id": {"queued-" + kilntest.NewMarker()}}
	id := startKernel(t, srv, who)
	sk := mustDial(t, srv, id, who)
	if r := sk.reply(sk.execute("ran = []"), 2*time.Minute); r.content()["status"] != "ok" {
		t.Fatalf("the first cell: %s", r.Content)
	}
	running := sk.execute("import time\ntime.sleep(20)")
	var queued []string
	for range 4 {
		queued = append(queued, sk.execute("ran.append(1)\nopen('/mnt/data/ran-after-delete', 'w').write('yes')"))
	}
	time.Sleep(time.Second) // the sleeping cell has begun
	start := time.Now()
	if resp, _, err := srv.Request(http.MethodDelete, "/jupyter/api/kernels/"+id, nil, http.Header(who)); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %v %v", err, status(resp))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("DELETE took %v: the running cell was not interrupted", took)
	}
	aborted := 0
	for {
		m, err := sk.read(10 * time.Second)
		if err != nil {
			break // the socket closed with the kernel
		}
		if m.MsgType != "execute_reply" {
			continue
		}
		st := m.content()["status"]
		for _, q := range queued {
			if m.parent() == q && st == "aborted" {
				aborted++
			}
			if m.parent() == q && st != "aborted" {
				t.Errorf("a queued cell answered %v after the kernel was deleted", st)
			}
		}
		if m.parent() == running && st == "ok" {
			t.Error("the running cell ran to its end: DELETE did not interrupt it")
		}
	}
	if aborted != len(queued) {
		t.Errorf("%d of the %d queued cells answered as aborted", aborted, len(queued))
	}
	time.Sleep(6 * time.Second) // as long as the review waited for a late cell
	resp, body, err := srv.Request(http.MethodGet, "/sessions", nil, http.Header(who))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sessions: %v %v %s", err, status(resp), body)
	}
	var list struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Sessions) != 0 {
		t.Errorf("the caller's sessions after DELETE: %s; want none (a queued cell ran)", body)
	}
}

// The bounds a kiln with small limits holds: kernels per caller, connections per kernel,
// bytes queued per connection, a new kernel past the storage quota, and a WebSocket
// opened with a token that expires.
func TestTheJupyterLayersBounds(t *testing.T) {
	const keyC, secret = "jupyter-key-bounds", "jupyter-bounds-secret-of-32-bytes-or-more"
	s, err := kilntest.Start(kilntest.Options{Key: keyC, Env: []string{
		"POOL_SIZE=1", "QUEUE_TIMEOUT_SECONDS=90", "API_KEYS=" + keyC, "DATA_DIR=" + t.TempDir(),
		"JWT_HS256_SECRET=" + secret, "JWT_ALGORITHMS=HS256",
		"QUOTA_STORAGE_MB=5", "JUPYTER_MAX_KERNELS=3", "JUPYTER_MAX_CONNECTIONS=2", "JUPYTER_MAX_QUEUED_MB=1",
	}})
	if err != nil {
		t.Fatalf("starting kiln: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(time.Minute); err != nil {
			t.Errorf("stopping kiln: %v", err)
		}
	})

	t.Run("kernels per caller", func(t *testing.T) {
		who := as{"X-Api-Key": {keyC}, "User-Id": {"many"}}
		for range 3 {
			startKernel(t, s, who)
		}
		resp, body, err := s.Request(http.MethodPost, "/jupyter/api/kernels", nil, http.Header(who))
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "JUPYTER_MAX_KERNELS") {
			t.Errorf("a fourth kernel: %v %v %s; want 429 naming JUPYTER_MAX_KERNELS", err, status(resp), body)
		}
		other := as{"X-Api-Key": {keyC}, "User-Id": {"another"}}
		startKernel(t, s, other) // another caller has its own
	})

	t.Run("connections and queued bytes", func(t *testing.T) {
		who := as{"X-Api-Key": {keyC}, "User-Id": {"sockets"}}
		id := startKernel(t, s, who)
		sk := mustDial(t, s, id, who)
		mustDial(t, s, id, who)
		if _, resp, err := dial(t, s, id, who); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a third connection: %v %v; want 429", err, status(resp))
		}
		if r := sk.reply(sk.execute("x = 1"), 2*time.Minute); r.content()["status"] != "ok" {
			t.Fatalf("the first cell: %s", r.Content)
		}
		running := sk.execute("import time\ntime.sleep(3)")
		time.Sleep(time.Second)
		cell := "# " + strings.Repeat("q", 400<<10) + "\nx += 1"
		a, b, c := sk.execute(cell), sk.execute(cell), sk.execute(cell)
		if r := sk.reply(c, time.Minute).content(); r["status"] != "error" || r["ename"] != "KernelBusy" {
			t.Errorf("a third cell of 400 KB queued: %v; want KernelBusy past JUPYTER_MAX_QUEUED_MB", r)
		}
		for _, id := range []string{running, a, b} {
			if r := sk.reply(id, time.Minute).content(); r["status"] != "ok" {
				t.Errorf("a cell within the bounds: %v", r)
			}
		}
		inspect := sk.send("inspect_request", map[string]any{"code": strings.Repeat("z", 2<<20), "cursor_pos": 1, "detail_level": 0})
		if r := sk.reply(inspect, time.Minute).content(); r["status"] != "error" {
			t.Errorf("a 2 MiB inspect_request: %v; want it refused", r)
		}
	})

	t.Run("storage quota", func(t *testing.T) {
		who := as{"X-Api-Key": {keyC}, "User-Id": {"hoarder"}}
		id := startKernel(t, s, who)
		sk := mustDial(t, s, id, who)
		if r := sk.reply(sk.execute("import os\nblob = os.urandom(5_500_000)"), 2*time.Minute); r.content()["status"] != "ok" {
			t.Fatalf("the cell: %s", r.Content)
		}
		var resp *http.Response
		var body []byte
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if resp, body, err = s.Request(http.MethodPost, "/jupyter/api/kernels", nil, http.Header(who)); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusCreated {
				break
			}
			var k struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(body, &k)
			_, _, _ = s.Request(http.MethodDelete, "/jupyter/api/kernels/"+k.ID, nil, http.Header(who))
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "QUOTA_STORAGE_MB") {
			t.Errorf("a kernel past the quota: %v %s; want 413 naming QUOTA_STORAGE_MB", status(resp), body)
		}
	})

	t.Run("a token's expiry closes its socket", func(t *testing.T) {
		// A token past its exp is still accepted within the skew (30 s): this one's last
		// moment is a few seconds away.
		now := time.Now()
		token := hs256(t, secret, map[string]any{
			"iss": "librechat", "aud": "codeapi", "sub": "66a0c0ffee00000000000e0e", "tenant_id": "acme",
			"iat": now.Add(-60 * time.Second).Unix(), "nbf": now.Add(-60 * time.Second).Unix(), "exp": now.Add(-24 * time.Second).Unix(),
			"jti": kilntest.NewMarker(), "role": "USER", "principal_source": "librechat_jwt", "auth_context_hash": "test",
		})
		who := as{"Authorization": {"Bearer " + token}}
		id := startKernel(t, s, who)
		sk := mustDial(t, s, id, who)
		if r := sk.reply(sk.execute("x = 1"), 2*time.Minute); r.content()["status"] != "ok" {
			t.Fatalf("a cell while the token holds: %s", r.Content)
		}
		var err error
		for err == nil {
			_, err = sk.read(30 * time.Second)
		}
		if time.Since(now) > 20*time.Second || websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("the socket ended %v after the token was minted with %v; want a policy-violation close at its expiry", time.Since(now), err)
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "expired") {
			t.Errorf("close reason %q, want one that says the token expired", ce.Reason)
		}
		if resp, _, err := s.Request(http.MethodGet, "/jupyter/api/kernels", nil, http.Header(who)); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("REST with the expired token: %v %v; want 401", err, status(resp))
		}
	})
}

// hs256 signs claims with secret as HS256, with the header LibreChat writes (kid hs256,
// kiln's default for JWT_HS256_KID).
func hs256(t *testing.T, secret string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), "hs256")
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte(secret)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Cells take the caller's execution slots as POST /exec does: with a cap of two, three
// kernels of one key run at most two cells at once, and REST meets the same cap meanwhile.
func TestCellsOfOneKeyShareItsConcurrencyCap(t *testing.T) {
	const keyD = "jupyter-key-slots"
	s, err := kilntest.Start(kilntest.Options{Key: keyD, Env: []string{
		"POOL_SIZE=3", "QUEUE_TIMEOUT_SECONDS=90", "API_KEYS=" + keyD, "DATA_DIR=" + t.TempDir(),
		"MAX_CONCURRENT_PER_KEY=2",
	}})
	if err != nil {
		t.Fatalf("starting kiln: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(time.Minute); err != nil {
			t.Errorf("stopping kiln: %v", err)
		}
	})
	who := as{"X-Api-Key": {keyD}, "User-Id": {"three-notebooks"}}
	var socks []*socket
	for range 3 {
		sk := mustDial(t, s, startKernel(t, s, who), who)
		if r := sk.reply(sk.execute("x = 1"), 2*time.Minute); r.content()["status"] != "ok" {
			t.Fatalf("a kernel's first cell: %s", r.Content)
		}
		socks = append(socks, sk)
	}
	sleep := "import time\ntime.sleep(4)\nx = 2"
	first, second := socks[0].execute(sleep), socks[1].execute(sleep)
	time.Sleep(1500 * time.Millisecond) // both are running
	third := socks[2].reply(socks[2].execute("x = 3"), time.Minute).content()
	evalue, _ := third["evalue"].(string)
	if third["status"] != "error" || third["ename"] != "QuotaExceeded" || !strings.Contains(evalue, "MAX_CONCURRENT_PER_KEY") {
		t.Errorf("a third cell while two run: %v; want a QuotaExceeded error naming MAX_CONCURRENT_PER_KEY", third)
	}
	resp, body, err := s.Request(http.MethodPost, "/exec", strings.NewReader(`{"code": "print(1)"}`),
		who.with("Content-Type", "application/json"))
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("POST /exec while two cells run: %v %v %s; want 429", err, status(resp), body)
	}
	mcpc := mcpClient(t, s, keyD)
	if res, err := mcpc.CallTool(t.Context(), &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": "print(1)"}}); err != nil ||
		!res.IsError || !strings.Contains(toolText(res), "MAX_CONCURRENT_PER_KEY") {
		t.Errorf("MCP's execute while two cells run: %v %v; want a tool error naming MAX_CONCURRENT_PER_KEY", err, toolText(res))
	}
	for i, id := range []string{first, second} {
		if r := socks[i].reply(id, time.Minute).content(); r["status"] != "ok" {
			t.Errorf("a cell within the cap: %v", r)
		}
	}
	// The refused cell did not run, and its kernel runs the next one once a slot is free.
	if r := socks[2].reply(socks[2].execute("assert x == 1, x"), time.Minute).content(); r["status"] != "ok" {
		t.Errorf("the third kernel after the others finished: %v", r)
	}
	// Any mix of front ends meets the same cap: a REST run and an MCP run leave no slot
	// for a cell.
	restDone, mcpDone := make(chan error, 1), make(chan error, 1)
	go func() {
		resp, body, err := s.Request(http.MethodPost, "/exec", strings.NewReader(`{"code": "import time\ntime.sleep(4)"}`),
			who.with("Content-Type", "application/json"))
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		restDone <- err
	}()
	go func() {
		res, err := mcpc.CallTool(context.Background(), &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": "import time\ntime.sleep(4)"}})
		if err == nil && res.IsError {
			err = errors.New(toolText(res))
		}
		mcpDone <- err
	}()
	time.Sleep(2 * time.Second) // both are running
	if r := socks[1].reply(socks[1].execute("z = 1"), time.Minute).content(); r["ename"] != "QuotaExceeded" {
		t.Errorf("a cell while a REST run and an MCP run go: %v; want QuotaExceeded", r)
	}
	for name, done := range map[string]chan error{"the REST run": restDone, "the MCP run": mcpDone} {
		if err := <-done; err != nil {
			t.Errorf("%s within the cap: %v", name, err)
		}
	}
	// Each refusal is counted once, whichever front end it came through: two cells, a
	// POST /exec and an MCP call. (Only REST's were, once.)
	if _, body, err := s.Request(http.MethodGet, "/metrics", nil, http.Header(who)); err != nil ||
		!strings.Contains(string(body), `kiln_quota_refusals_total{kind="concurrency"} 4`) {
		t.Errorf("/metrics: %v; want kiln_quota_refusals_total{kind=\"concurrency\"} 4 among\n%s", err, grepLines(string(body), "kiln_quota_refusals_total"))
	}
	// A cell's slot is free once it has answered: while one kernel holds a slot, the other
	// two run cells turn about, each sent as the one before answers, and none is refused.
	// (The slot was once freed just after the reply, so the next cell could miss it.)
	held := socks[0].execute("import time\ntime.sleep(3)")
	time.Sleep(500 * time.Millisecond)
	for i := range 40 {
		sk := socks[1+i%2]
		if r := sk.reply(sk.execute("y = 1"), time.Minute).content(); r["status"] != "ok" {
			t.Fatalf("cell %d of 40 run turn about beside a held slot: %v", i+1, r)
		}
	}
	if r := socks[0].reply(held, time.Minute).content(); r["status"] != "ok" {
		t.Errorf("the cell that held a slot: %v", r)
	}
}

// mcpClient is an MCP session with s under key, closed when the test ends.
func mcpClient(t *testing.T, s *kilntest.Server, key string) *sdk.ClientSession {
	t.Helper()
	cl := sdk.NewClient(&sdk.Implementation{Name: "kiln-jupyter-test", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint: s.URL + "/mcp", HTTPClient: &http.Client{Transport: keyed(key)}}, nil)
	if err != nil {
		t.Fatalf("connecting to /mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// keyed sends each request with the API key it is.
type keyed string

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// toolText is the text of a tool's answer.
func toolText(res *sdk.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// grepLines is the lines of text that hold sub.
func grepLines(text, sub string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
