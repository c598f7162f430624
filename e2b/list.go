package e2b

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxListLimit is the most sandboxes one page of GET /v2/sandboxes holds, as E2B's.
const maxListLimit = 100

// list answers GET /v2/sandboxes (and the older GET /sandboxes): the caller's sandboxes,
// newest first unless order=asc, filtered by metadata ("k=v&k2=v2", URL-encoded as the
// SDKs send it), state, template and startedAfter, a page at a time. X-Next-Token is the
// last sandbox's start and id, so a page follows on even when that sandbox has ended.
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
	desc := true
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		desc = false
	default:
		writeError(w, http.StatusBadRequest, "order %q is not asc or desc", q.Get("order"))
		return
	}
	var since time.Time
	if s := q.Get("startedAfter"); s != "" {
		if since, err = time.Parse(time.RFC3339Nano, s); err != nil {
			writeError(w, http.StatusBadRequest, "startedAfter is not an RFC 3339 time: %v", err)
			return
		}
	}
	var from *pageMark
	if s := q.Get("nextToken"); s != "" {
		m, ok := parseMark(s)
		if !ok {
			writeError(w, http.StatusBadRequest, "nextToken %q is not one kiln gave", s)
			return
		}
		from = &m
	}
	template := q.Get("template")
	owned := h.boxes.owned(h.cfg.Caller(r).Principal())
	if desc {
		slices.Reverse(owned)
	}
	out := []sandboxJSON{}
	var last *box
	more := false
	for _, b := range owned {
		if from != nil && !from.before(b, desc) {
			continue
		}
		if len(states) > 0 && !states["running"] {
			continue // kiln's held sandboxes are all running
		}
		if !matches(b.metadata, want) || (template != "" && b.template != template) || b.started.Before(since) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, h.describe(b, false, true))
		last = b
	}
	if more {
		w.Header().Set("X-Next-Token", markOf(last).String())
	}
	writeJSON(w, http.StatusOK, out)
}

// pageMark is where a page of the list ended: a sandbox's start and id, the list's order.
type pageMark struct {
	started int64
	id      string
}

func markOf(b *box) pageMark { return pageMark{b.started.UnixNano(), b.id} }

func (m pageMark) String() string { return strconv.FormatInt(m.started, 10) + "." + m.id }

func parseMark(s string) (pageMark, bool) {
	n, id, ok := strings.Cut(s, ".")
	started, err := strconv.ParseInt(n, 10, 64)
	return pageMark{started, id}, ok && err == nil && id != ""
}

// before reports whether the mark comes before b in the list's order, so b is on a later page.
func (m pageMark) before(b *box, desc bool) bool {
	o := markOf(b)
	if desc {
		m, o = o, m
	}
	return m.started < o.started || (m.started == o.started && m.id < o.id)
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
	// kiln keeps no history: a range that does not hold now has no samples. A second's
	// slack either way, as the SDKs round their bounds to whole seconds.
	now := time.Now()
	from, okFrom := unixParam(r, "start")
	until, okUntil := unixParam(r, "end")
	if !okFrom || !okUntil {
		writeError(w, http.StatusBadRequest, "start and end are Unix times in seconds")
		return
	}
	if (from != nil && now.Unix() < *from-1) || (until != nil && now.Unix() > *until+1) {
		writeJSON(w, http.StatusOK, []metricJSON{})
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
	writeJSON(w, http.StatusOK, []metricJSON{{Timestamp: now.UTC().Format(time.RFC3339Nano), TimestampUnix: now.Unix(),
		CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}})
}

// unixParam is a query parameter in Unix seconds: nil when absent, false when not one.
func unixParam(r *http.Request, name string) (*int64, bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return &n, err == nil && n >= 0
}
