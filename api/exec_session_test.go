package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
)

// countingRun is a sandbox whose run number n leaves the state LZ4Frame("run n"), so
// that the state a run is given names the run it continues.
func countingRun(t *testing.T) func(context.Context, executor.Request) (*executor.Result, error) {
	var mu sync.Mutex
	n := 0
	return func(context.Context, executor.Request) (*executor.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		n++
		return &executor.Result{Status: execution.StatusOK, State: runState(t, n)}, nil
	}
}

// runState is the state countingRun's run n leaves; nil for run 0, which is none.
func runState(t *testing.T, n int) []byte {
	if n == 0 {
		return nil
	}
	return api.LZ4Frame(t, fmt.Appendf(nil, "run %d", n))
}

// outputsRun is a sandbox whose runs write files (name, then content, repeated).
func outputsRun(nameData ...string) func(context.Context, executor.Request) (*executor.Result, error) {
	return func(context.Context, executor.Request) (*executor.Result, error) {
		res := &executor.Result{Status: execution.StatusOK}
		for i := 0; i+1 < len(nameData); i += 2 {
			res.Files = append(res.Files, protocol.File{Path: nameData[i], Content: []byte(nameData[i+1])})
		}
		return res, nil
	}
}

// TestExecSessionReuse runs steps in order: each continues a session named earlier
// ({name} in the body is that session's id) or starts the one it names.
func TestExecSessionReuse(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Run: countingRun(t)})
	steps := []struct {
		name    string
		body    string
		header  http.Header
		session string // an earlier step's session, or a new name
		given   int    // the run whose state this run is given; 0 for none
	}{
		{"new session for an entity", `{"code":"a=1","entity_id":"agent-1"}`, nil, "S1", 0},
		{"by session_id", `{"code":"a+=1","session_id":"{S1}"}`, nil, "S1", 1},
		{"by entity_id: its latest session", `{"code":"a","entity_id":"agent-1"}`, nil, "S1", 2},
		{"another entity", `{"code":"a","entity_id":"agent-2"}`, nil, "S2", 0},
		{"session_id wins over entity_id", `{"code":"a","session_id":"{S1}","entity_id":"agent-2"}`, nil, "S1", 3},
		{"unknown session_id", `{"code":"a","session_id":"aaaaaaaaaaaaaaaaaaaaa"}`, nil, "S3", 0},
		{"a user's session", `{"code":"a","user_id":"u1"}`, nil, "U1", 0},
		{"another user of the key", `{"code":"a","session_id":"{U1}","user_id":"u2"}`, nil, "U2", 0},
		{"the user by header", `{"code":"a","session_id":"{U1}"}`, http.Header{"User-Id": {"u1"}}, "U1", 7},
		{"the key without a user", `{"code":"a","session_id":"{U1}"}`, nil, "U1", 9},
	}
	ids := map[string]string{}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			var pairs []string
			for name, id := range ids {
				pairs = append(pairs, "{"+name+"}", id)
			}
			body := strings.NewReplacer(pairs...).Replace(st.body)
			got := execOK(t, h, body, st.header)
			if want, ok := ids[st.session]; ok && got.SessionID != want {
				t.Errorf("got session %s, want %s's %s", got.SessionID, st.session, want)
			}
			if _, ok := ids[st.session]; !ok {
				for name, id := range ids {
					if id == got.SessionID {
						t.Errorf("got session %s of %s, want a new one", id, name)
					}
				}
				ids[st.session] = got.SessionID
			}
			reqs := h.Requests()
			if len(reqs) != i+1 {
				t.Fatalf("got %d runs, want %d", len(reqs), i+1)
			}
			if want := runState(t, st.given); !bytes.Equal(reqs[i].State, want) {
				t.Errorf("run given state %q, want %q (of run %d)", reqs[i].State, want, st.given)
			}
			if want := len(runState(t, i+1)); !got.HasState || got.StateSize != want {
				t.Errorf("got has_state %v, state_size %d, want true, %d", got.HasState, got.StateSize, want)
			}
			if got.State != nil {
				t.Errorf("got state %s in the body, want none in session mode", got.State)
			}
		})
	}
}

// TestExecFilesPlaced checks the files a run finds in /mnt/data.
func TestExecFilesPlaced(t *testing.T) {
	h := newServer(t)
	sid, ids := upload(t, h, nil, "data.csv", "a,b\n", "notes.txt", "hi")
	csv := protocol.File{Path: "data.csv", Content: []byte("a,b\n")}
	notes := protocol.File{Path: "notes.txt", Content: []byte("hi")}
	tests := []struct {
		name string
		body string
		want []protocol.File
	}{
		{"one file by id and session", `{"code":"1","files":[{"id":"` + ids[0] + `","session_id":"` + sid + `"}]}`, []protocol.File{csv}},
		{"renamed into a directory", `{"code":"1","files":[{"id":"` + ids[1] + `","session_id":"` + sid + `","name":"in/../in/renamed.txt"}]}`,
			[]protocol.File{{Path: "in/renamed.txt", Content: notes.Content}}},
		{"a file of the session by id alone", `{"code":"1","session_id":"` + sid + `","files":[{"id":"` + ids[1] + `"}]}`, []protocol.File{notes}},
		{"every file of the session", `{"code":"1","session_id":"` + sid + `"}`, []protocol.File{csv, notes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(h.Requests())
			got := execOK(t, h, tt.body, nil)
			if got.SessionID != sid {
				t.Errorf("got session %s, want the files' session %s", got.SessionID, sid)
			}
			reqs := h.Requests()
			if len(reqs) != before+1 {
				t.Fatalf("got %d runs, want %d", len(reqs), before+1)
			}
			files := reqs[before].Files
			if !slices.EqualFunc(files, tt.want, func(a, b protocol.File) bool {
				return a.Path == b.Path && bytes.Equal(a.Content, b.Content)
			}) {
				t.Errorf("got files %+v, want %+v", files, tt.want)
			}
		})
	}
}

// TestExecOutputs checks the files a run produced: listed in the answer, kept in the
// session, downloadable; the ones past the session's limit reported, not kept.
func TestExecOutputs(t *testing.T) {
	outputs := []string{
		"out/report.csv", "x,y\n",
		"plot.png", "\x89PNG",
		"a.txt", "a",
		"b.txt", "b", // one past the session's limit of 3
	}
	h := api.NewHarness(t, api.HarnessConfig{Run: outputsRun(outputs...)})
	got := execOK(t, h, `{"code":"1"}`, nil)
	want := []execFile{
		{Name: "out/report.csv", Size: 4, ContentType: "text/csv; charset=utf-8"},
		{Name: "plot.png", Size: 4, ContentType: "image/png"},
		{Name: "a.txt", Size: 1, ContentType: "text/plain; charset=utf-8"},
	}
	if len(got.Files) != len(want) {
		t.Fatalf("got files %+v, want %d", got.Files, len(want))
	}
	for i, f := range got.Files {
		if !kiln.ValidID(f.ID) || f.SessionID != got.SessionID {
			t.Errorf("file %d: got id %q session %q, want a kiln id in session %s", i, f.ID, f.SessionID, got.SessionID)
		}
		f.ID, f.SessionID = "", ""
		if f != want[i] {
			t.Errorf("file %d: got %+v, want %+v", i, f, want[i])
		}
		rec := serve(t, h, "GET", "/download/"+got.SessionID+"/"+got.Files[i].ID, "", "", nil)
		if rec.Code != http.StatusOK || rec.Body.String() != outputs[2*i+1] {
			t.Errorf("download of %s: got %d %q, want 200 %q", f.Name, rec.Code, rec.Body, outputs[2*i+1])
		}
	}
	if !got.Truncated || !strings.Contains(got.Stderr, "b.txt") {
		t.Errorf("got truncated %v, stderr %q, want true and b.txt named as not kept", got.Truncated, got.Stderr)
	}
}

// TestExecStateless: with a state field the caller carries the state, base64 in JSON;
// the session only keeps the files a run produced.
func TestExecStateless(t *testing.T) {
	in, out := api.LZ4Frame(t, []byte("in")), api.LZ4Frame(t, []byte("out"))
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name      string
		body      string
		result    executor.Result
		wantGiven []byte
		wantState string // the raw JSON of the answer's state
		keeps     bool   // whether the answer names a session that exists
	}{
		{"state in and out", `{"code":"1","state":"` + b64(in) + `"}`,
			executor.Result{Status: execution.StatusOK, State: out}, in, `"` + b64(out) + `"`, false},
		{"null state, none out", `{"code":"1","state":null}`,
			executor.Result{Status: execution.StatusOK}, nil, `null`, false},
		{"files kept, state not", `{"code":"1","state":"` + b64(in) + `"}`,
			executor.Result{Status: execution.StatusOK, State: out, Files: []protocol.File{{Path: "o.txt", Content: []byte("o")}}},
			in, `"` + b64(out) + `"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewHarness(t, api.HarnessConfig{Run: func(context.Context, executor.Request) (*executor.Result, error) {
				res := tt.result
				return &res, nil
			}})
			got := execOK(t, h, tt.body, nil)
			if reqs := h.Requests(); len(reqs) != 1 || !bytes.Equal(reqs[0].State, tt.wantGiven) {
				t.Fatalf("got runs %+v, want one given state %q", reqs, tt.wantGiven)
			}
			if string(got.State) != tt.wantState {
				t.Errorf("got state %s, want %s", got.State, tt.wantState)
			}
			if wantHas := tt.result.State != nil; got.HasState != wantHas || got.StateSize != len(tt.result.State) {
				t.Errorf("got has_state %v, state_size %d, want %v, %d", got.HasState, got.StateSize, wantHas, len(tt.result.State))
			}
			if !kiln.ValidID(got.SessionID) {
				t.Fatalf("got session_id %q, want a kiln id", got.SessionID)
			}
			rec := serve(t, h, "GET", "/sessions/"+got.SessionID, "", "", nil)
			if !tt.keeps {
				checkError(t, rec, http.StatusNotFound, kiln.CodeNotFound)
				return
			}
			if rec.Code != http.StatusOK {
				t.Fatalf("GET the session: got %d, want 200 (body %s)", rec.Code, rec.Body)
			}
			checkError(t, serve(t, h, "GET", "/state/"+got.SessionID, "", "", nil), http.StatusNotFound, kiln.CodeNotFound)
			if len(got.Files) != 1 {
				t.Fatalf("got files %+v, want o.txt", got.Files)
			}
			if rec := serve(t, h, "GET", "/download/"+got.SessionID+"/"+got.Files[0].ID, "", "", nil); rec.Body.String() != "o" {
				t.Errorf("download: got %d %q, want o", rec.Code, rec.Body)
			}
		})
	}
}

// TestExecClientGone: a client that hangs up during the run gets nothing written, and
// the request is counted as 499.
func TestExecClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := &api.ObserverLog{}
	h := api.NewHarness(t, api.HarnessConfig{Observer: obs, Run: func(ctx context.Context, _ executor.Request) (*executor.Result, error) {
		cancel() // the client hangs up
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	req := httptest.NewRequestWithContext(ctx, "POST", "/exec", strings.NewReader(`{"code":"1"}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Body.Len() != 0 {
		t.Errorf("got body %q, want none", rec.Body)
	}
	want := []api.Observed{{Route: "/exec", Method: "POST", Status: 499}}
	if got := obs.Seen(); !slices.Equal(got, want) {
		t.Errorf("got observed %+v, want %+v", got, want)
	}
}

// TestObserver checks what the observer is told: the route pattern, never the path.
func TestObserver(t *testing.T) {
	obs := &api.ObserverLog{}
	h := api.NewHarness(t, api.HarnessConfig{Observer: obs})
	serve(t, h, "POST", "/v1/exec", jsonCT, `{"code":"1"}`, nil)
	serve(t, h, "GET", "/sessions/aaaaaaaaaaaaaaaaaaaaa", "", "", nil)
	serve(t, h, "GET", "/no/such/route", "", "", nil)
	serve(t, h, "GET", "/health", "", "", nil)
	want := []api.Observed{
		{Route: "/v1/exec", Method: "POST", Status: 200},
		{Route: "/sessions/{session_id}", Method: "GET", Status: 404},
		{Route: "unmatched", Method: "GET", Status: 404},
		{Route: "/health", Method: "GET", Status: 200},
	}
	if got := obs.Seen(); !slices.Equal(got, want) {
		t.Errorf("got observed %+v, want %+v", got, want)
	}
}
