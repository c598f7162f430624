package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// streamed is what a streamed call heard.
type streamed struct {
	called time.Time
	events []kilntest.Event
	status int
	body   []byte // a non-200 answer
}

func (s *streamed) names() []string {
	var out []string
	for _, e := range s.events {
		if e.Name != ":" {
			out = append(out, e.Name)
		}
	}
	return out
}

func (s *streamed) first(name string) (kilntest.Event, bool) {
	for _, e := range s.events {
		if e.Name == name {
			return e, true
		}
	}
	return kilntest.Event{}, false
}

func (s *streamed) done(t *testing.T) kilntest.ExecResponse {
	t.Helper()
	var out kilntest.ExecResponse
	ev, ok := s.first("done")
	if !ok {
		t.Fatalf("no done event; got %v (status %d, body %s)", s.names(), s.status, s.body)
	}
	if err := json.Unmarshal([]byte(ev.Data), &out); err != nil {
		t.Fatalf("done data %q: %v", ev.Data, err)
	}
	return out
}

// stream runs body as a streamed call; onEvent, when set, also sees each event as it
// comes (to cancel, say).
func stream(t *testing.T, ctx context.Context, body map[string]any, onEvent func(kilntest.Event)) *streamed {
	t.Helper()
	s := &streamed{called: time.Now()}
	var mu sync.Mutex
	resp, b, err := srv.Stream(ctx, body, func(e kilntest.Event) {
		mu.Lock()
		s.events = append(s.events, e)
		mu.Unlock()
		if onEvent != nil {
			onEvent(e)
		}
	})
	if err != nil && ctx.Err() == nil {
		t.Errorf("stream: %v", err) // not Fatal: callers may run on goroutines of their own
	}
	if resp != nil {
		s.status = resp.StatusCode
	}
	s.body = b
	return s
}

// waitIdle waits until the pool holds a ready sandbox and runs nothing.
func waitIdle(t *testing.T) {
	t.Helper()
	kilntest.WaitFor(t, 2*time.Minute, "an idle pool with a ready sandbox", func() bool {
		p, err := srv.Pool()
		return err == nil && p.Ready >= 1 && p.InUse == 0
	})
}

func TestStreamOutputArrivesLive(t *testing.T) {
	waitIdle(t)
	code := "import time\nprint('a', flush=True)\ntime.sleep(3)\nprint('b')"
	s := stream(t, context.Background(), map[string]any{"code": code}, nil)
	if got, want := s.names(), []string{"start", "stdout", "stdout", "done"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	a, b := s.events[1], s.events[2]
	if a.Text() != "a\n" || b.Text() != "b\n" {
		t.Errorf("output events %q and %q, want a and b", a.Text(), b.Text())
	}
	if d := a.At.Sub(s.called); d > time.Second {
		t.Errorf("the a event came %v after the call, want within 1 s", d)
	}
	if d := b.At.Sub(a.At); d < 2500*time.Millisecond {
		t.Errorf("b came %v after a, want after the 3 s sleep", d)
	}
	done := s.done(t)
	plain := run(t, map[string]any{"code": code})
	if done.Status != plain.Status || done.Stdout != plain.Stdout || done.Stderr != plain.Stderr || done.ExitCode != plain.ExitCode ||
		kilntest.Str(done.Error) != kilntest.Str(plain.Error) || len(done.Files) != len(plain.Files) || done.HasState != plain.HasState {
		t.Errorf("done %+v\nplain %+v\nwant the same answer", done, plain)
	}
	sid, eid := s.events[0].Start()
	if sid != done.SessionID || len(eid) != 21 {
		t.Errorf("start named session %q execution %q; want the answer's session %q and an id", sid, eid, done.SessionID)
	}
}

// cancelOn returns an onEvent that cancels the run once it printed marker, and
// reports when it did and what the cancel answered.
func cancelOn(t *testing.T, marker string) (func(kilntest.Event), func() (time.Time, int)) {
	var (
		mu     sync.Mutex
		execID string
		at     time.Time
		code   int
	)
	onEvent := func(e kilntest.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Name == "start":
			_, execID = e.Start()
		case (e.Name == "stdout" || e.Name == "stderr") && strings.Contains(e.Text(), marker) && at.IsZero():
			at = time.Now()
			c, err := srv.Cancel(execID)
			if err != nil {
				t.Errorf("cancel: %v", err)
			}
			code = c
		}
	}
	return onEvent, func() (time.Time, int) {
		mu.Lock()
		defer mu.Unlock()
		return at, code
	}
}

func TestCancelSleepKeepsTheSession(t *testing.T) {
	first := run(t, map[string]any{"code": "x = 41"})
	waitIdle(t)
	onEvent, cancelled := cancelOn(t, "before")
	s := stream(t, context.Background(), map[string]any{
		"session_id": first.SessionID, "code": "import time\nx = 0\nprint('before', flush=True)\ntime.sleep(600)",
	}, onEvent)
	at, code := cancelled()
	if code != http.StatusAccepted {
		t.Fatalf("cancel answered %d, want 202", code)
	}
	done := s.done(t)
	doneAt := s.events[len(s.events)-1].At
	if d := doneAt.Sub(at); d > 2*time.Second {
		t.Errorf("done came %v after the cancel, want within 2 s", d)
	}
	if done.Status != "cancelled" || done.ExitCode != 130 || done.Stdout != "before\n" {
		t.Errorf("got %s %d %q (error %s), want cancelled 130 with the output so far", done.Status, done.ExitCode, done.Stdout, kilntest.Str(done.Error))
	}
	after := run(t, map[string]any{"session_id": first.SessionID, "code": "x + 1"})
	if kilntest.Str(after.Result) != "1" {
		t.Errorf("x + 1 after the cancel = %s, want 1: an interrupted run keeps what it bound before the interrupt, as a notebook cell does", kilntest.Str(after.Result))
	}
	_, eid := s.events[0].Start()
	if c, err := srv.Cancel(eid); err != nil || c != http.StatusConflict {
		t.Errorf("a cancel after the end answered %d (%v), want 409", c, err)
	}
	resp, _, err := srv.Request(http.MethodPost, "/executions/"+eid+"/cancel", nil, http.Header{"X-Api-Key": {keyB}})
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("another key's cancel answered %v (%v), want 404", resp, err)
	}
}

// TestCancelStubbornCode checks code that does not stop when interrupted: its
// sandbox is killed when the interrupt grace (2 s) is over.
func TestCancelStubbornCode(t *testing.T) {
	tests := []struct {
		name, lang, code string
		// inC: the code holds the GIL in one C call, so no event leaves the REPL until
		// it returns: the cancel is sent a second after the start, and the answer has
		// no output.
		inC bool
	}{
		{name: "ignores SIGINT", lang: "py", code: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('armed', flush=True)\nwhile True:\n    time.sleep(0.1)"},
		{name: "swallows KeyboardInterrupt", lang: "py", code: "import time\nprint('armed', flush=True)\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass"},
		{name: "sits in C", lang: "py", code: "print('armed', flush=True)\nsum(range(10**14))", inC: true},
		{name: "bash traps SIGINT", lang: "bash", code: "trap '' INT\necho armed\nwhile true; do sleep 0.1; done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			waitIdle(t)
			onEvent, cancelled := cancelOn(t, "armed")
			if tt.inC {
				onEvent, cancelled = cancelAfterStart(t, time.Second)
			}
			s := stream(t, context.Background(), map[string]any{"code": tt.code, "lang": tt.lang, "timeout": 60000}, onEvent)
			at, code := cancelled()
			if code != http.StatusAccepted {
				t.Fatalf("cancel answered %d, want 202 (events %v)", code, s.names())
			}
			done := s.done(t)
			// The answer follows the kill, but the rest of the call has taken 1.1 s under
			// gVisor on a loaded machine; code left running would take the whole minute.
			if d := s.events[len(s.events)-1].At.Sub(at); d > 4*time.Second {
				t.Errorf("done came %v after the cancel, want within the grace (2 s) + 2 s", d)
			}
			if done.Status != "cancelled" || done.ExitCode != 130 || (!tt.inC && !strings.Contains(done.Stdout, "armed")) {
				t.Errorf("got %s %d %q, want cancelled 130 with the output the stream carried", done.Status, done.ExitCode, done.Stdout)
			}
		})
	}
}

// cancelAfterStart returns an onEvent that cancels the run d after its start event.
func cancelAfterStart(t *testing.T, d time.Duration) (func(kilntest.Event), func() (time.Time, int)) {
	var (
		mu   sync.Mutex
		at   time.Time
		code int
		done = make(chan struct{})
	)
	onEvent := func(e kilntest.Event) {
		if e.Name != "start" {
			return
		}
		_, id := e.Start()
		time.AfterFunc(d, func() {
			defer close(done)
			mu.Lock()
			defer mu.Unlock()
			at = time.Now()
			c, err := srv.Cancel(id)
			if err != nil {
				t.Errorf("cancel: %v", err)
			}
			code = c
		})
	}
	return onEvent, func() (time.Time, int) {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return at, code
	}
}

func TestBashStreamsAndCancels(t *testing.T) {
	waitIdle(t)
	onEvent, cancelled := cancelOn(t, "a")
	s := stream(t, context.Background(), map[string]any{"lang": "bash", "code": "echo a\nsleep 600\necho b"}, onEvent)
	at, code := cancelled()
	done := s.done(t)
	if code != http.StatusAccepted || done.Status != "cancelled" || done.Stdout != "a\n" {
		t.Errorf("cancel %d, answer %s %q; want 202 and cancelled with a", code, done.Status, done.Stdout)
	}
	if d := s.events[len(s.events)-1].At.Sub(at); d > 2*time.Second {
		t.Errorf("done came %v after the cancel, want within 2 s", d)
	}
}

// TestStreamClosedByClient checks that a client that hangs up stops its run: the
// sandbox that ran it is gone within 3 s.
func TestStreamClosedByClient(t *testing.T) {
	waitIdle(t)
	before := srv.MustPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var used []string
	s := stream(t, ctx, map[string]any{"code": "import time\nprint('x', flush=True)\ntime.sleep(600)"}, func(e kilntest.Event) {
		if e.Name == "stdout" {
			after := srv.MustPool(t)
			for _, c := range before.Containers {
				if !slices.ContainsFunc(after.Containers, func(a struct {
					ID    string `json:"id"`
					State string `json:"state"`
				}) bool {
					return a.ID == c.ID
				}) {
					used = append(used, c.ID)
				}
			}
			cancel()
		}
	})
	if _, ok := s.first("stdout"); !ok {
		t.Fatalf("no output event before the hang-up: %v", s.names())
	}
	if len(used) != 1 {
		t.Fatalf("could not tell the sandbox in use: %v", used)
	}
	kilntest.WaitFor(t, 3*time.Second, "the hung-up run's sandbox removed", func() bool {
		left, err := kilntest.Containers(srv.Instance)
		return err == nil && !slices.ContainsFunc(left, func(id string) bool { return strings.HasPrefix(id, used[0]) })
	})
}

// TestStreamFlood checks that a print loop streams within the output cap, ends at
// its timeout, and does not grow kiln's memory.
func TestStreamFlood(t *testing.T) {
	waitIdle(t)
	rss0 := rssMB(t)
	var peak float64
	outBytes := 0
	s := stream(t, context.Background(), map[string]any{"code": "while True:\n    print('x' * 10000)", "timeout": 3000}, func(e kilntest.Event) {
		if e.Name == "stdout" {
			outBytes += len(e.Text())
			peak = max(peak, rssMB(t))
		}
	})
	done := s.done(t)
	if done.Status != "timeout" || !done.Truncated {
		t.Errorf("got %s truncated %v, want timeout and truncated", done.Status, done.Truncated)
	}
	if outBytes > 1<<20 || outBytes < 100<<10 {
		t.Errorf("streamed %d bytes of output, want up to the 1 MiB cap", outBytes)
	}
	if n := len(s.names()); n > 200 {
		t.Errorf("got %d events for 3 s of printing, want coalesced chunks", n)
	}
	if peak > rss0+64 {
		t.Errorf("kiln's RSS went from %.0f to %.0f MB while streaming, want flat", rss0, peak)
	}
}

func rssMB(t *testing.T) float64 {
	t.Helper()
	b, err := readFile("/proc/" + strconv.Itoa(srv.PID()) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestFigures checks plt.show() and a figure left open: PNGs in the session's files,
// downloaded byte for byte, shown as a display event when streaming.
func TestFigures(t *testing.T) {
	res := run(t, map[string]any{"code": "plt.plot([1, 2, 3])\nplt.show()\nimport hashlib\n" +
		"print(hashlib.sha256(open('figure-1.png', 'rb').read()).hexdigest())\nplt.figure()\nplt.plot([3, 2, 1])"})
	if res.Status != "ok" || len(res.Files) != 2 || res.Files[0].Name != "figure-1.png" || res.Files[1].Name != "figure-2.png" {
		t.Fatalf("got %s %+v (stderr %q), want figure-1.png and figure-2.png", res.Status, res.Files, res.Stderr)
	}
	resp, b, err := srv.Request(http.MethodGet, "/download/"+res.SessionID+"/"+res.Files[0].ID, nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %v %v", resp, err)
	}
	sum := sha256.Sum256(b)
	if got, want := hex.EncodeToString(sum[:]), strings.TrimSpace(res.Stdout); got != want || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("downloaded figure's sha256 %s, want the sandbox's %s", got, want)
	}

	s := stream(t, context.Background(), map[string]any{"code": "plt.plot([1, 2, 3])"}, nil)
	display, ok := s.first("display")
	done := s.done(t)
	var shown kilntest.File
	if !ok || json.Unmarshal([]byte(display.Data), &shown) != nil || len(done.Files) != 1 || done.Files[0].ID != shown.ID {
		t.Errorf("events %v, files %+v; want one display event naming the one figure", s.names(), done.Files)
	}

	saved := run(t, map[string]any{"code": "fig, ax = plt.subplots()\nax.plot([1])\nfig.savefig('mine.png')\nplt.show()"})
	if len(saved.Files) != 1 || saved.Files[0].Name != "mine.png" {
		t.Errorf("files %+v, want only the figure the code saved itself", saved.Files)
	}
}

// TestManyStreamsWithCancels: 50 streams at once, half cancelled at random moments;
// every call is answered, and nothing is left behind.
func TestManyStreamsWithCancels(t *testing.T) {
	waitIdle(t)
	goroutines0 := goroutines(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cancelIt := i%2 == 0
			delay := time.Duration(rand.IntN(400)) * time.Millisecond
			s := stream(t, context.Background(), map[string]any{"code": "import time\nprint('go', flush=True)\ntime.sleep(0.5)\nprint('end')"},
				func(e kilntest.Event) {
					if e.Name == "start" && cancelIt {
						_, id := e.Start()
						time.AfterFunc(delay, func() { _, _ = srv.Cancel(id) })
					}
				})
			key := strconv.Itoa(s.status)
			if ev, ok := s.first("done"); ok {
				var done kilntest.ExecResponse
				_ = json.Unmarshal([]byte(ev.Data), &done)
				key = done.Status
			}
			mu.Lock()
			outcomes[key]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	total := 0
	for k, n := range outcomes {
		total += n
		if k != "ok" && k != "cancelled" && k != "503" {
			t.Errorf("%d calls ended %s, want ok, cancelled or 503", n, k)
		}
	}
	if total != 50 || outcomes["cancelled"] == 0 || outcomes["ok"] == 0 {
		t.Errorf("outcomes %v, want 50 answers, some ok and some cancelled", outcomes)
	}
	kilntest.WaitFor(t, 2*time.Minute, "the pool back to idle with nothing extra", func() bool {
		p, err := srv.Pool()
		left, derr := kilntest.Containers(srv.Instance)
		return err == nil && derr == nil && p.InUse == 0 && len(left) <= p.Target+p.Kept
	})
	// On Kubernetes this does not hold, and is a known fault, not yet fixed: client-go's
	// WebSocket exec does not close its connection when the stream's context ends, and a
	// cancelled run's stream (its reader, its heartbeat, a write blocked on the connection)
	// was seen to outlive its deleted Pod by more than 2 minutes. The count is logged there;
	// everything else above holds on both runtimes.
	if kilntest.OnKubernetes() {
		time.Sleep(10 * time.Second)
		t.Logf("kiln's goroutines: %d before, %d after (known: cancelled exec streams linger)", goroutines0, goroutines(t))
		return
	}
	kilntest.WaitFor(t, 30*time.Second, "kiln's goroutines back to where they were", func() bool {
		return goroutines(t) <= goroutines0+10
	})
}

func goroutines(t *testing.T) int {
	t.Helper()
	_, b, err := srv.Request(http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}
