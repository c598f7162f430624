package protocol

import (
	"io"
	"sync"
)

// Writer returns the parser as an io.Writer for a runtime's copy of the REPL's stdout:
// each write is fed whole, and emit gets every frame it completes. It never fails.
func (p *Parser) Writer(emit func(f Frame, err error)) io.Writer {
	return writerFunc(func(data []byte) (int, error) {
		p.Feed(data, emit)
		return len(data), nil
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// StderrTail is how much of a REPL's own stderr a runtime keeps for the log and for
// warm-up errors. User code's output never reaches it: the REPL points fd 2 elsewhere.
const StderrTail = 4096

// Tail keeps the last StderrTail bytes written to it; safe for concurrent use.
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - StderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
