package e2b

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxListLimit is the most sandboxes one page of GET /v2/sandboxes holds, as E2B's.
const maxListLimit = 100

// list answers GET /v2/sandboxes (and the older GET /sandboxes): the caller's sandboxes,
// oldest first, filtered by metadata ("k=v&k2=v2", URL-encoded as the SDKs send it) and
// state, a page at a time; X-Next-Token names where the next page starts.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "metadata is not a query string of key=value pairs: %v", err)
		return
	}
	states := map[string]bool{}
	for _, s := range q["state"] {
		for _, one := range strings.Split(s, ",") {
			if one = strings.TrimSpace(one); one != "" {
				if one != "running" && one != "paused" {
					writeError(w, http.StatusBadRequest, "state %q is not running or paused", one)
					return
				}
				states[one] = true
			}
		}
	}
	limit := maxListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "limit must be from 1 to %d", maxListLimit)
			return
		}
		limit = n
	}
	after := q.Get("nextToken")
	out := []sandboxJSON{}
	next := ""
	passed := after == ""
	for _, b := range h.boxes.owned(h.cfg.Caller(r).Principal()) {
		if !passed {
			passed = b.id == after
			continue
		}
		if len(states) > 0 && !states["running"] {
			continue // kiln's held sandboxes are all running
		}
		if !matches(b.metadata, want) {
			continue
		}
		if len(out) == limit {
			next = out[len(out)-1].SandboxID
			break
		}
		out = append(out, h.describe(b, false, true))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

func matches(have map[string]string, want url.Values) bool {
	for k, vs := range want {
		for _, v := range vs {
			if have[k] != v {
				return false
			}
		}
	}
	return true
}

type metricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int64   `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metrics answers GET /sandboxes/{id}/metrics with one sample, read now from the
// sandbox's own cgroup by its agent.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, id string) {
	b := h.owned(w, r, id)
	if b == nil {
		return
	}
	var m struct {
		CPUCount   int64   `json:"cpu_count"`
		CPUUsedPct float64 `json:"cpu_used_pct"`
		MemUsed    int64   `json:"mem_used"`
		MemTotal   int64   `json:"mem_total"`
		MemCache   int64   `json:"mem_cache"`
		DiskUsed   int64   `json:"disk_used"`
		DiskTotal  int64   `json:"disk_total"`
	}
	end, err := h.unary(r.Context(), b, "sys.metrics", nil, nil)
	if err == nil {
		err = json.Unmarshal(end.Event, &m)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "the sandbox's metrics could not be read: %v", err)
		return
	}
	now := time.Now()
	writeJSON(w, http.StatusOK, []metricJSON{{Timestamp: now.UTC().Format(time.RFC3339Nano), TimestampUnix: now.Unix(),
		CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}})
}
