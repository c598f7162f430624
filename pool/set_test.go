package pool

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// newTestSet makes a Set of a python pool of size 1 and a polyglot pool of size 0, on
// runtimes whose REPLs say, in their ready frames, what each image runs; the polyglot
// runtime's starts wait at polyGate, when it is set.
func newTestSet(t *testing.T, wait time.Duration, polyGate chan struct{}) *Set {
	t.Helper()
	pyRT := &sandboxtest.Fake{Prefix: "py-", Languages: []string{"python", "bash"}}
	polyRT := &sandboxtest.Fake{Prefix: "poly-", Languages: []string{"bash", "js", "r"}, Gate: polyGate}
	sweep(t, pyRT)
	sweep(t, polyRT)
	log := discard()
	py := New(testConfig(1), pyRT, log, nil)
	poly := New(testConfig(0), polyRT, log, nil)
	set := NewSet([]Member{{"python", py}, {"polyglot", poly}}, wait, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = set.Close(ctx)
	})
	return set
}

func TestSetRoutesByTheLanguagesItLearned(t *testing.T) {
	set := newTestSet(t, 5*time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go set.Probe(ctx) // the polyglot pool keeps nothing warm: the probe starts one

	for _, c := range []struct{ lang, prefix string }{{"js", "poly-"}, {"python", "py-"}, {"bash", "py-"}, {"r", "poly-"}} {
		sb, err := set.Checkout(ctx, c.lang)
		if err != nil {
			t.Fatalf("Checkout(%s): %v", c.lang, err)
		}
		if !strings.HasPrefix(sb.ID(), c.prefix) || !set.Holds(sb.ID()) {
			t.Errorf("Checkout(%s) = %s, want a held sandbox of the pool %s*", c.lang, sb.ID(), c.prefix)
		}
		set.Release(sb)
		if set.Holds(sb.ID()) {
			t.Errorf("%s still held after its release", sb.ID())
		}
	}
	if _, err := set.Checkout(ctx, "ruby"); !errors.Is(err, kiln.ErrUnsupportedLanguage) {
		t.Errorf("Checkout(ruby) = %v, want ErrUnsupportedLanguage", err)
	}
	langs, complete := set.Languages()
	if !reflect.DeepEqual(langs, []string{"bash", "js", "python", "r"}) || !complete {
		t.Errorf("Languages() = %v, %v; want bash js python r, complete", langs, complete)
	}
	stats := set.PoolStats()
	if len(stats) != 2 || stats[0].Name != "python" || stats[1].Name != "polyglot" || stats[0].Stats.Target != 1 ||
		!reflect.DeepEqual(stats[1].Languages, []string{"bash", "js", "r"}) {
		t.Errorf("PoolStats() = %+v", stats)
	}
	if sum := set.Stats(); sum.Target != 1 || sum.Counts.Created < 3 {
		t.Errorf("Stats() = %+v, want the pools added up", sum)
	}
}

func TestSetWaitsBoundedForPoolsThatHaveNotSaid(t *testing.T) {
	gate := make(chan struct{}) // the polyglot pool's first sandbox waits for it
	set := newTestSet(t, 200*time.Millisecond, gate)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go set.Probe(ctx)
	start := time.Now()
	if _, err := set.Checkout(ctx, "js"); !errors.Is(err, kiln.ErrQueueTimeout) {
		t.Errorf("Checkout(js) = %v, want ErrQueueTimeout while the pool that may run it has not said", err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 2*time.Second {
		t.Errorf("gave up after %v, want about the wait (200ms)", took)
	}
	sb, err := set.Checkout(ctx, "python") // a language already known does not wait
	if err != nil {
		t.Fatal(err)
	}
	set.Release(sb)
	if _, complete := set.Languages(); complete {
		t.Error("Languages() complete before the polyglot pool said anything")
	}
	close(gate)
}

// A pool whose image is still being built (Config.Await) warms nothing and answers its
// languages at once with a 503 that says why, while the other pools serve and the set
// counts as ready; once what it awaited is there, it warms and serves.
func TestSetAnswersAPoolThatAwaitsItsImageWith503(t *testing.T) {
	pyRT := &sandboxtest.Fake{Prefix: "py-", Languages: []string{"python", "bash"}}
	polyRT := &sandboxtest.Fake{Prefix: "poly-", Languages: []string{"bash", "js", "r"}}
	sweep(t, pyRT)
	sweep(t, polyRT)
	var built atomic.Bool
	polyCfg := testConfig(1)
	polyCfg.AwaitRetryAfter = 30 * time.Second
	polyCfg.Await = func(context.Context) error {
		if !built.Load() {
			return errors.New("image kiln-polyglot:latest is not built yet")
		}
		return nil
	}
	log := discard()
	set := NewSet([]Member{{"python", New(testConfig(1), pyRT, log, nil)}, {"polyglot", New(polyCfg, polyRT, log, nil)}},
		5*time.Second, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = set.Close(ctx)
	})
	ctx := t.Context()
	sb, err := set.Checkout(ctx, "python")
	if err != nil {
		t.Fatal(err)
	}
	set.Release(sb)
	start := time.Now()
	_, err = set.Checkout(ctx, "r")
	var ke *kiln.Error
	if !errors.As(err, &ke) || ke.Code != kiln.CodeUnavailable || ke.RetryAfter != 30 ||
		!strings.Contains(ke.Message, "pool polyglot") || !strings.Contains(ke.Message, "kiln-polyglot:latest is not built yet") {
		t.Errorf("Checkout(r) while the image is built = %v, want a 503 with Retry-After 30 naming the pool and why", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the 503 took %v: it should not wait for the pool", took)
	}
	if starts(polyRT) != 0 {
		t.Errorf("%d polyglot sandboxes started before the image was there", starts(polyRT))
	}
	waitFor(t, "the python pool to be ready", set.CanServe)
	if st := set.PoolStats()[1].Stats; !strings.Contains(st.LastError, "not built yet") {
		t.Errorf("the awaiting pool's last error %q, want why it waits", st.LastError)
	}
	built.Store(true)
	waitFor(t, "the polyglot pool to warm", func() bool { return set.PoolStats()[1].Stats.Ready == 1 })
	sb, err = set.Checkout(ctx, "r")
	if err != nil || !strings.HasPrefix(sb.ID(), "poly-") {
		t.Fatalf("Checkout(r) once built = %v, %v", sb, err)
	}
	set.Release(sb)
}
