package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kilnsh/kiln/e2b/gen/process"
	"github.com/kilnsh/kiln/e2b/gen/process/processconnect"
)

// protoCounter records the HTTP version of every answer.
type protoCounter struct {
	next http.RoundTripper
	h2   atomic.Int32
	n    atomic.Int32
}

func (p *protoCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if err == nil {
		p.n.Add(1)
		if resp.ProtoMajor == 2 {
			p.h2.Add(1)
		}
	}
	return resp, err
}

// TestEnvdOverH2C: envd's process service answers Connect's binary codec and gRPC over
// HTTP/2 without TLS, as E2B's envd does for clients other than the JS SDK's fetch.
func TestEnvdOverH2C(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	box := createBox(ctx, t, keyA)

	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	counter := &protoCounter{next: &http.Transport{Protocols: protocols}}
	client := &http.Client{Transport: counter}
	headers := box.headers()
	for name, opts := range map[string][]connect.ClientOption{
		"connect binary": {headers},
		"grpc":           {headers, connect.WithGRPC()},
	} {
		procs := processconnect.NewProcessClient(client, srv.URL, opts...)
		stream, err := procs.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{
			Cmd: "/bin/bash", Args: []string{"-c", "printf 'over h2\\0%s' \"$WHO\"; exit 4"}, Envs: map[string]string{"WHO": name},
		}}))
		if err != nil {
			t.Fatalf("%s: start: %v", name, err)
		}
		var out bytes.Buffer
		var end *process.ProcessEvent_EndEvent
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			out.Write(ev.GetData().GetStdout())
			if e := ev.GetEnd(); e != nil {
				end = e
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("%s: stream: %v", name, err)
		}
		stream.Close()
		if want := "over h2\x00" + name; out.String() != want || end == nil || end.GetExitCode() != 4 || !end.GetExited() {
			t.Errorf("%s: got stdout %q and end %v, want %q and exit code 4", name, out.String(), end, want)
		}
	}
	if counter.n.Load() == 0 || counter.h2.Load() != counter.n.Load() {
		t.Errorf("%d of %d answers were HTTP/2, want all", counter.h2.Load(), counter.n.Load())
	}
}

// held is a sandbox created over E2B's control plane, with what reaching its envd takes.
type held struct {
	SandboxID       string `json:"sandboxID"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// headers are the routing headers and the token for each of the sandbox's envd calls.
func (b held) headers() connect.ClientOption {
	return connect.WithInterceptors(headerInterceptor{
		"E2b-Sandbox-Id": b.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": b.EnvdAccessToken,
	})
}

// createBox creates a secure sandbox for the key's caller, killed when the test ends.
func createBox(ctx context.Context, t *testing.T, key string) held {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"base","secure":true}`))
	req.Header.Set("X-API-KEY", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var box held
	err = json.NewDecoder(resp.Body).Decode(&box)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil || box.SandboxID == "" || box.EnvdAccessToken == "" {
		t.Fatalf("create: %d %+v %v, want 201 with an id and a token", resp.StatusCode, box, err)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", srv.URL+"/sandboxes/"+box.SandboxID, nil)
		req.Header.Set("X-API-KEY", key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return box
}

// headerInterceptor sets E2B's routing headers and the access token on every call.
type headerInterceptor map[string]string

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		for k, v := range h {
			req.Header().Set(k, v)
		}
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		for k, v := range h {
			conn.RequestHeader().Set(k, v)
		}
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
