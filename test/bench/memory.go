package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// LiveMemory is the memory a live session's sandbox holds while it idles, after a call
// that used the pre-imported data stack, beside a warm pool sandbox that has served
// nothing. The REPL figures are its process's VmRSS read from the host's /proc; the
// container figures its cgroup's memory as docker stats counts it (usage less inactive
// file pages), which holds the tmpfs files and the kernel's memory too. The REPL's own
// report (memory_bytes, from /proc/self/statm) is the same figure as its VmRSS; kiln
// shows only the sum over its live sandboxes (/health/detailed's live.memory_bytes).
type LiveMemory struct {
	Code            string  `json:"code"`
	LiveREPLMB      float64 `json:"live_repl_rss_mb"`
	LiveContainerMB float64 `json:"live_container_mb"`
	// The warm figures are medians over the pool's ready sandboxes.
	WarmREPLMB      float64 `json:"warm_repl_rss_mb"`
	WarmContainerMB float64 `json:"warm_container_mb"`
	WarmN           int     `json:"warm_sandboxes"`
	// KilnLiveMB and KilnLive are /health/detailed's live.memory_bytes and live
	// sandboxes (idle and busy) after the call: every live session's, as their REPLs
	// reported them after their last calls.
	KilnLiveMB float64 `json:"kiln_live_memory_mb"`
	KilnLive   int     `json:"kiln_live_sandboxes"`
	Note       string  `json:"note,omitempty"`
}

// memoryCode uses what the image pre-imports, then leaves a small DataFrame and a model
// in the namespace; the figure is closed, so that no file is saved.
const memoryCode = `import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns
import statsmodels.api as sm
from scipy import stats
from sklearn.linear_model import LinearRegression

rng = np.random.default_rng(0)
df = pd.DataFrame({"x": rng.normal(size=1000)})
df["y"] = 2 * df["x"] + rng.normal(scale=0.1, size=1000)
fit = LinearRegression().fit(df[["x"]], df["y"])
ols = sm.OLS(df["y"], sm.add_constant(df["x"])).fit()
r, p = stats.pearsonr(df["x"], df["y"])
fig, ax = plt.subplots()
sns.scatterplot(data=df, x="x", y="y", ax=ax)
plt.close(fig)
del fig, ax
print(round(fit.coef_[0], 1), round(ols.params["x"], 1), round(r, 2))`

// liveMemoryPhase runs memoryCode in a new session, lets its live sandbox idle, and
// reads what it holds, and what the pool's warm sandboxes hold. The live sandbox is the
// one of kiln's containers that is neither ready in the pool nor was live before the
// call; with no instance to list them by (-url), it is not found.
func liveMemoryPhase(ctx context.Context, k *client, res *Results) {
	m := &LiveMemory{Code: "numpy, pandas, matplotlib, seaborn, statsmodels, scipy, scikit-learn used; a 1000-row DataFrame and two fitted models kept"}
	res.LiveMemory = m
	var notes []string
	defer func() { m.Note = strings.Join(notes, "; ") }()
	before, ids, err := kilnSandboxes(ctx, k)
	if err != nil {
		notes = append(notes, err.Error())
		return
	}
	r, err := k.exec(ctx, map[string]any{"code": memoryCode})
	if err == nil {
		err = ranOK(r, "2.0 2.0 1.0")
	}
	if err != nil {
		notes = append(notes, "the call: "+err.Error())
		return
	}
	time.Sleep(2 * time.Second) // idle, and the replacement's warm-up under way
	after, idsAfter, err := kilnSandboxes(ctx, k)
	if err != nil {
		notes = append(notes, err.Error())
		return
	}
	m.KilnLiveMB, m.KilnLive = mib(after.Live.Memory), after.Live.Idle+after.Live.Busy
	if k.instance != "" {
		fresh := liveSandboxes(idsAfter, after.Pool)
		for _, id := range liveSandboxes(ids, before.Pool) {
			fresh = slices.DeleteFunc(fresh, func(x string) bool { return x == id })
		}
		if len(fresh) == 1 {
			repl, ctr, err := sandboxMemory(fresh[0])
			m.LiveREPLMB, m.LiveContainerMB = mib(repl), mib(ctr)
			if err != nil {
				notes = append(notes, "live sandbox: "+err.Error())
			}
		} else {
			notes = append(notes, fmt.Sprintf("%d new live sandboxes, want 1", len(fresh)))
		}
	}
	var repls, ctrs []float64
	for _, c := range after.Pool.Containers {
		repl, ctr, err := sandboxMemory(c.ID)
		if err != nil {
			log.Printf("warm sandbox %s: %v", c.ID, err)
			continue
		}
		repls, ctrs = append(repls, mib(repl)), append(ctrs, mib(ctr))
	}
	m.WarmN = len(repls)
	if m.WarmN > 0 {
		slices.Sort(repls)
		slices.Sort(ctrs)
		m.WarmREPLMB, m.WarmContainerMB = repls[len(repls)/2], ctrs[len(ctrs)/2]
	}
}

// kilnSandboxes waits until the pool is full and idle, then reads /health/detailed and
// lists kiln's containers (none without an instance).
func kilnSandboxes(ctx context.Context, k *client) (health, []string, error) {
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	err := k.waitQuiet(wctx)
	cancel()
	if err != nil {
		return health{}, nil, err
	}
	h, err := k.health(ctx)
	if err != nil || k.instance == "" {
		return h, nil, err
	}
	ids, err := kilntest.Containers(k.instance)
	return h, ids, err
}

// liveSandboxes are the containers in ids that are not ready in the pool: with nothing
// in use, the live sessions' sandboxes.
func liveSandboxes(ids []string, p poolStats) []string {
	var out []string
	for _, id := range ids {
		if !slices.ContainsFunc(p.Containers, func(c poolContainer) bool { return strings.HasPrefix(id, c.ID) }) {
			out = append(out, id)
		}
	}
	return out
}

func mib(b int64) float64 { return round(float64(b)/(1<<20), 1) }

// sandboxMemory reads a sandbox's REPL's VmRSS from the host's /proc and its
// container's memory from its cgroup, in bytes.
func sandboxMemory(id string) (repl, container int64, err error) {
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", id).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("docker inspect: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return 0, 0, fmt.Errorf("no process for %s", id)
	}
	// The container's first process is the init Docker adds (--init); the REPL is its child.
	replPID := pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		if f := strings.Fields(string(b)); len(f) == 1 {
			replPID, _ = strconv.Atoi(f[0])
		}
	}
	kb, err := rssKB(replPID)
	if err != nil {
		return 0, 0, err
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return kb << 10, 0, err
	}
	container, err = cgroupMemory(string(cg))
	return kb << 10, container, err
}

// cgroupMemory is the memory of the cgroup a process's /proc/PID/cgroup names, as docker
// stats counts it: usage less the inactive file pages.
func cgroupMemory(procCgroup string) (int64, error) {
	dir, usage, inactive, ok := memoryCgroup(procCgroup)
	if !ok {
		return 0, errors.New("no memory cgroup")
	}
	b, err := os.ReadFile(filepath.Join(dir, usage))
	if err != nil {
		return 0, err
	}
	used, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return used, err
	}
	return used - statValue(string(stat), inactive), nil
}

// memoryCgroup finds, in a /proc/PID/cgroup, the directory of the process's memory
// cgroup and the names of its usage file and of its inactive file pages in memory.stat:
// cgroup v1's memory controller, else v2's unified hierarchy.
func memoryCgroup(procCgroup string) (dir, usage, inactive string, ok bool) {
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			return filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.usage_in_bytes", "total_inactive_file", true
		case f[0] == "0" && f[1] == "":
			dir, usage, inactive, ok = filepath.Join("/sys/fs/cgroup", f[2]), "memory.current", "inactive_file", true
		}
	}
	return dir, usage, inactive, ok
}

// statValue is the value of key in a memory.stat file, 0 when absent.
func statValue(stat, key string) int64 {
	for _, line := range strings.Split(stat, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// liveMemoryText is the report's part on a live session's memory.
func liveMemoryText(r *Results, md bool) string {
	m := r.LiveMemory
	if m == nil {
		return ""
	}
	var b strings.Builder
	rows := [][3]string{
		{"live session, idle after a call that used the stack", mbText(m.LiveREPLMB), mbText(m.LiveContainerMB)},
		{fmt.Sprintf("warm pool sandbox, served nothing (median of %d)", m.WarmN), mbText(m.WarmREPLMB), mbText(m.WarmContainerMB)},
	}
	tail := fmt.Sprintf("the call: %s; kiln's live.memory_bytes then: %s MB over %d live sandboxes", m.Code, mbText(m.KilnLiveMB), m.KilnLive)
	if m.Note != "" {
		tail += "; " + m.Note
	}
	if md {
		b.WriteString("\n| memory a sandbox holds | REPL RSS MB | container MB |\n|---|---:|---:|\n")
		for _, x := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", x[0], x[1], x[2])
		}
		fmt.Fprintf(&b, "\n%s.\n", tail)
		return b.String()
	}
	fmt.Fprintf(&b, "\n%-56s %12s %13s\n", "memory a sandbox holds", "REPL RSS MB", "container MB")
	for _, x := range rows {
		fmt.Fprintf(&b, "%-56s %12s %13s\n", x[0], x[1], x[2])
	}
	fmt.Fprintf(&b, "%s\n", tail)
	return b.String()
}

func mbText(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
