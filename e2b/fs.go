package e2b

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kilnsh/kiln/e2b/gen/filesystem"
	"github.com/kilnsh/kiln/e2b/gen/filesystem/filesystemconnect"
)

// files is envd's filesystem service, each call carried to the sandbox's agent.
type files struct {
	filesystemconnect.UnimplementedFilesystemHandler
	h *Handler
}

func filesystemHandler(h *Handler) (string, http.Handler) {
	return filesystemconnect.NewFilesystemHandler(files{h: h})
}

// agentEntry is a file as the agent describes it.
type agentEntry struct {
	Name          string            `json:"name"`
	Type          string            `json:"type"`
	Path          string            `json:"path"`
	Size          int64             `json:"size"`
	Mode          uint32            `json:"mode"`
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	MtimeNS       int64             `json:"mtime_ns"`
	SymlinkTarget *string           `json:"symlink_target"`
	Metadata      map[string]string `json:"metadata"`
}

func (e agentEntry) proto() *filesystem.EntryInfo {
	t := filesystem.FileType_FILE_TYPE_FILE
	switch e.Type {
	case "dir":
		t = filesystem.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		t = filesystem.FileType_FILE_TYPE_SYMLINK
	}
	return &filesystem.EntryInfo{Name: e.Name, Type: t, Path: e.Path, Size: e.Size, Mode: e.Mode, Permissions: e.Permissions,
		Owner: e.Owner, Group: e.Group, ModifiedTime: timestamppb.New(time.Unix(0, e.MtimeNS)), SymlinkTarget: e.SymlinkTarget, Metadata: e.Metadata}
}

// entryCall runs a method whose result is one entry.
func (f files) entryCall(ctx context.Context, method string, args any) (*filesystem.EntryInfo, error) {
	end, err := f.h.unary(ctx, boxOf(ctx), method, args, nil)
	if err != nil {
		return nil, rpcError(err)
	}
	var res struct {
		Entry agentEntry `json:"entry"`
	}
	if err := decode(end, &res); err != nil {
		return nil, rpcError(err)
	}
	return res.Entry.proto(), nil
}

func (f files) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	e, err := f.entryCall(ctx, "fs.stat", map[string]any{"path": req.Msg.GetPath()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (f files) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	e, err := f.entryCall(ctx, "fs.mkdir", map[string]any{"path": req.Msg.GetPath()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

func (f files) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	e, err := f.entryCall(ctx, "fs.move", map[string]any{"source": req.Msg.GetSource(), "destination": req.Msg.GetDestination()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (f files) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	end, err := f.h.unary(ctx, boxOf(ctx), "fs.list", map[string]any{"path": req.Msg.GetPath(), "depth": req.Msg.GetDepth()}, nil)
	if err != nil {
		return nil, rpcError(err)
	}
	var res struct {
		Entries []agentEntry `json:"entries"`
	}
	if err := decode(end, &res); err != nil {
		return nil, rpcError(err)
	}
	out := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, 0, len(res.Entries))}
	for _, e := range res.Entries {
		out.Entries = append(out.Entries, e.proto())
	}
	return connect.NewResponse(out), nil
}

func (f files) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	if _, err := f.h.unary(ctx, boxOf(ctx), "fs.remove", map[string]any{"path": req.Msg.GetPath()}, nil); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}
