package docker

import (
	"strconv"
	"time"

	"github.com/moby/moby/api/types/container"
)

// Labels kiln puts on every sandbox container it creates.
const (
	LabelManaged  = "kiln.managed"
	LabelService  = "kiln.service"
	LabelInstance = "kiln.instance"
	LabelCreated  = "kiln.created-at"
)

// SandboxUser is the fixed uid:gid sandboxes run as (the image's "sandbox" user).
const SandboxUser = "10001:10001"

// Spec is everything that decides what a sandbox container looks like. It comes from
// kiln's configuration only; no request field reaches it.
type Spec struct {
	Image    string
	Runtime  string // "" for the daemon's default (runc), "runsc" for gVisor
	Instance string // the owning kiln instance, for the ownership label
	Cmd      []string
	// Entrypoint, when set, replaces the image's (the REPL). Exec mode sets an idle
	// process here and the REPL command in Exec.
	Entrypoint []string
	// Exec, when set, is the REPL command each request starts with docker exec: the
	// slow mode without a warm interpreter (REPL_ENABLED=false).
	Exec      []string
	Env       []string // an allowlist: nothing of kiln's own environment
	MemoryMB  int64    // covers the tmpfs mounts too; swap is not allowed
	NanoCPUs  int64
	PidsLimit int64
	TmpMB     int64 // size of the /tmp tmpfs
	DataMB    int64 // size of the /mnt/data tmpfs, and the largest file (fsize)
	NoFile    int64
}

// DefaultEnv is the environment of a sandbox unless the Spec sets one. What the image
// sets and this does not (its matplotlib backend, say) stays as the image has it.
var DefaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/tmp",
	"LANG=C.UTF-8",
	"PYTHONDONTWRITEBYTECODE=1",
}

// PreloadVar is the sandbox environment variable that tells the REPL which groups of
// modules to pre-import (docs/protocol.md); unset means all of them.
const PreloadVar = "KILN_PRELOAD"

// WarmHeapVar is the sandbox environment variable that tells the REPL how many MB to
// touch while it warms up, so that the request's big buffers find their pages.
const WarmHeapVar = "KILN_WARM_HEAP_MB"

// configs builds the Engine API configuration of a sandbox, as security.md lays out.
func (s Spec) configs(now time.Time) (*container.Config, *container.HostConfig) {
	env := s.Env
	if env == nil {
		env = DefaultEnv
	}
	cfg := &container.Config{
		Image:           s.Image,
		Cmd:             s.Cmd,
		Entrypoint:      s.Entrypoint,
		User:            SandboxUser,
		Hostname:        "sandbox",
		WorkingDir:      "/mnt/data",
		Env:             env,
		Tty:             false,
		OpenStdin:       true,
		StdinOnce:       false,
		AttachStdin:     true,
		AttachStdout:    true,
		AttachStderr:    true,
		NetworkDisabled: true,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelService:  "kiln",
			LabelInstance: s.Instance,
			LabelCreated:  now.UTC().Format(time.RFC3339),
		},
	}
	mb := func(n int64) string { return strconv.FormatInt(n, 10) + "m" }
	pids := s.PidsLimit
	init := true
	host := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			"/tmp": "rw,nosuid,nodev,noexec,size=" + mb(s.TmpMB) + ",nr_inodes=4096,mode=1777",
			// Docker copies the image directory's mode onto the tmpfs, so ownership is what
			// makes /mnt/data writable for the sandbox user, not a mode.
			"/mnt/data": "rw,exec,nosuid,nodev,size=" + mb(s.DataMB) + ",nr_inodes=4096,uid=10001,gid=10001",
		},
		CapDrop:       []string{"ALL"},
		SecurityOpt:   []string{"no-new-privileges=true"},
		Privileged:    false,
		IpcMode:       "private",
		Init:          &init,
		AutoRemove:    false,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:     container.LogConfig{Type: "none"},
		Runtime:       s.Runtime,
		Resources: container.Resources{
			Memory:     s.MemoryMB << 20,
			MemorySwap: s.MemoryMB << 20,
			NanoCPUs:   s.NanoCPUs,
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: s.NoFile, Hard: s.NoFile},
				{Name: "fsize", Soft: s.DataMB << 20, Hard: s.DataMB << 20},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	return cfg, host
}
