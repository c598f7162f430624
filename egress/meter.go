package egress

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// meter counts the payload of one direction of a tunnel or request, spends it from the
// scope's budget, and tells the watchdog the connection is alive.
type meter struct {
	scope  *Scope
	idle   *watchdog
	n      atomic.Int64
	capped atomic.Bool // the byte cap stopped it
}

// meteredReader reads through a meter. It stops with errBytesCap, after the bytes the
// cap still allowed, once the scope's budget is spent. It implements no WriterTo, so
// that io.Copy reads through it rather than around it.
type meteredReader struct {
	r io.Reader
	m *meter
}

func (mr meteredReader) Read(p []byte) (int, error) {
	n, err := mr.r.Read(p)
	if n > 0 {
		mr.m.idle.touch()
		ok, within := mr.m.scope.spend(n)
		mr.m.n.Add(int64(ok))
		if !within {
			mr.m.capped.Store(true)
			return ok, errBytesCap
		}
	}
	return n, err
}

// meteredBody is a request or response body read through a meter.
type meteredBody struct {
	meteredReader
	c io.Closer
}

func (b meteredBody) Close() error { return b.c.Close() }

// watchdog calls fire once no byte has moved either way for the idle time. Each
// direction alone may be quiet for long (a download sends nothing up), so one clock is
// shared by both.
type watchdog struct {
	idle    time.Duration
	last    atomic.Int64 // unix nanoseconds of the last touch
	fired   atomic.Bool
	stopped atomic.Bool
	fire    func()
	mu      sync.Mutex
	timer   *time.Timer
}

func newWatchdog(idle time.Duration, fire func()) *watchdog {
	w := &watchdog{idle: idle, fire: fire}
	w.touch()
	w.mu.Lock()
	w.timer = time.AfterFunc(idle, w.check)
	w.mu.Unlock()
	return w
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) check() {
	if w.stopped.Load() {
		return
	}
	quiet := time.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.idle {
		w.fired.Store(true)
		w.fire()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped.Load() {
		w.timer.Reset(w.idle - quiet)
	}
}

// stop ends the watchdog; fire is not called after stop returns, unless it already runs.
func (w *watchdog) stop() {
	w.stopped.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer.Stop()
}
