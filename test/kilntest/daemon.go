package kilntest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"
)

// daemon is a server process a test starts, kills and starts again on the same
// arguments: its port and its files stay.
type daemon struct {
	name  string
	args  []string
	log   string                             // where its output goes
	ready func(exited <-chan struct{}) error // waits until it answers

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (d *daemon) start() error {
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(d.args[0], d.args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = cmd.Wait()
	}()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()
	if err := d.ready(exited); err != nil {
		d.Stop()
		out, _ := os.ReadFile(d.log)
		return fmt.Errorf("%s: %w; its log:\n%s", d.name, err, out)
	}
	return nil
}

// Stop kills the process, if it runs, and waits for it to go.
func (d *daemon) Stop() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd = nil
	d.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart kills the process and starts it again.
func (d *daemon) Restart() error {
	d.Stop()
	return d.start()
}

// listening waits until addr accepts a connection, the process exits, or within passes.
func listening(addr string, exited <-chan struct{}, within time.Duration) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("exited at start")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("did not listen on %s within %s", addr, within)
}
