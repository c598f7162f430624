package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/kilnsh/kiln/e2b/gen/filesystem"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// maxWatcherEvents is how many changes a polled watcher keeps between two
// GetWatcherEvents; past it the watcher ends with resource_exhausted rather than lose any.
const maxWatcherEvents = 10_000

// maxWatchersPerBox bounds the polled watchers one sandbox holds: each is a goroutine
// here and, in the sandbox, three threads (the agent's call, watchdog's emitter and its
// dispatcher), which count against the sandbox's PIDs (SANDBOX_PIDS_LIMIT, 128 by
// default). 16 of them leave most of those to the sandbox's own work.
const maxWatchersPerBox = 16

var eventTypes = map[string]filesystem.EventType{
	"create": filesystem.EventType_EVENT_TYPE_CREATE,
	"write":  filesystem.EventType_EVENT_TYPE_WRITE,
	"remove": filesystem.EventType_EVENT_TYPE_REMOVE,
	"rename": filesystem.EventType_EVENT_TYPE_RENAME,
	"chmod":  filesystem.EventType_EVENT_TYPE_CHMOD,
}

// agentWatchEvent is what the agent says of one change in a watched directory.
type agentWatchEvent struct {
	Name  string      `json:"name"`
	Op    string      `json:"op"`
	Entry *agentEntry `json:"entry"`
}

func watchEvent(e protocol.AgentEvent) (*filesystem.FilesystemEvent, error) {
	var a agentWatchEvent
	if err := decode(e, &a); err != nil {
		return nil, err
	}
	t, ok := eventTypes[a.Op]
	if !ok {
		return nil, fmt.Errorf("the sandbox's agent sent a change of kind %q", a.Op)
	}
	ev := &filesystem.FilesystemEvent{Name: a.Name, Type: t}
	if a.Entry != nil {
		ev.Entry = a.Entry.proto()
	}
	return ev, nil
}

// startWatch asks the sandbox to watch a directory and returns once the watch is in
// place, or with the agent's error (a path that is not there is not_found).
func (h *Handler) startWatch(ctx context.Context, b *box, path string, recursive, entry bool) (*sandbox.AgentStream, error) {
	st, err := h.call(ctx, b, "fs.watch", map[string]any{"path": path, "recursive": recursive, "include_entry": entry}, nil)
	if err != nil {
		return nil, err
	}
	e, err := st.Next(ctx)
	switch {
	case err != nil:
		h.unwatch(b, st)
		return nil, h.gone(b, err)
	case e.End && e.Code != "":
		return nil, &agentError{code: codeOf(e.Code), message: e.Error}
	case e.End:
		return nil, errors.New("the sandbox's watch ended before it began")
	}
	return st, nil
}

// unwatch ends a watch in the sandbox.
func (h *Handler) unwatch(b *box, st *sandbox.AgentStream) {
	st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = h.unary(ctx, b, "fs.unwatch", map[string]any{"target": st.Call()}, nil)
}

// cut ends a stream whose sandbox ended under it as E2B's edge does, by dropping it: the
// SDKs then ask /health, read its 502 and say the sandbox was killed or timed out.
func (h *Handler) cut(b *box, err error) error {
	err = h.gone(b, err)
	if h.boxes.get(b.id) == nil {
		panic(http.ErrAbortHandler)
	}
	return rpcError(err)
}

func (f files) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	b := boxOf(ctx)
	st, err := f.h.startWatch(ctx, b, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return rpcError(err)
	}
	defer f.h.unwatch(b, st)
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	every := keepaliveEvery(req.Header())
	keepalive := func() error {
		return stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}})
	}
	for {
		e, err := next(ctx, st, every, keepalive)
		if err != nil {
			if ctx.Err() != nil {
				return rpcError(ctx.Err())
			}
			return f.h.cut(b, err)
		}
		if e.End {
			if e.Code != "" {
				return rpcError(&agentError{code: codeOf(e.Code), message: e.Error})
			}
			return nil
		}
		ev, err := watchEvent(e)
		if err != nil {
			return rpcError(err)
		}
		if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
			return err
		}
	}
}

// watcher is a watch that its caller polls (CreateWatcher, GetWatcherEvents,
// RemoveWatcher), as E2B's Python SDK's synchronous watch_dir does: a goroutine keeps the
// sandbox's changes until they are asked for.
type watcher struct {
	st   *sandbox.AgentStream
	ctx  context.Context
	stop context.CancelFunc // RemoveWatcher's: collect returns

	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
	err    error // why the watch ended, when it has
}

func (w *watcher) collect(h *Handler, b *box) {
	for {
		e, err := w.st.Next(w.ctx)
		if w.ctx.Err() != nil {
			return // removed
		}
		var ev *filesystem.FilesystemEvent
		switch {
		case err != nil:
		case e.End && e.Code != "":
			err = &agentError{code: codeOf(e.Code), message: e.Error}
		case e.End:
			err = errors.New("the watch ended")
		default:
			ev, err = watchEvent(e)
		}
		w.mu.Lock()
		if err == nil && len(w.events) == maxWatcherEvents {
			err = &agentError{code: connect.CodeResourceExhausted, message: fmt.Sprintf("more than %d changes came between two GetWatcherEvents: the watcher ended so that none is lost unsaid", maxWatcherEvents)}
		}
		if err == nil {
			w.events = append(w.events, ev)
		} else {
			w.err = h.gone(b, err)
		}
		w.mu.Unlock()
		if err != nil {
			h.unwatch(b, w.st)
			return
		}
	}
}

func (f files) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	b := boxOf(ctx)
	st, err := f.h.startWatch(ctx, b, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, rpcError(err)
	}
	id := newID()
	wctx, stop := context.WithCancel(context.Background())
	w := &watcher{st: st, ctx: wctx, stop: stop}
	b.mu.Lock()
	full := len(b.watchers) >= maxWatchersPerBox
	if !full {
		if b.watchers == nil {
			b.watchers = map[string]*watcher{}
		}
		b.watchers[id] = w
	}
	b.mu.Unlock()
	if full {
		stop()
		f.h.unwatch(b, st)
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("this sandbox has %d watchers: remove one first", maxWatchersPerBox))
	}
	go w.collect(f.h, b)
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

// watcher returns the box's polled watcher of that id, and with remove, forgets it.
func (b *box) watcher(id string, remove bool) (*watcher, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.watchers[id]
	if w == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	if remove {
		delete(b.watchers, id)
	}
	return w, nil
}

func (f files) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	b := boxOf(ctx)
	w, err := b.watcher(req.Msg.GetWatcherId(), false)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	events, werr := w.events, w.err
	w.events = nil
	w.mu.Unlock()
	if len(events) == 0 && werr != nil {
		_, _ = b.watcher(req.Msg.GetWatcherId(), true) // its end is said: it is gone
		return nil, rpcError(werr)
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

func (f files) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	b := boxOf(ctx)
	w, err := b.watcher(req.Msg.GetWatcherId(), true)
	if err != nil {
		return nil, err
	}
	w.stop()
	f.h.unwatch(b, w.st)
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
