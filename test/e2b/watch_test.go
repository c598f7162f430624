package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/kilnsh/kiln/e2b/gen/filesystem"
	"github.com/kilnsh/kiln/e2b/gen/filesystem/filesystemconnect"
	"github.com/kilnsh/kiln/e2b/gen/process"
	"github.com/kilnsh/kiln/e2b/gen/process/processconnect"
)

// run runs a shell command in the sandbox to its end and fails the test unless it exits 0.
func run(ctx context.Context, t *testing.T, box held, script string) {
	t.Helper()
	procs := processconnect.NewProcessClient(http.DefaultClient, srv.URL, box.headers())
	stream, err := procs.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-c", script},
	}}))
	if err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	defer stream.Close()
	var code int32 = -1
	var stderr []byte
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		stderr = append(stderr, ev.GetData().GetStderr()...)
		if e := ev.GetEnd(); e != nil {
			code = e.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil || code != 0 {
		t.Fatalf("%q: exit %d, %v, stderr %q", script, code, err, stderr)
	}
}

// TestPolledWatchers drives the watchers E2B's Python SDK polls (CreateWatcher,
// GetWatcherEvents, RemoveWatcher) over Connect, with what a hostile caller tries: a
// watcher id of another sandbox, a removed one, a flood of changes nobody polls, and more
// watchers than a sandbox holds.
func TestPolledWatchers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	box, other := createBox(ctx, t, keyA), createBox(ctx, t, keyB)
	fs := filesystemconnect.NewFilesystemClient(http.DefaultClient, srv.URL, box.headers())
	otherFS := filesystemconnect.NewFilesystemClient(http.DefaultClient, srv.URL, other.headers())
	run(ctx, t, box, "mkdir -p /home/user/w /home/user/flood")

	created, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWatcherId()
	run(ctx, t, box, "for i in 1 2 3; do echo x > /home/user/w/f$i; done")
	seen := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); len(seen) < 3 && time.Now().Before(deadline); {
		got, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got.Msg.GetEvents() {
			if e.GetType() == filesystem.EventType_EVENT_TYPE_CREATE {
				seen[e.GetName()] = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !seen["f1"] || !seen["f2"] || !seen["f3"] {
		t.Fatalf("created seen %v, want f1, f2 and f3 by name relative to the directory", seen)
	}

	// Another caller's sandbox does not know this sandbox's watcher, nor may it remove it.
	if _, err := otherFS.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetWatcherEvents of another sandbox's watcher: %v, want not_found", err)
	}
	if _, err := otherFS.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("RemoveWatcher of another sandbox's watcher: %v, want not_found", err)
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetWatcherEvents of a removed watcher: %v, want not_found", err)
	}
	if _, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "no-such-dir"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("CreateWatcher of a missing directory: %v, want not_found", err)
	}

	// A flood nobody polls: the watcher keeps what it may, then ends saying so. It is first
	// polled once a streaming watch of the same directory has seen the flood's last file,
	// when the polled one has surely seen a third of it.
	flood, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "flood"}))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := fs.WatchDir(sctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "flood"}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stream.Receive() {
			if e := stream.Msg().GetFilesystem(); e.GetName() == "done" {
				return
			}
		}
	}()
	// 30 rounds over 1,000 files (a data tmpfs has a few thousand inodes): 30,000 writes.
	run(ctx, t, box, `python3 -c "
for _ in range(30):
    for i in range(1000):
        with open(f'/home/user/flood/f{i}', 'w') as f: f.write('x')
open('/home/user/flood/done', 'w').close()"`)
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the streaming watch never saw the flood's end")
	}
	stop()
	var kept int
	var ended error
	for deadline := time.Now().Add(30 * time.Second); ended == nil && time.Now().Before(deadline); {
		got, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: flood.Msg.GetWatcherId()}))
		if err != nil {
			ended = err
			break
		}
		kept += len(got.Msg.GetEvents())
	}
	if connect.CodeOf(ended) != connect.CodeResourceExhausted || kept != 10_000 {
		t.Errorf("a flood of 30,000 changes: got %d events, then %v; want 10,000, then resource_exhausted", kept, ended)
	}

	// More watchers than a sandbox holds: the one past the bound is refused, the others work.
	var refused error
	for i := 0; i < 64 && refused == nil; i++ {
		_, refused = fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "w"}))
	}
	var ce *connect.Error
	if !errors.As(refused, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Fatalf("64 watchers asked for: %v, want resource_exhausted before the sandbox runs out of threads", refused)
	}
	run(ctx, t, box, fmt.Sprintf("test -d %s", "/home/user/w"))
}
