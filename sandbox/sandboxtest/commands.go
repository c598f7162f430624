package sandboxtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln/protocol"
)

// Commands is the Handler a Fake runs unless it is given one. It reads the request's
// code, whatever its language, as a tiny command language, one command a line, so that
// a test written for the image's REPL has an honest equivalent on the Fake:
//
//	print TEXT      TEXT and a newline on stdout (an output event too, when asked for)
//	stderr TEXT     the same on stderr
//	set NAME VALUE  binds NAME in the REPL's namespace, which outlives the request
//	get NAME        prints NAME's value; an error when it is not bound
//	error TEXT      ends the run as an exception does: status error, exit code 1
//	sleep DURATION  waits (time.ParseDuration); an interrupt or the soft deadline ends it
//	hang            waits until the REPL is killed, deaf to interrupts and deadlines
//	exit N          ends the REPL process with code N, without an answer (os._exit)
//	oom             the out-of-memory killer ends the REPL: Exit gives 137 and true
//
// The run ends as the image's REPL ends one: cancelled (130, "Interrupted") once an
// interrupt came, timeout (124, "Time limit exceeded") past the request's timeout_ms.
func Commands(x *Exchange) {
	req := x.Request
	start := time.Now()
	var deadline <-chan time.Time
	if req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	run := commandRun{x: x, resp: protocol.Response{Status: protocol.StatusOK}}
	for line := range strings.Lines(req.Code) {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		if cmd == "" {
			continue
		}
		select {
		case <-x.Interrupted():
			run.fail(protocol.StatusCancelled, 130, "Interrupted")
		default:
		}
		if run.resp.Status != protocol.StatusOK {
			break
		}
		switch cmd {
		case "print", "stderr":
			stream := map[string]string{"print": "stdout", "stderr": "stderr"}[cmd]
			run.output(stream, arg+"\n")
		case "set":
			name, value, _ := strings.Cut(arg, " ")
			x.r.mu.Lock()
			x.r.vars[name] = value
			x.r.mu.Unlock()
		case "get":
			x.r.mu.Lock()
			value, ok := x.r.vars[arg]
			x.r.mu.Unlock()
			if !ok {
				run.fail(protocol.StatusError, 1, fmt.Sprintf("NameError: name '%s' is not defined", arg))
				break
			}
			run.output("stdout", value+"\n")
		case "error":
			run.fail(protocol.StatusError, 1, arg)
		case "sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				run.fail(protocol.StatusError, 1, "ValueError: "+err.Error())
				break
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-x.Interrupted():
				run.fail(protocol.StatusCancelled, 130, "Interrupted")
			case <-deadline:
				run.fail(protocol.StatusTimeout, 124, "Time limit exceeded")
			case <-x.Done():
			}
			t.Stop()
		case "hang":
			<-x.Done()
		case "exit":
			code, err := strconv.Atoi(arg)
			if err != nil {
				run.fail(protocol.StatusError, 1, "ValueError: "+err.Error())
				break
			}
			x.End(ExitStatus{Code: code})
		case "oom":
			x.End(ExitStatus{Code: 137, OOMKilled: true})
		default:
			run.fail(protocol.StatusError, 1, fmt.Sprintf("NameError: unknown command '%s'", cmd))
		}
		select {
		case <-x.Done():
			return // the REPL is gone: nobody answers
		default:
		}
	}
	run.resp.DurationMS = time.Since(start).Milliseconds()
	_ = x.Reply(run.resp)
}

// commandRun is the result of a run of Commands as it builds up.
type commandRun struct {
	x    *Exchange
	resp protocol.Response
}

func (c *commandRun) output(stream, text string) {
	if stream == "stdout" {
		c.resp.Stdout += text
	} else {
		c.resp.Stderr += text
	}
	if c.x.Request.Events {
		_ = c.x.Event(protocol.Event{Type: protocol.EventOutput, Stream: stream, Text: text})
	}
}

func (c *commandRun) fail(status string, code int, msg string) {
	if c.resp.Status != protocol.StatusOK {
		return // the first end is the run's
	}
	c.resp.Status, c.resp.ExitCode, c.resp.Error = status, code, &msg
}
