package kilntest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Root returns the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary builds cmd/kiln once per test process and returns its path: bin/kiln-test in
// the repository, which git ignores, so that no run leaves a binary in $TMPDIR. Test
// processes of several packages build at once: each links to a name of its own beside
// it and renames that into place, so that none starts a half-written binary. A kiln
// already started keeps the file it was started from.
func Binary() (string, error) {
	buildOnce.Do(func() {
		dir := filepath.Join(Root(), "bin")
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		path := filepath.Join(dir, "kiln-test")
		tmp := filepath.Join(dir, fmt.Sprintf(".kiln-test-%d-%s", os.Getpid(), randomSuffix()))
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/kiln")
		cmd.Dir = Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.Join(fmt.Errorf("go build: %v\n%s", err, out), ignoreNotExist(os.Remove(tmp)))
			return
		}
		if err := os.Rename(tmp, path); err != nil {
			buildErr = errors.Join(err, os.Remove(tmp))
			return
		}
		binary = path
	})
	return binary, buildErr
}

// envValue returns the value of name in env (KEY=value entries), and whether it is there.
func envValue(env []string, name string) (string, bool) {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v, true
		}
	}
	return "", false
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Runtime returns the sandbox runtime the tests run under: KILN_TEST_RUNTIME, or
// "runc" when it is unset. Start passes it to kiln as SANDBOX_RUNTIME unless a test
// sets that itself; "kubernetes" runs the sandboxes as Pods of the cluster of
// $KUBECONFIG instead (see OnKubernetes).
func Runtime() string {
	if rt := os.Getenv("KILN_TEST_RUNTIME"); rt != "" {
		return rt
	}
	return "runc"
}

// Server is a kiln process started for a test.
type Server struct {
	URL      string
	Instance string
	Key      string // the API key the helpers send, if any
	cmd      *exec.Cmd
	logs     *lockedBuffer
	exited   chan struct{}
	exitErr  error
}

// Options configure Start.
type Options struct {
	// Env is added to a minimal environment (PATH, HOME, DOCKER_HOST). POOL_SIZE,
	// INSTANCE_ID and LISTEN_ADDR have test defaults unless set here.
	Env []string
	// Key is sent by the helpers as X-API-Key.
	Key string
	// ReadyTimeout bounds the wait for /health/ready; default 3 minutes.
	ReadyTimeout time.Duration
	// NoWait returns once the server listens, without waiting for readiness.
	NoWait bool
	// Binary runs this kiln executable instead of one built from the tree (the
	// benchmark's before/after runs an older build beside the current one).
	Binary string
}

// Start runs a kiln process and waits until it is ready.
func Start(opts Options) (*Server, error) {
	bin, err := opts.Binary, error(nil)
	if bin == "" {
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	// TMPDIR too: whatever kiln leaves in it is the test run's to clean (test/leftovers.sh).
	for _, name := range []string{"DOCKER_HOST", "TMPDIR", "KUBECONFIG"} {
		if v := os.Getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	removeOrphans()
	instance := NewInstance()
	defaults := map[string]string{
		"LISTEN_ADDR": "127.0.0.1:0", "INSTANCE_ID": instance, "POOL_SIZE": "2",
		"LOG_LEVEL": "debug", "SHUTDOWN_GRACE_SECONDS": "20",
	}
	// KILN_TEST_RUNTIME runs a whole suite's sandboxes under another runtime (runsc), or
	// on Kubernetes.
	switch rt := Runtime(); {
	case OnKubernetes():
		defaults["RUNTIME"], defaults["KUBE_NAMESPACE"], defaults["KUBE_IMAGE_PULL_POLICY"] = "kubernetes", KubeNamespace, "Never"
		// The test cluster is one node of 2 cores, shared by every suite's pools and live
		// sessions: each sandbox asks for a sliver of it.
		defaults["KUBE_SANDBOX_CPU_REQUEST"] = "0.02"
	case rt != "runc":
		defaults["SANDBOX_RUNTIME"] = rt
	}
	for _, kv := range opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "INSTANCE_ID" {
			instance = v
		}
		delete(defaults, k)
		env = append(env, kv)
	}
	// A kiln given no DATA_DIR gets its own, removed once the process has exited: its
	// default, ./data, would land in the repository.
	var ownData string
	if _, given := envValue(opts.Env, "DATA_DIR"); !given {
		if ownData, err = os.MkdirTemp("", "kiln-data-"); err != nil {
			return nil, err
		}
		env = append(env, "DATA_DIR="+ownData)
	}
	for k, v := range defaults {
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Dir = Root()
	stderr, err := cmd.StderrPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		if ownData != "" {
			_ = os.RemoveAll(ownData)
		}
		return nil, err
	}
	s := &Server{Instance: instance, Key: opts.Key, cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{})}
	addr := make(chan string, 1)
	logged := make(chan struct{})
	go func() {
		s.readLogs(stderr, addr)
		close(logged)
	}()
	go func() {
		// Wait closes the pipe: read it to its end first, or the last lines of a kiln that
		// exits at start (the reason it gives) may be lost. kiln starts no processes of its
		// own, so the pipe ends when it does.
		<-logged
		s.exitErr = cmd.Wait()
		if ownData != "" {
			_ = os.RemoveAll(ownData)
		}
		close(s.exited)
	}()

	select {
	case a := <-addr:
		s.URL = "http://" + a
	case <-s.exited:
		return nil, fmt.Errorf("kiln exited at start: %v\n%s", s.exitErr, s.Logs())
	case <-time.After(60 * time.Second):
		s.abandon()
		return nil, fmt.Errorf("kiln did not listen within 60s\n%s", s.Logs())
	}
	if opts.NoWait {
		return s, nil
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	if err := s.WaitReady(timeout); err != nil {
		s.abandon()
		return nil, err
	}
	return s, nil
}

// readLogs keeps the process's log and reports the address it listens on.
func (s *Server) readLogs(r io.Reader, addr chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Bytes()
		s.logs.Write(append(line, '\n'))
		if !sent && bytes.Contains(line, []byte(`"kiln listening"`)) {
			var m struct{ Addr string }
			if json.Unmarshal(line, &m) == nil && m.Addr != "" {
				addr <- m.Addr
				sent = true
			}
		}
	}
}

// WaitReady polls /health/ready until it answers 200.
func (s *Server) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.URL + "/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("kiln exited: %v\n%s", s.exitErr, s.Logs())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kiln not ready within %s\n%s", timeout, s.Logs())
}

// Logs returns everything the process logged so far.
func (s *Server) Logs() string { return s.logs.String() }

// PID returns the process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the process to exit, returning its exit error.
func (s *Server) Stop(timeout time.Duration) error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return s.exitErr
	case <-time.After(timeout):
		s.abandon()
		return errors.New("kiln did not stop after SIGTERM")
	}
}

// Kill sends SIGKILL and waits for the process to go.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// abandon kills a server a test gave up on and removes its containers, which nobody
// else would: its instance id is never started again.
func (s *Server) abandon() {
	s.Kill()
	if ids, err := Containers(s.Instance); err == nil && len(ids) > 0 {
		_, _ = Docker(append([]string{"rm", "-f"}, ids...)...)
	}
}

// Exited is closed when the process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Request sends a request with the server's key and returns the response with its
// body read.
func (s *Server) Request(method, path string, body io.Reader, header http.Header) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if s.Key != "" && req.Header.Get("X-Api-Key") == "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("X-API-Key", s.Key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// PostJSON posts v as JSON and decodes a JSON answer into out (when not nil).
func (s *Server) PostJSON(path string, v, out any) (*http.Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	resp, body, err := s.Request(http.MethodPost, path, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return resp, fmt.Errorf("decoding %s answer (%d): %v: %s", path, resp.StatusCode, err, body)
		}
	}
	return resp, nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
