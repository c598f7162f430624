package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/kilnsh/kiln/sandbox"
)

// A sandbox's egress port: kiln listens on 127.0.0.1 in the container's own network
// namespace, which has loopback and nothing else, so that the code's proxy connections
// reach kiln with no relay, no frame and no socket file. The container cannot close or
// take the port: it is kiln's socket, made before any code runs.
//
// Entering a namespace needs CAP_SYS_ADMIN and a view of the container's processes: kiln
// on the host as root has both; kiln in a container of its own has neither, and its
// sandboxes use the Unix socket or the frames.

// probeNetns tells whether this process may enter network namespaces: it enters its
// own, which changes nothing and needs the same capability as entering another.
func probeNetns() error {
	return inNetns("/proc/thread-self/ns/net", func() error { return nil })
}

// inNetns runs fn on an OS thread of its own moved into the network namespace at path,
// and moves the thread back after. A thread that cannot be moved back is never used
// again: its goroutine ends locked to it, which ends the thread.
func inNetns(path string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(own)
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(own, unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("return from network namespace %s: %w", path, err))
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// listenIn listens on 127.0.0.1:port in the network namespace at path. Only raw system
// calls run in the namespace (socket, bind, listen); the descriptor becomes a
// net.Listener back in kiln's own, so that nothing of Go's network setup is learned
// inside the container.
func listenIn(path string, port int) (net.Listener, error) {
	fd := -1
	err := inNetns(path, func() error {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		addr := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
		if err := unix.Bind(s, addr); err != nil {
			unix.Close(s)
			return fmt.Errorf("bind 127.0.0.1:%d: %w", port, err)
		}
		if err := unix.Listen(s, unix.SOMAXCONN); err != nil {
			unix.Close(s)
			return fmt.Errorf("listen: %w", err)
		}
		fd = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "egress-port")
	defer f.Close() // FileListener keeps a descriptor of its own
	return net.FileListener(f)
}

// netnsPath is where the container's network namespace can be opened: the daemon's
// own mount of it (SandboxKey), which outlives no container and names no process, else
// the namespace of the container's first process.
func (r *Runtime) netnsPath(ctx context.Context, id string) (string, error) {
	ins, err := r.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("container inspect: %w", err)
	}
	c := ins.Container
	if c.NetworkSettings != nil && c.NetworkSettings.SandboxKey != "" {
		if _, err := os.Stat(c.NetworkSettings.SandboxKey); err == nil {
			return c.NetworkSettings.SandboxKey, nil
		}
	}
	if c.State == nil || c.State.Pid <= 0 {
		return "", errors.New("the container has no process")
	}
	return fmt.Sprintf("/proc/%d/ns/net", c.State.Pid), nil
}

// listenEgressPort opens the sandbox's egress port in its container's namespace.
func (r *Runtime) listenEgressPort(ctx context.Context, id string) (net.Listener, error) {
	path, err := r.netnsPath(ctx, id)
	if err != nil {
		return nil, err
	}
	return listenIn(path, sandbox.EgressPort)
}
