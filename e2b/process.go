package e2b

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/kilnsh/kiln/e2b/gen/process"
	"github.com/kilnsh/kiln/e2b/gen/process/processconnect"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// processes is envd's process service, each call carried to the sandbox's agent.
type processes struct {
	h *Handler
}

func processHandler(h *Handler) (string, http.Handler) {
	return processconnect.NewProcessHandler(processes{h: h})
}

type ptyArgs struct {
	Size struct {
		Rows uint32 `json:"rows"`
		Cols uint32 `json:"cols"`
	} `json:"size"`
}

func ptyOf(p *process.PTY) *ptyArgs {
	if p == nil {
		return nil
	}
	a := &ptyArgs{}
	a.Size.Rows, a.Size.Cols = p.GetSize().GetRows(), p.GetSize().GetCols()
	return a
}

type selectorArgs struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

func selector(s *process.ProcessSelector) (selectorArgs, error) {
	switch v := s.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		return selectorArgs{PID: &v.Pid}, nil
	case *process.ProcessSelector_Tag:
		return selectorArgs{Tag: &v.Tag}, nil
	}
	return selectorArgs{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process: a pid or a tag is required"))
}

func (p processes) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	b := boxOf(ctx)
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	envs := map[string]string{}
	for k, v := range b.envs {
		envs[k] = v
	}
	for k, v := range cfg.GetEnvs() {
		envs[k] = v
	}
	args := map[string]any{"cmd": cfg.GetCmd(), "args": cfg.GetArgs(), "envs": envs, "stdin": req.Msg.Stdin == nil || req.Msg.GetStdin()}
	if cfg.Cwd != nil {
		args["cwd"] = cfg.GetCwd()
	}
	if req.Msg.Tag != nil {
		args["tag"] = req.Msg.GetTag()
	}
	if pty := ptyOf(req.Msg.GetPty()); pty != nil {
		args["pty"] = pty
	}
	// E2B kills a command at its request's deadline (the SDK's timeoutMs): the process is
	// bound to it, not to the stream, which may go while the process runs on.
	if d, ok := ctx.Deadline(); ok {
		args["timeout_ms"] = max(time.Until(d).Milliseconds(), 1)
	}
	st, err := p.h.call(ctx, b, "proc.start", args, nil)
	if err != nil {
		return rpcError(err)
	}
	return p.relay(ctx, b, st, req.Header(), func(e *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: e})
	})
}

func (p processes) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	b := boxOf(ctx)
	sel, err := selector(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	st, err := p.h.call(ctx, b, "proc.connect", map[string]any{"process": sel}, nil)
	if err != nil {
		return rpcError(err)
	}
	return p.relay(ctx, b, st, req.Header(), func(e *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: e})
	})
}

// agentProcEvent is what the agent says of a process, as JSON beside its data.
type agentProcEvent struct {
	Start *struct {
		PID uint32 `json:"pid"`
	} `json:"start"`
	Data string `json:"data"` // which stream the frame's data is: stdout, stderr or pty
	End  *struct {
		ExitCode int32  `json:"exit_code"`
		Exited   bool   `json:"exited"`
		Status   string `json:"status"`
	} `json:"end"`
}

// relay sends a process's events to the client until the process ends or the client
// goes; one that goes leaves the process running, as E2B's does.
func (p processes) relay(ctx context.Context, b *box, st *sandbox.AgentStream, hdr map[string][]string, send func(*process.ProcessEvent) error) error {
	every := keepaliveEvery(hdr)
	unsubscribe := func() {
		st.Close()
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = p.h.unary(uctx, b, "proc.unsubscribe", map[string]any{"target": st.Call()}, nil)
	}
	keepalive := func() error {
		return send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}})
	}
	for {
		e, err := next(ctx, st, every, keepalive)
		if err != nil {
			unsubscribe()
			if ctx.Err() != nil {
				return rpcError(ctx.Err())
			}
			return p.h.cut(b, err)
		}
		if e.End && e.Code != "" {
			return rpcError(&agentError{code: codeOf(e.Code), message: e.Error})
		}
		ev, err := procEvent(e)
		if err != nil {
			unsubscribe()
			return rpcError(err)
		}
		if ev != nil {
			if err := send(ev); err != nil {
				unsubscribe()
				return err
			}
		}
		if e.End {
			return nil
		}
	}
}

func procEvent(e protocol.AgentEvent) (*process.ProcessEvent, error) {
	var a agentProcEvent
	if err := decode(e, &a); err != nil {
		return nil, err
	}
	switch {
	case a.Start != nil:
		return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: a.Start.PID}}}, nil
	case a.End != nil:
		end := &process.ProcessEvent_EndEvent{ExitCode: a.End.ExitCode, Exited: a.End.Exited, Status: a.End.Status}
		return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}, nil
	case a.Data != "":
		data := &process.ProcessEvent_DataEvent{}
		switch a.Data {
		case "stdout":
			data.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: e.Data}
		case "stderr":
			data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: e.Data}
		default:
			data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: e.Data}
		}
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}}, nil
	}
	return nil, nil
}

func (p processes) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	b := boxOf(ctx)
	end, err := p.h.unary(ctx, b, "proc.list", nil, nil)
	if err != nil {
		return nil, rpcError(err)
	}
	var out struct {
		Processes []struct {
			PID    uint32  `json:"pid"`
			Tag    *string `json:"tag"`
			Config struct {
				Cmd  string            `json:"cmd"`
				Args []string          `json:"args"`
				Envs map[string]string `json:"envs"`
				Cwd  string            `json:"cwd"`
			} `json:"config"`
		} `json:"processes"`
	}
	if err := decode(end, &out); err != nil {
		return nil, rpcError(err)
	}
	resp := &process.ListResponse{}
	for _, pr := range out.Processes {
		cwd := pr.Config.Cwd
		resp.Processes = append(resp.Processes, &process.ProcessInfo{Pid: pr.PID, Tag: pr.Tag, Config: &process.ProcessConfig{
			Cmd: pr.Config.Cmd, Args: pr.Config.Args, Envs: pr.Config.Envs, Cwd: &cwd}})
	}
	return connect.NewResponse(resp), nil
}

func (p processes) input(ctx context.Context, b *box, sel *process.ProcessSelector, in *process.ProcessInput) error {
	s, err := selector(sel)
	if err != nil {
		return err
	}
	var data []byte
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		data = v.Stdin
	case *process.ProcessInput_Pty:
		data = v.Pty
	}
	for len(data) > 0 {
		n := min(len(data), protocol.AgentChunk)
		if _, err := p.h.unary(ctx, b, "proc.input", map[string]any{"process": s}, data[:n]); err != nil {
			return rpcError(err)
		}
		data = data[n:]
	}
	return nil
}

func (p processes) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	if err := p.input(ctx, boxOf(ctx), req.Msg.GetProcess(), req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p processes) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	b := boxOf(ctx)
	var sel *process.ProcessSelector
	for stream.Receive() {
		switch v := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			sel = v.Start.GetProcess()
		case *process.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("StreamInput: the start event, naming the process, comes first"))
			}
			if err := p.input(ctx, b, sel, v.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (p processes) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	s, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := p.h.unary(ctx, boxOf(ctx), "proc.close_stdin", map[string]any{"process": s}, nil); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (p processes) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	s, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := p.h.unary(ctx, boxOf(ctx), "proc.signal", map[string]any{"process": s, "signal": int(req.Msg.GetSignal())}, nil); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (p processes) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	s, err := selector(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	args := map[string]any{"process": s}
	if pty := ptyOf(req.Msg.GetPty()); pty != nil {
		args["pty"] = pty
	}
	if _, err := p.h.unary(ctx, boxOf(ctx), "proc.update", args, nil); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}
