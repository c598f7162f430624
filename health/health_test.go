package health

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/pool"
)

type fakeRuntime struct{ pingErr, imageErr error }

func (fakeRuntime) Name() string                 { return "docker" }
func (d fakeRuntime) Ping(context.Context) error { return d.pingErr }
func (d fakeRuntime) ImageID(context.Context, string) (string, error) {
	return "sha256:abc", d.imageErr
}

type fakePool struct {
	canServe bool
	stats    pool.Stats
}

func (p fakePool) CanServe() bool    { return p.canServe }
func (p fakePool) Stats() pool.Stats { return p.stats }

// PoolStats: the fake is one pool, python.
func (p fakePool) PoolStats() []pool.MemberStats {
	return []pool.MemberStats{{Name: "python", Languages: []string{"bash", "python"}, Stats: p.stats}}
}

type fakeExecutor bool

func (e fakeExecutor) Draining() bool { return bool(e) }

func TestReady(t *testing.T) {
	full := pool.Stats{Target: 2, Ready: 2}
	tests := []struct {
		name     string
		c        Checker
		wantErr  string // "" for ready
		wantStat string // Detailed's status
	}{
		{"all well", Checker{Runtime: fakeRuntime{}, Pool: fakePool{true, full}, Executor: fakeExecutor(false)}, "", "ok"},
		{"draining", Checker{Runtime: fakeRuntime{}, Pool: fakePool{true, full}, Executor: fakeExecutor(true)}, "shutting down", "ok"},
		{"daemon away", Checker{Runtime: fakeRuntime{pingErr: errors.New("refused")}, Pool: fakePool{true, full}, Executor: fakeExecutor(false)}, "docker does not answer: refused", "unhealthy"},
		{"image missing", Checker{Runtime: fakeRuntime{imageErr: errors.New("not found")}, Pool: fakePool{true, full}, Executor: fakeExecutor(false)}, "sandbox image: not found", "unhealthy"},
		{"warm-ups fail", Checker{Runtime: fakeRuntime{}, Pool: fakePool{false, pool.Stats{Target: 2, LastError: "container create: boom"}}, Executor: fakeExecutor(false)}, "no sandbox can be warmed: container create: boom", "degraded"},
		{"still warming", Checker{Runtime: fakeRuntime{}, Pool: fakePool{false, pool.Stats{Target: 2, Warming: 2}}, Executor: fakeExecutor(false)}, "no sandbox is ready yet", "degraded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Ready(context.Background())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Ready: got %v, want nil", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("Ready: got %v, want %q", err, tt.wantErr)
			}
			d := tt.c.Detailed(context.Background()).(map[string]any)
			if d["status"] != tt.wantStat {
				t.Errorf("Detailed status: got %v, want %s", d["status"], tt.wantStat)
			}
		})
	}
}

func TestDetailedListsThePool(t *testing.T) {
	c := Checker{
		Runtime: fakeRuntime{}, Executor: fakeExecutor(false), Image: "kiln-python:latest", Isolation: "runc", Store: "disk", Auth: true,
		Pool: fakePool{true, pool.Stats{Target: 1, Ready: 1, Kept: 2, Sandboxes: []pool.SandboxInfo{{ID: "0123456789ab", State: "ready", Age: 1500 * time.Millisecond}}}},
	}
	d := c.Detailed(context.Background()).(map[string]any)
	p := d["pool"].(map[string]any)
	containers := p["containers"].([]map[string]any)
	if len(containers) != 1 || containers[0]["id"] != "0123456789ab" || containers[0]["age_seconds"] != 1.5 {
		t.Errorf("containers: got %v, want the one ready sandbox, 1.5 s old", containers)
	}
	if p["kept"] != 2 {
		t.Errorf("pool kept: got %v, want 2 (the live sessions' sandboxes)", p["kept"])
	}
	if p["runtime"] != "runc" || d["store"].(map[string]any)["kind"] != "disk" || d["auth"].(map[string]any)["enabled"] != true {
		t.Errorf("got %v, want runtime runc, store disk, auth on", d)
	}
	if img := d["image"].(map[string]any); img["present"] != true || !strings.HasPrefix(img["id"].(string), "sha256:") {
		t.Errorf("image: got %v, want present with its id", img)
	}
	pools := d["pools"].([]map[string]any)
	if len(pools) != 1 || pools[0]["name"] != "python" || pools[0]["ready"] != 1 || !reflect.DeepEqual(pools[0]["languages"], []string{"bash", "python"}) {
		t.Errorf("pools: got %v, want the python pool with its languages", pools)
	}
}

type fakeLive live.Stats

func (f fakeLive) Stats() live.Stats { return live.Stats(f) }

func TestDetailedLive(t *testing.T) {
	tests := []struct {
		name string
		live Live
		want map[string]any
	}{
		{"off", nil, map[string]any{"enabled": false}},
		{"on, nothing yet", fakeLive{Max: 40}, map[string]any{
			"enabled": true, "idle": 0, "busy": 0, "max": 40, "memory_bytes": int64(0),
			"calls": map[string]int64{}, "ended": map[string]int64{}, "flushes": map[string]int64{},
		}},
		{"on, in use", fakeLive{Idle: 2, Busy: 1, Memory: 300 << 20, Max: 8, Counts: live.Counts{
			Calls:   map[string]int64{"new": 3, "reused": 7},
			Ended:   map[string]int64{"idle": 1, "capacity": 2},
			Flushes: map[string]int64{"stored": 5, "failed": 1},
		}}, map[string]any{
			"enabled": true, "idle": 2, "busy": 1, "max": 8, "memory_bytes": int64(300 << 20),
			"calls": map[string]int64{"new": 3, "reused": 7}, "ended": map[string]int64{"idle": 1, "capacity": 2},
			"flushes": map[string]int64{"stored": 5, "failed": 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Checker{Runtime: fakeRuntime{}, Pool: fakePool{true, pool.Stats{}}, Executor: fakeExecutor(false), Live: tt.live}
			got := c.Detailed(context.Background()).(map[string]any)["live"]
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("live: got %#v, want %#v", got, tt.want)
			}
		})
	}
}
