// Package replicas runs three kiln replicas on one Redis, with their files in an S3
// bucket (versitygw), behind a round-robin proxy of the test's own, as an operator runs
// them behind a load balancer, and checks that any replica answers any request: a live
// session's calls, a stream's cancel, a programmatic run's continuation and cancel, an
// MCP session's messages, files written through one and read through another; that a
// replica killed with SIGKILL loses nothing that was answered; that a forged forward is
// refused; and, under steady traffic, that killing a replica and restarting Redis and
// the object store never hands a session an older value.
package replicas

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln/objstore"
	"github.com/kilnsh/kiln/test/kilntest"
)

const key = "replicas-test-key"

func TestMain(m *testing.M) {
	if err := kilntest.EnsureDocker(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// cluster is three replicas and the proxy in front of them.
type cluster struct {
	t        *testing.T
	redis    *kilntest.DurableRedis
	s3       *kilntest.S3
	secret   string
	mu       sync.Mutex
	replicas []*kilntest.Server
	ports    []string
	proxy    *httptest.Server
	next     atomic.Int64
}

// startCluster starts n replicas sharing a Redis and a peer secret, each announcing the
// loopback URL it listens on, and a proxy that hands each request to the next replica.
func startCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, redis: kilntest.StartDurableRedis(t), s3: kilntest.StartS3(t)}
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	c.secret = hex.EncodeToString(secret)
	c.replicas = make([]*kilntest.Server, n)
	c.ports = make([]string, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		c.ports[i] = kilntest.FreePort(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.replicas[i], errs[i] = c.start(i, "")
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range c.replicas {
			if s != nil {
				if err := s.Stop(60 * time.Second); err != nil {
					t.Errorf("replica %s did not stop cleanly: %v\n%s", s.Instance, err, tail(s.Logs()))
				}
			}
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.proxy = httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := int(c.next.Add(1)) % n
			c.mu.Lock()
			u, _ := url.Parse(c.replicas[i].URL)
			c.mu.Unlock()
			pr.SetURL(u)
			pr.Out.Header.Set("X-Test-Replica", fmt.Sprint(i))
		},
		FlushInterval: -1,
	})
	t.Cleanup(c.proxy.Close)
	return c
}

// start runs replica i; instance, when given, is the id it had before a restart.
func (c *cluster) start(i int, instance string) (*kilntest.Server, error) {
	env := []string{"POOL_SIZE=1", "REDIS_URL=" + c.redis.URL, "API_KEYS=" + key, "QUEUE_TIMEOUT_SECONDS=90",
		"S3_ENDPOINT=" + c.s3.Endpoint, "S3_BUCKET=kiln", "S3_PATH_STYLE=true", "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=" + c.s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + c.s3.SecretKey,
		"LISTEN_ADDR=127.0.0.1:" + c.ports[i], "ADVERTISE_URL=http://127.0.0.1:" + c.ports[i], "PEER_SECRET=" + c.secret,
		// The strict order: a replica killed with SIGKILL loses nothing that was answered.
		// With a delay, what was answered state_pending within it before the kill is lost
		// (docs/operations.md, When a replica goes); a drain stores it first.
		"STATE_SAVE_DELAY_MS=0"}
	if instance != "" {
		env = append(env, "INSTANCE_ID="+instance)
	}
	return kilntest.Start(kilntest.Options{Key: key, Env: env})
}

// restart starts replica i again, stopped or killed, under its instance id: it sweeps
// the sandboxes it left.
func (c *cluster) restart(i int) error {
	c.mu.Lock()
	instance := c.replicas[i].Instance
	c.mu.Unlock()
	back, err := c.start(i, instance)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.replicas[i] = back
	c.mu.Unlock()
	return nil
}

func tail(s string) string { return s[max(0, len(s)-6000):] }

// post sends a JSON body to base+path with the key and decodes the JSON answer.
func post(t *testing.T, base, path string, body any, header http.Header, out any) int {
	t.Helper()
	code, raw, err := tryPost(base, path, body, header)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("POST %s%s: status %d, undecodable %q", base, path, code, raw)
		}
	}
	return code
}

// tryPost sends a JSON body to base+path with the key and returns the answer's status
// and body.
func tryPost(base, path string, body any, header http.Header) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("POST %s%s: %v", base, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func exec(t *testing.T, base string, body map[string]any) kilntest.ExecResponse {
	t.Helper()
	var res kilntest.ExecResponse
	if code := post(t, base, "/exec", body, nil, &res); code != http.StatusOK {
		t.Fatalf("POST /exec on %s: status %d: %s", base, code, res.Message)
	}
	return res
}

// forwardedTo counts the requests replica s forwarded to another.
func forwardedTo(s *kilntest.Server) int { return strings.Count(s.Logs(), `"forwarded_to"`) }

// forwards sums a replica's kiln_replica_forwards_total of one kind (how) over routes.
func forwards(t *testing.T, s *kilntest.Server, how string) int {
	t.Helper()
	return int(kilntest.MetricSum(s.Metrics(t), `kiln_replica_forwards_total{how="`+how+`",`))
}

func TestReplicas(t *testing.T) {
	c := startCluster(t, 3)
	r := c.replicas

	// A session made on replica 0 keeps its interpreter there: calls that reach
	// replicas 1 and 2 are forwarded to it. The generator proves it is the same
	// interpreter: no stored state can carry one.
	var sid string
	t.Run("a live session is served by its owner through every replica", func(t *testing.T) {
		first := exec(t, r[0].URL, map[string]any{"code": "import numpy as np, pandas as pd\n" +
			"df = pd.DataFrame({'a': np.arange(20000), 'b': np.linspace(0, 1, 20000)})\n" +
			"def counter():\n    n = 0\n    while True:\n        n += 1\n        yield n\n" +
			"g = counter()\nnext(g)"})
		if first.Status != "ok" || kilntest.Str(first.Result) != "1" {
			t.Fatalf("first call: %s %s stderr %q", first.Status, kilntest.Str(first.Result), first.Stderr)
		}
		sid = first.SessionID
		before := forwardedTo(r[1]) + forwardedTo(r[2])
		sent, received := forwards(t, r[1], "to_owner")+forwards(t, r[2], "to_owner"), forwards(t, r[0], "from_replica")
		for i := 2; i <= 7; i++ {
			res := exec(t, r[(i-1)%3].URL, map[string]any{"session_id": sid, "code": "next(g), int(df.a.sum()), round(float(df.b.mean()), 3)"})
			want := fmt.Sprintf("(%d, 199990000, 0.5)", i)
			if kilntest.Str(res.Result) != want || res.RuntimeStatus != "reused" {
				t.Fatalf("call %d through replica %d: %s (%s), want %s reused; stderr %q", i, (i-1)%3, kilntest.Str(res.Result), res.RuntimeStatus, want, res.Stderr)
			}
		}
		if got := forwardedTo(r[1]) + forwardedTo(r[2]) - before; got != 4 {
			t.Errorf("replicas 1 and 2 forwarded %d calls, want 4", got)
		}
		sent = forwards(t, r[1], "to_owner") + forwards(t, r[2], "to_owner") - sent
		if received = forwards(t, r[0], "from_replica") - received; sent != 4 || received != 4 {
			t.Errorf("kiln_replica_forwards_total: replicas 1 and 2 sent %d, replica 0 received %d; want 4 and 4", sent, received)
		}
		// Through the round-robin proxy, as a client behind a load balancer.
		for i := 8; i <= 10; i++ {
			res := exec(t, c.proxy.URL, map[string]any{"session_id": sid, "code": "next(g)"})
			if kilntest.Str(res.Result) != fmt.Sprint(i) || res.RuntimeStatus != "reused" {
				t.Fatalf("call %d through the proxy: %s (%s)", i, kilntest.Str(res.Result), res.RuntimeStatus)
			}
		}
	})

	t.Run("a stream started on one replica is cancelled through another", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var (
			execID string
			done   string
			mu     sync.Mutex
		)
		started := make(chan struct{})
		ended := make(chan error, 1)
		go func() {
			_, body, err := kilntest.StreamURL(ctx, r[1].URL, key, map[string]any{"code": "import time\nprint('going', flush=True)\ntime.sleep(60)"}, func(e kilntest.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e.Name {
				case "start":
					_, execID = e.Start()
					close(started)
				case "done":
					done = e.Data
				}
			})
			if err == nil && body != nil {
				err = fmt.Errorf("stream refused: %s", body)
			}
			ended <- err
		}()
		select {
		case <-started:
		case err := <-ended:
			t.Fatalf("the stream ended before it started: %v", err)
		case <-ctx.Done():
			t.Fatal("no start event")
		}
		mu.Lock()
		id := execID
		mu.Unlock()
		var ack map[string]string
		if code := post(t, r[2].URL, "/executions/"+id+"/cancel", nil, nil, &ack); code != http.StatusAccepted {
			t.Fatalf("cancel through replica 2: status %d %v, want 202", code, ack)
		}
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
		var res kilntest.ExecResponse
		_ = json.Unmarshal([]byte(done), &res)
		if res.Status != "cancelled" {
			t.Errorf("the run ended %q, want cancelled: %s", res.Status, done)
		}
	})

	type ptcAnswer struct {
		Status            string `json:"status"`
		ContinuationToken string `json:"continuation_token"`
		ToolCalls         []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
		Stdout  string `json:"stdout"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	tool := map[string]any{"name": "fetch", "description": "the test's tool",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}
	t.Run("a programmatic run continues and is cancelled through other replicas", func(t *testing.T) {
		var a ptcAnswer
		code := post(t, r[0].URL, "/exec/programmatic", map[string]any{"code": "r = await fetch()\nprint('got', r)", "tools": []any{tool}}, nil, &a)
		if code != http.StatusOK || a.Status != "tool_call_required" || len(a.ToolCalls) != 1 {
			t.Fatalf("start on replica 0: %d %+v", code, a)
		}
		var end ptcAnswer
		code = post(t, r[1].URL, "/exec/programmatic", map[string]any{"continuation_token": a.ContinuationToken,
			"tool_results": []any{map[string]any{"call_id": a.ToolCalls[0].ID, "result": "one"}}}, nil, &end)
		if code != http.StatusOK || end.Status != "completed" || end.Stdout != "got one\n" {
			t.Fatalf("continuation through replica 1: %d %+v", code, end)
		}

		rid := fmt.Sprintf("replicas-%d", time.Now().UnixNano())
		ended := make(chan ptcAnswer, 1)
		go func() {
			var out ptcAnswer
			post(t, r[2].URL, "/exec/programmatic", map[string]any{"code": "import time\ntime.sleep(60)\nawait fetch()", "tools": []any{tool}},
				http.Header{"X-Librechat-Code-Request-Id": {rid}}, &out)
			ended <- out
		}()
		kilntest.WaitFor(t, 60*time.Second, "the program to start on replica 2", func() bool { return r[2].MustPool(t).InUse == 1 })
		var ack map[string]string
		if code := post(t, r[0].URL, "/exec/programmatic/cancel", map[string]any{"request_id": rid}, nil, &ack); code != http.StatusAccepted || ack["status"] != "cancellation_requested" {
			t.Fatalf("cancel through replica 0: %d %v, want 202 cancellation_requested", code, ack)
		}
		select {
		case out := <-ended:
			if out.Status == "completed" || out.Status == "tool_call_required" {
				t.Errorf("the cancelled run answered %+v", out)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled run did not end within 30 s")
		}
	})

	t.Run("an MCP session works through the round-robin proxy", func(t *testing.T) {
		cl := sdk.NewClient(&sdk.Implementation{Name: "kiln-replicas-test", Version: "1"}, nil)
		cs, err := cl.Connect(t.Context(), &sdk.StreamableClientTransport{
			Endpoint: c.proxy.URL + "/mcp", HTTPClient: &http.Client{Transport: keyed(key)},
		}, nil)
		if err != nil {
			t.Fatalf("Connect through the proxy: %v", err)
		}
		defer cs.Close()
		for i := range 4 {
			code := "x = 41"
			if i > 0 {
				code = "x += 1\nprint(x)"
			}
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": code}})
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			var out map[string]any
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &out)
			if res.IsError || (i > 0 && (out["stdout"] != fmt.Sprintf("%d\n", 41+i) || out["runtime_status"] != "reused")) {
				t.Fatalf("call %d: %s", i, b)
			}
		}
	})

	// The clients' own suites, through the round-robin proxy: LibreChat's programmatic
	// tool calling (each continuation may land on any replica), and the MCP TypeScript
	// SDK (each message may).
	t.Run("LibreChat's programmatic client through the proxy", func(t *testing.T) {
		c.mu.Lock()
		urls := make([]string, len(c.replicas))
		for i, s := range c.replicas {
			urls[i] = s.URL
		}
		c.mu.Unlock()
		kilntest.NodeTest(t, "test/ptc/node", "ptc.test.mjs", "@librechat/agents", "test-ptc-deps",
			"KILN_URL="+c.proxy.URL, "KILN_API_KEY="+key, "KILN_REPLICA_URLS="+strings.Join(urls, ","))
	})
	t.Run("the MCP TypeScript SDK through the proxy", func(t *testing.T) {
		bin, err := kilntest.Binary()
		if err != nil {
			t.Fatal(err)
		}
		kilntest.NodeTest(t, "test/mcp/node", "kiln-mcp.test.mjs", "@modelcontextprotocol/sdk", "test-mcp-deps",
			"KILN_URL="+c.proxy.URL, "KILN_API_KEY="+key, "KILN_BIN="+bin)
	})

	t.Run("a file written through one replica is read through another, from the bucket", func(t *testing.T) {
		res := exec(t, r[1].URL, map[string]any{"code": "import pandas as pd, numpy as np\n" +
			"df = pd.DataFrame({'i': np.arange(60000), 'sq': np.arange(60000) ** 2})\n" +
			"df.to_csv('/mnt/data/squares.csv', index=False)\nlen(df)"})
		if res.Status != "ok" || len(res.Files) != 1 || res.Files[0].Size < 64<<10 {
			t.Fatalf("writing the file: %s %+v stderr %q", res.Status, res.Files, res.Stderr)
		}
		f := res.Files[0]
		resp, body, err := r[2].Request(http.MethodGet, "/download/"+res.SessionID+"/"+f.ID, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		if resp.StatusCode != http.StatusOK || int64(len(body)) != f.Size || len(lines) != 60001 || lines[60000] != "59999,3599880001" {
			t.Fatalf("download through replica 2: %d, %d bytes of %d, %d lines", resp.StatusCode, len(body), f.Size, len(lines))
		}
		bucket, err := objstore.Open(t.Context(), objstore.Config{Endpoint: c.s3.Endpoint, Bucket: "kiln", Region: "us-east-1",
			AccessKey: c.s3.AccessKey, SecretKey: c.s3.SecretKey, PathStyle: true})
		if err != nil {
			t.Fatal(err)
		}
		if keys, err := bucket.List(t.Context(), "files/"+res.SessionID+"/"+f.ID+"/", time.Now().Add(time.Hour)); err != nil || len(keys) != 1 {
			t.Errorf("the file's objects in the bucket: %v %v, want one", keys, err)
		}
		if keys, _ := bucket.List(t.Context(), "state/"+res.SessionID+"/", time.Now().Add(time.Hour)); len(keys) != 1 {
			t.Errorf("the session's state objects in the bucket: %v, want one", keys)
		}
		// An upload through replica 2 streams to the bucket (spooled past 64 KiB, never
		// held whole); a run through replica 0 reads it back from there.
		var csv bytes.Buffer
		csv.WriteString("sku,units\n")
		for i := 0; csv.Len() < 1<<20; i++ {
			fmt.Fprintf(&csv, "SKU-%05d,%d\n", i, i%17)
		}
		var form bytes.Buffer
		mw := multipart.NewWriter(&form)
		fw, _ := mw.CreateFormFile("file", "inventory.csv")
		fw.Write(csv.Bytes())
		mw.Close()
		resp, b, err := r[2].Request(http.MethodPost, "/upload", &form, http.Header{"Content-Type": {mw.FormDataContentType()}})
		var up struct {
			SessionID string `json:"session_id"`
			Files     []struct {
				FileID string `json:"fileId"`
			} `json:"files"`
		}
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &up) != nil || len(up.Files) != 1 {
			t.Fatalf("upload through replica 2: %v %s", err, b)
		}
		if keys, err := bucket.List(t.Context(), "files/"+up.SessionID+"/"+up.Files[0].FileID+"/", time.Now().Add(time.Hour)); err != nil || len(keys) != 1 {
			t.Errorf("the upload's objects in the bucket: %v %v, want one", keys, err)
		}
		read := exec(t, r[0].URL, map[string]any{"files": []map[string]string{{"id": up.Files[0].FileID, "session_id": up.SessionID, "name": "inventory.csv"}},
			"code": "import pandas as pd\ninv = pd.read_csv('inventory.csv')\nlen(inv), int(inv.units.sum())"})
		rows := strings.Count(csv.String(), "\n") - 1
		units := 0
		for i := range rows {
			units += i % 17
		}
		if want := fmt.Sprintf("(%d, %d)", rows, units); kilntest.Str(read.Result) != want {
			t.Errorf("the upload read through replica 0: %s (%s), want %s; stderr %q", kilntest.Str(read.Result), read.Status, want, read.Stderr)
		}

		// The session goes on through the third replica, in its live interpreter.
		again := exec(t, r[0].URL, map[string]any{"session_id": res.SessionID, "code": "int(pd.read_csv('/mnt/data/squares.csv').sq.sum() == df.sq.sum())"})
		if kilntest.Str(again.Result) != "1" || again.RuntimeStatus != "reused" {
			t.Errorf("through replica 0: %s (%s) stderr %q", kilntest.Str(again.Result), again.RuntimeStatus, again.Stderr)
		}
	})

	t.Run("a forged forward is refused", func(t *testing.T) {
		var e kilntest.ErrorBody
		code := post(t, r[0].URL, "/exec", map[string]any{"code": "1"}, http.Header{
			"X-Kiln-Peer": {"impostor"}, "X-Kiln-Peer-Time": {fmt.Sprint(time.Now().Unix())}, "X-Kiln-Peer-Signature": {strings.Repeat("0", 64)},
		}, &e)
		if code != http.StatusUnauthorized || !strings.Contains(e.Message, "impostor") {
			t.Errorf("forged peer request: %d %+v, want 401 naming the claimed replica", code, e)
		}
	})

	// Replica 2 drains (SIGTERM, as in a rolling update) while it holds a paused run and
	// a live session: the run's continuation still reaches it and completes; the
	// session's next call resumes on another replica from the store.
	t.Run("a draining replica finishes its runs and gives its sessions up", func(t *testing.T) {
		held := exec(t, r[2].URL, map[string]any{"code": "import numpy as np\nw = np.arange(30000) * 3\nint(w.sum())"})
		var a ptcAnswer
		if code := post(t, r[2].URL, "/exec/programmatic", map[string]any{"code": "r = await fetch()\nprint('after the drain:', r)", "tools": []any{tool}}, nil, &a); code != http.StatusOK || a.Status != "tool_call_required" {
			t.Fatalf("start on replica 2: %d %+v", code, a)
		}
		draining := r[2]
		stopped := make(chan error, 1)
		go func() { stopped <- draining.Stop(90 * time.Second) }()
		kilntest.WaitFor(t, 10*time.Second, "replica 2 to announce its drain", func() bool {
			return strings.Contains(draining.Logs(), "waiting for in-flight executions")
		})
		var end ptcAnswer
		code := post(t, r[0].URL, "/exec/programmatic", map[string]any{"continuation_token": a.ContinuationToken,
			"tool_results": []any{map[string]any{"call_id": a.ToolCalls[0].ID, "result": "kept"}}}, nil, &end)
		if code != http.StatusOK || end.Status != "completed" || end.Stdout != "after the drain: kept\n" {
			t.Errorf("continuation through replica 0 while replica 2 drains: %d %+v", code, end)
		}
		res := exec(t, r[1].URL, map[string]any{"session_id": held.SessionID, "code": "int(w.sum())"})
		if kilntest.Str(res.Result) != kilntest.Str(held.Result) || res.RuntimeStatus != "resumed" {
			t.Errorf("the draining replica's session through replica 1: %s (%s), want %s resumed", kilntest.Str(res.Result), res.RuntimeStatus, kilntest.Str(held.Result))
		}
		if err := <-stopped; err != nil {
			t.Errorf("replica 2 did not stop cleanly: %v", err)
		}
		if err := c.restart(2); err != nil {
			t.Fatal(err)
		}
	})

	// Replica 0 owns the session and a paused run; it dies. The session resumes on
	// another replica from its stored state (the generator, which no state can carry,
	// is gone, and said to be); the run ends with a clear error; the replica comes
	// back under its instance id and sweeps the sandboxes it left.
	t.Run("a replica killed with SIGKILL loses nothing that was answered", func(t *testing.T) {
		var a ptcAnswer
		if code := post(t, r[0].URL, "/exec/programmatic", map[string]any{"code": "await fetch()", "tools": []any{tool}}, nil, &a); code != http.StatusOK || a.Status != "tool_call_required" {
			t.Fatalf("start on replica 0: %d %+v", code, a)
		}
		dead := r[0]
		left, err := kilntest.Containers(dead.Instance)
		if err != nil || len(left) == 0 {
			t.Fatalf("replica 0's sandboxes: %v %v", left, err)
		}
		dead.Kill()

		// At once: replica 0 is still announced, but cannot be reached.
		res := exec(t, r[1].URL, map[string]any{"session_id": sid, "code": "int(df.a.sum()), 'g' in globals()"})
		if res.Status != "ok" || kilntest.Str(res.Result) != "(199990000, False)" || res.RuntimeStatus != "resumed" {
			t.Errorf("after the owner died: %s %s (%s), want the DataFrame resumed without g; stderr %q", res.Status, kilntest.Str(res.Result), res.RuntimeStatus, res.Stderr)
		}
		again := exec(t, r[2].URL, map[string]any{"session_id": sid, "code": "df.shape"})
		if kilntest.Str(again.Result) != "(20000, 2)" || again.RuntimeStatus != "reused" {
			t.Errorf("the next call through replica 2: %s (%s), want reused on its new owner", kilntest.Str(again.Result), again.RuntimeStatus)
		}
		var gone ptcAnswer
		// Once its announcement has expired (10 s), the token's replica is gone for good.
		time.Sleep(11 * time.Second)
		code := post(t, r[2].URL, "/exec/programmatic", map[string]any{"continuation_token": a.ContinuationToken,
			"tool_results": []any{map[string]any{"call_id": a.ToolCalls[0].ID, "result": 1}}}, nil, &gone)
		if code != http.StatusNotFound || !strings.Contains(gone.Message, "gone") {
			t.Errorf("continuation of the dead replica's run: %d %+v, want 404 saying its replica is gone", code, gone)
		}

		if err := c.restart(0); err != nil {
			t.Fatal(err)
		}
		for _, id := range left {
			if ok, _ := kilntest.SandboxExists(id); ok {
				t.Errorf("sandbox %s of the killed replica is still there after its restart", id)
			}
		}
		res = exec(t, c.proxy.URL, map[string]any{"session_id": sid, "code": "len(df)"})
		if kilntest.Str(res.Result) != "20000" {
			t.Errorf("after the restart, through the proxy: %s", kilntest.Str(res.Result))
		}
	})

	// Steady traffic through the proxy, three sessions each counting its calls, while a
	// replica is killed and comes back, then the object store and Redis restart. A call
	// may fail while a part is down, with an error; an answered one never shows an older
	// count than an earlier answer, and each session ends with every answered call kept.
	t.Run("a replica killed, the object store and Redis restarted, under traffic", func(t *testing.T) {
		type tally struct {
			sid              string
			answered, failed int
			last             int
			errs             []string
		}
		tallies := make([]*tally, 3)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range tallies {
			first := exec(t, c.proxy.URL, map[string]any{"code": "n = 0\nn"})
			tallies[w] = &tally{sid: first.SessionID}
			wg.Add(1)
			go func(tl *tally) {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var res kilntest.ExecResponse
					code, raw, err := tryPost(c.proxy.URL, "/exec", map[string]any{"session_id": tl.sid,
						"code": "n += 1\nopen('/mnt/data/n.txt', 'w').write(str(n))\nn"}, nil)
					if err == nil && code == http.StatusOK {
						err = json.Unmarshal(raw, &res)
					}
					var n int
					if err == nil && code == http.StatusOK && res.Status == "ok" {
						if _, err := fmt.Sscan(kilntest.Str(res.Result), &n); err == nil {
							if n <= tl.last {
								tl.errs = append(tl.errs, fmt.Sprintf("an answer of %d after one of %d", n, tl.last))
							}
							tl.last = n
							tl.answered++
							continue
						}
					}
					tl.failed++
					time.Sleep(200 * time.Millisecond)
				}
			}(tallies[w])
		}
		step := func(what string, do func() error) {
			time.Sleep(4 * time.Second)
			t.Logf("%s", what)
			if err := do(); err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		step("killing replica 1", func() error {
			c.replicas[1].Kill()
			return nil
		})
		step("restarting replica 1", func() error { return c.restart(1) })
		step("restarting the object store", c.s3.Restart)
		step("restarting Redis", c.redis.Restart)
		time.Sleep(6 * time.Second)
		close(stop)
		wg.Wait()
		for i, tl := range tallies {
			t.Logf("session %d: %d answered, %d failed, last %d", i, tl.answered, tl.failed, tl.last)
			for _, e := range tl.errs {
				t.Errorf("session %d: %s", i, e)
			}
			if tl.answered < 10 {
				t.Errorf("session %d: only %d calls answered", i, tl.answered)
			}
			end := exec(t, c.proxy.URL, map[string]any{"session_id": tl.sid, "code": "n, int(open('/mnt/data/n.txt').read())"})
			var n, inFile int
			if _, err := fmt.Sscanf(kilntest.Str(end.Result), "(%d, %d)", &n, &inFile); err != nil || n < tl.last || n > tl.last+tl.failed || inFile != n {
				t.Errorf("session %d after the soak: %s, want its count (and file) at least the last answer %d, at most %d", i, kilntest.Str(end.Result), tl.last, tl.last+tl.failed)
			}
		}
	})
}

type keyed string

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", string(k))
	return http.DefaultTransport.RoundTrip(r)
}
