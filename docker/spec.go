package docker

import (
	"strconv"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/kilnsh/kiln/sandbox"
)

// user is the fixed uid:gid sandboxes run as (the image's "sandbox" user).
var user = strconv.Itoa(sandbox.UID) + ":" + strconv.Itoa(sandbox.UID)

// configs builds the Engine API configuration of a sandbox, as security.md lays out.
// With a warm REPL the container's own process is the REPL, silent until kiln's hello;
// without, it idles and each request's REPL is exec'd beside it.
func (r *Runtime) configs(s sandbox.Spec, now time.Time) (*container.Config, *container.HostConfig) {
	entrypoint := sandbox.REPLCommand
	if s.PerCall {
		entrypoint = sandbox.IdleCommand
	}
	cfg := &container.Config{
		Image:           s.Image,
		Entrypoint:      entrypoint,
		User:            user,
		Hostname:        "sandbox",
		WorkingDir:      sandbox.DataDir,
		Env:             s.Environment(),
		Tty:             false,
		OpenStdin:       true,
		StdinOnce:       false,
		AttachStdin:     true,
		AttachStdout:    true,
		AttachStderr:    true,
		NetworkDisabled: true,
		Labels: map[string]string{
			sandbox.LabelManaged:  "true",
			sandbox.LabelService:  "kiln",
			sandbox.LabelInstance: r.instance,
			sandbox.LabelCreated:  now.UTC().Format(time.RFC3339),
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
			sandbox.DataDir: "rw,exec,nosuid,nodev,size=" + mb(s.DataMB) + ",nr_inodes=4096,uid=10001,gid=10001",
		},
		CapDrop:       []string{"ALL"},
		SecurityOpt:   []string{"no-new-privileges=true"},
		Privileged:    false,
		IpcMode:       "private",
		Init:          &init,
		AutoRemove:    false,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:     container.LogConfig{Type: "none"},
		Runtime:       r.oci,
		Resources: container.Resources{
			Memory:     s.MemoryMB << 20,
			MemorySwap: s.MemoryMB << 20,
			NanoCPUs:   s.MilliCPU * 1e6,
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
