package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

var weather = []protocol.Tool{{Name: "get-weather", Function: "get_weather"}}

// toolSandbox makes rounds of one tool call each, waiting for each round's results,
// then answers with the results it got, as JSON on stdout.
func toolSandbox(t *testing.T, rounds int) *sandboxtest.Sandbox {
	return newSandbox(t, func(x *sandboxtest.Exchange) {
		var got []protocol.ToolResult
		for i := range rounds {
			id := "call_00" + string(rune('1'+i))
			calls := []protocol.ToolCall{{ID: id, Name: "get-weather", Input: json.RawMessage(`{"city":"Oslo"}`)}}
			if err := x.Event(protocol.Event{Type: protocol.EventToolCalls, Calls: calls}); err != nil {
				return
			}
			results, err := x.ToolResults()
			if err != nil {
				return
			}
			got = append(got, results...)
		}
		out, _ := json.Marshal(got)
		reply(func(r *protocol.Response) { r.Stdout = string(out) })(x)
	})
}

// runWithTools starts a run in the background; its pauses come on the channel.
func runWithTools(e *Executor, req Request) (<-chan execution.ToolCalls, <-chan *Result, <-chan error) {
	pauses := make(chan execution.ToolCalls, 4)
	results, errs := make(chan *Result, 1), make(chan error, 1)
	req.Tools, req.OnToolCalls = weather, func(tc execution.ToolCalls) { pauses <- tc }
	if req.ExecutionID == "" {
		req.ExecutionID = kiln.NewID()
	}
	go func() {
		res, err := e.Run(context.Background(), req)
		results <- res
		errs <- err
	}()
	return pauses, results, errs
}

func TestToolCallsPauseTheRunUntilContinue(t *testing.T) {
	sb := toolSandbox(t, 1)
	p := &fakePool{sb: sb}
	lim := testLimits()
	e := newTestExecutor(p, lim)
	pauses, results, errs := runWithTools(e, Request{Request: execution.Request{Lang: execution.LangPython, Code: "await get_weather(city='Oslo')", ExecutionID: "exec-1", Timeout: 100 * time.Millisecond}, Owner: "a"})
	tc := <-pauses
	if tc.Round != 1 || len(tc.Calls) != 1 || tc.Calls[0].ID != "call_001" || len(tc.Token) < 20 {
		t.Fatalf("pause = %+v, want round 1 with call_001 and a token", tc)
	}
	// The run's clock is stopped: wait longer than its timeout and grace.
	time.Sleep(200 * time.Millisecond)
	ok := []protocol.ToolResult{{CallID: "call_001", Result: json.RawMessage(`{"temp":20}`)}}
	for _, c := range []struct {
		owner, token string
		results      []protocol.ToolResult
		code         kiln.Code
	}{
		{"b", tc.Token, ok, kiln.CodeNotFound},
		{"a", "forged", ok, kiln.CodeConflict},
		{"a", tc.Token, []protocol.ToolResult{{CallID: "call_009", Result: json.RawMessage(`1`)}}, kiln.CodeInvalid},
		{"a", tc.Token, []protocol.ToolResult{{CallID: "call_001", Result: json.RawMessage(`"` + strings.Repeat("x", 200) + `"`)}}, kiln.CodeTooLarge},
		{"a", tc.Token, []protocol.ToolResult{{CallID: "call_001", Result: json.RawMessage(`{nope`)}}, kiln.CodeInvalid},
	} {
		if err := e.Continue("exec-1", c.owner, c.token, c.results); kiln.ErrorCode(err) != c.code {
			t.Errorf("Continue(%s, %.8s, %s) = %v, want code %v", c.owner, c.token, c.results[0].CallID, err, c.code)
		}
	}
	if err := e.Continue("exec-1", "a", tc.Token, ok); err != nil {
		t.Fatalf("Continue: %v", err)
	}
	if err := e.Continue("exec-1", "a", tc.Token, ok); kiln.ErrorCode(err) != kiln.CodeConflict {
		t.Errorf("replayed Continue = %v, want a conflict", err)
	}
	res, err := <-results, <-errs
	if err != nil || res.Status != execution.StatusOK {
		t.Fatalf("Run = %+v, %v; want ok", res, err)
	}
	if res.Stdout != `[{"call_id":"call_001","result":{"temp":20},"is_error":false}]` {
		t.Errorf("the sandbox got %s", res.Stdout)
	}
	if got := sb.Requests()[0].Tools; len(got) != 1 || got[0] != weather[0] {
		t.Errorf("the request carried tools %+v", got)
	}
	res.Release()
	if err := e.Continue("exec-1", "a", tc.Token, ok); kiln.ErrorCode(err) != kiln.CodeConflict {
		t.Errorf("Continue after the end = %v, want a conflict", err)
	}
}

func TestToolWaitEnds(t *testing.T) {
	cases := []struct {
		name   string
		rounds int
		act    func(e *Executor, tc execution.ToolCalls)
		status string
		msg    string
	}{
		{"no results in time", 1, func(*Executor, execution.ToolCalls) {}, execution.StatusTimeout, "no tool results within 150ms"},
		{"cancelled while waiting", 1, func(e *Executor, tc execution.ToolCalls) {
			if err := e.Cancel("exec-2", "a"); err != nil {
				t.Error(err)
			}
		}, execution.StatusCancelled, "Cancelled while waiting for tool results"},
		{"too many rounds", 3, func(e *Executor, tc execution.ToolCalls) {
			_ = e.Continue("exec-2", "a", tc.Token, []protocol.ToolResult{{CallID: tc.Calls[0].ID, Result: json.RawMessage(`1`)}})
		}, execution.StatusError, "the program made more than 2 rounds of tool calls"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &fakePool{sb: toolSandbox(t, c.rounds)}
			lim := testLimits()
			lim.ToolResultTimeout = 150 * time.Millisecond
			e := newTestExecutor(p, lim)
			pauses, results, errs := runWithTools(e, Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", ExecutionID: "exec-2"}, Owner: "a"})
			done := false
			for !done {
				select {
				case tc := <-pauses:
					c.act(e, tc)
				case res := <-results:
					if err := <-errs; err != nil || res.Status != c.status || deref(res.Error) != c.msg {
						t.Fatalf("Run = %s %q, %v; want %s %q", res.Status, deref(res.Error), err, c.status, c.msg)
					}
					res.Release()
					done = true
				case <-time.After(5 * time.Second):
					t.Fatal("the run did not end")
				}
			}
			p.checkReleasedOnce(t)
		})
	}
}

func TestValidateTools(t *testing.T) {
	e := newTestExecutor(&fakePool{}, testLimits())
	on := func(execution.ToolCalls) {}
	for _, c := range []struct {
		tools []protocol.Tool
		want  string
	}{
		{[]protocol.Tool{{Name: "a", Function: "a"}, {Name: "b", Function: "b"}, {Name: "c", Function: "c"}, {Name: "d", Function: "d"}}, "4 tools; the limit is 3"},
		{[]protocol.Tool{{Name: "get-x", Function: "get_x"}, {Name: "get x", Function: "get_x"}}, `tools "get-x" and "get x" are both called get_x in code: rename one`},
		{[]protocol.Tool{{Name: "1", Function: "1"}}, `tool "1": "1" is not a valid function name`},
		{[]protocol.Tool{{Name: "", Function: "x"}}, `tool "": "x" is not a valid function name`},
	} {
		req := Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", Tools: c.tools, OnToolCalls: on}}
		if err := e.Validate(&req); message(err) != c.want {
			t.Errorf("Validate(%v) = %v, want %q", c.tools, err, c.want)
		}
	}
}

// message is the message of err's *kiln.Error, or its text.
func message(err error) string {
	var ke *kiln.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return fmt.Sprint(err)
}
