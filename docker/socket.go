package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/kilnsh/kiln/sandbox"
)

// A sandbox's egress socket is mounted at socketMount, its directory read-only.
const (
	socketMount = "/run/kiln"
	socketName  = "egress.sock"
)

// maxSocketPath is the longest path a Unix socket may have here (sun_path, less its NUL).
const maxSocketPath = 107

// egressSocket is one sandbox's way to kiln's egress proxy around the daemon: a Unix
// socket kiln listens on, alone in a directory of the sandbox's own that is mounted into
// the container. The REPL carries the code's connections over it instead of as net
// frames on the attach stream, which the daemon copies several times over.
type egressSocket struct {
	dir string
	ln  net.Listener
}

// socketBase is this instance's directory of sandbox sockets, in Config.SocketDir; it
// goes when the instance removes its orphans, leaving the directory as it found it.
func (r *Runtime) socketBase() string {
	sum := sha256.Sum256([]byte(r.instance))
	return filepath.Join(r.socketDir, "kiln-egress-"+hex.EncodeToString(sum[:4]))
}

// newSocket makes a sandbox's directory and listens in it. The instance's directory is
// kiln's alone (0700); the sandbox's may be searched, not listed, by the sandbox user,
// who must be able to write to the socket to connect.
func (r *Runtime) newSocket() (*egressSocket, error) {
	base := r.socketBase()
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "")
	if err != nil {
		return nil, err
	}
	s := &egressSocket{dir: dir}
	path := filepath.Join(dir, socketName)
	if len(path) > maxSocketPath {
		s.close()
		return nil, fmt.Errorf("socket path %s is longer than %d bytes: set EGRESS_SOCKET_DIR shorter", path, maxSocketPath)
	}
	if s.ln, err = net.Listen("unix", path); err != nil {
		s.close()
		return nil, err
	}
	if err := errors.Join(os.Chmod(dir, 0o711), os.Chmod(path, 0o666)); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// mount adds the socket's directory and its path to a sandbox's configuration.
func (s *egressSocket) mount(cfg *container.Config, host *container.HostConfig) {
	host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: s.dir, Target: socketMount, ReadOnly: true})
	cfg.Env = append(cfg.Env[:len(cfg.Env):len(cfg.Env)], sandbox.EgressSocketVar+"="+socketMount+"/"+socketName)
}

// close stops listening and removes the directory; nil does nothing.
func (s *egressSocket) close() {
	if s == nil {
		return
	}
	if s.ln != nil {
		s.ln.Close()
	}
	os.RemoveAll(s.dir)
}

// removeSockets removes what an earlier process of the instance left of its sockets.
func (r *Runtime) removeSockets() error {
	if r.socketDir == "" {
		return nil
	}
	return os.RemoveAll(r.socketBase())
}
