package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Calls of one session take their turns one at a time, in the order they came; one
// that waits too long gets errTurnTimeout, and other sessions never wait.
func TestTurns(t *testing.T) {
	var tt turns
	release, waited, err := tt.acquire(context.Background(), "s", time.Second)
	if err != nil || waited {
		t.Fatalf("first: got waited %v, err %v; want the turn at once", waited, err)
	}
	if other, _, err := tt.acquire(context.Background(), "other", time.Millisecond); err != nil {
		t.Fatalf("another session waited: %v", err)
	} else {
		other()
	}
	if _, _, err := tt.acquire(context.Background(), "s", 20*time.Millisecond); !errors.Is(err, errTurnTimeout) {
		t.Fatalf("while held: got %v, want errTurnTimeout", err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, waited, err := tt.acquire(context.Background(), "s", 5*time.Second)
			if err != nil || !waited {
				t.Errorf("waiter %d: waited %v, err %v", i, waited, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			rel()
		}()
		for tt.waiting() < i+2 { // the holder and the waiters so far: each queues in turn
			time.Sleep(time.Millisecond)
		}
	}
	release()
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4}; len(order) != 5 || order[0] != 0 || order[4] != 4 {
		t.Errorf("turns went %v, want %v: arrival order", order, want)
	}
	if n := tt.waiting(); n != 0 {
		t.Errorf("%d left holding or waiting, want none", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hold, _, _ := tt.acquire(context.Background(), "s", time.Second)
	if _, _, err := tt.acquire(ctx, "s", time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("a caller that left: got %v, want context.Canceled", err)
	}
	hold()
}
