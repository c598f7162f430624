package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample is one reading of the kiln process: resident memory and open file
// descriptors from /proc, goroutines from go_goroutines in /metrics.
type sample struct {
	At         time.Time `json:"at"`
	Life       int       `json:"life"` // which kiln process: 0, then one more after each restart
	RSS        int64     `json:"rss_bytes"`
	FDs        int       `json:"fds"`
	Goroutines int       `json:"goroutines"` // -1 when /metrics did not answer
	Live       int       `json:"live"`       // live sessions' sandboxes, from kiln_live_sessions
}

// read samples the process pid.
func read(pid int, cl *client) (sample, error) {
	s := sample{At: time.Now(), Goroutines: -1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			s.RSS = kb << 10
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	a := cl.do(http.MethodGet, "/metrics", nil, nil, 5*time.Second)
	if a.err == nil && a.status == http.StatusOK {
		sc := bufio.NewScanner(bytes.NewReader(a.body))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
				s.Goroutines, _ = strconv.Atoi(strings.TrimSpace(rest))
			}
			if rest, ok := strings.CutPrefix(sc.Text(), "kiln_live_sessions{"); ok {
				_, v, _ := strings.Cut(rest, "} ")
				n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				s.Live += int(n)
			}
		}
	}
	return s, nil
}

// metric picks one figure out of a sample.
type metric struct {
	name  string
	of    func(sample) float64
	limit func(first float64) float64 // the most the last stretch may exceed the first by
}

// metrics are the figures checked for growth. The margins are generous: they let
// through the load's own swings and catch a leak of one per request, or per sandbox.
var metrics = []metric{
	{"rss_mb", func(s sample) float64 { return float64(s.RSS) / (1 << 20) }, func(f float64) float64 { return max(64, f) }},
	// A live session's sandbox holds fdsPerLive descriptors and goroutinesPerLive
	// goroutines (its stream's and its wait's) for as long as it is live, which is by
	// design: the soak's sessions become live one by one. What grows beyond them is counted.
	{"fds", func(s sample) float64 { return float64(s.FDs - fdsPerLive*s.Live) }, func(f float64) float64 { return max(25, f/2) }},
	{"goroutines", func(s sample) float64 { return float64(s.Goroutines - goroutinesPerLive*s.Live) }, func(f float64) float64 { return max(40, f/2) }},
}

// goroutinesPerLive is what one live session's sandbox holds: measured as 4 (25 goroutines
// in an idle kiln, 65 with 10 live sessions).
const goroutinesPerLive = 4

// fdsPerLive is what one live session's sandbox holds open on Docker: its attach
// connection and its wait request, measured as 2 (13 descriptors in an idle kiln with a
// pool of one, 25 with 6 live sessions).
const fdsPerLive = 2

// warmUp is how long after a kiln starts its samples are left out of the growth check.
const warmUp = 5 * time.Second

// growth is the check of one figure over one kiln process's life.
type growth struct {
	Life        int     `json:"life"`
	Metric      string  `json:"metric"`
	FirstMedian float64 `json:"first_median"`
	LastMedian  float64 `json:"last_median"`
	Limit       float64 `json:"limit"`
	Samples     [2]int  `json:"samples"` // in the first and the last stretch
	OK          bool    `json:"ok"`
	Note        string  `json:"note,omitempty"`
}

// checkGrowth compares, for each kiln process, the median of its first fault-free
// stretch of samples after warm-up with that of its last: a figure up by more than its
// margin is a leak. With a single stretch, its first and last thirds are compared.
func checkGrowth(all []sample, lives []time.Time, ws []window) []growth {
	var out []growth
	for life, began := range lives {
		var stretches [][]sample
		var cur []sample
		for _, s := range all {
			if s.Life != life {
				continue
			}
			if s.At.Before(began.Add(warmUp)) || inWindow(s.At, ws) || s.Goroutines < 0 {
				if len(cur) > 0 {
					stretches, cur = append(stretches, cur), nil
				}
				continue
			}
			cur = append(cur, s)
		}
		if len(cur) > 0 {
			stretches = append(stretches, cur)
		}
		first, last := pickStretches(stretches)
		for _, m := range metrics {
			g := growth{Life: life, Metric: m.name, Samples: [2]int{len(first), len(last)}, OK: true}
			if len(first) < 2 || len(last) < 2 {
				g.Note = "too few fault-free samples to compare"
				out = append(out, g)
				continue
			}
			g.FirstMedian, g.LastMedian = median(first, m.of), median(last, m.of)
			g.Limit = g.FirstMedian + m.limit(g.FirstMedian)
			g.OK = g.LastMedian <= g.Limit
			out = append(out, g)
		}
	}
	return out
}

func pickStretches(stretches [][]sample) (first, last []sample) {
	switch len(stretches) {
	case 0:
		return nil, nil
	case 1:
		s := stretches[0]
		n := len(s) / 3
		return s[:n], s[len(s)-n:]
	}
	return stretches[0], stretches[len(stretches)-1]
}

func inWindow(t time.Time, ws []window) bool {
	for _, w := range ws {
		if !t.Before(w.from) && !t.After(w.to) {
			return true
		}
	}
	return false
}

func median(ss []sample, of func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = of(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// summary is min, max, first and last of one figure over one kiln process's life.
type summary struct {
	Life   int     `json:"life"`
	Metric string  `json:"metric"`
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	First  float64 `json:"first"`
	Last   float64 `json:"last"`
}

func summarize(all []sample, lives int) []summary {
	var out []summary
	for life := range lives {
		for _, m := range metrics {
			s := summary{Life: life, Metric: m.name}
			for _, x := range all {
				if x.Life != life || (m.name == "goroutines" && x.Goroutines < 0) {
					continue
				}
				v := m.of(x)
				if s.N == 0 {
					s.Min, s.Max, s.First = v, v, v
				}
				s.Min, s.Max, s.Last = min(s.Min, v), max(s.Max, v), v
				s.N++
			}
			out = append(out, s)
		}
	}
	return out
}
