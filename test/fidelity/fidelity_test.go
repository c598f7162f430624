package fidelity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/test/kilntest"
)

// srv is a kiln with live sessions (the default): a session's calls share its sandbox.
// restored, started by TestNotebooks, has them off: each call restores the session's
// stored state in a fresh sandbox, the path every session falls back to.
var srv *kilntest.Server

const (
	image     = "kiln-python:latest"
	key       = "fidelity-key"
	cellLimit = 60 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(kilntest.Main(m, kilntest.Options{Key: key, Env: []string{
		"POOL_SIZE=2", "QUEUE_TIMEOUT_SECONDS=120", "API_KEYS=" + key,
	}}, &srv))
}

// Outcome is what a cell did, as the two sides are compared.
type Outcome struct {
	Status, Error, Result, Stdout, Stderr string
	Files                                 []string // "name sha256", sorted
}

// addresses are what differs between two runs of the same code: object ids in reprs.
var addresses = regexp.MustCompile(`0x[0-9a-f]{6,}`)

func normalize(s string) string { return addresses.ReplaceAllString(s, "0x?") }

// differences names the fields of two outcomes that differ.
func (o Outcome) differences(other Outcome) []string {
	var diff []string
	for _, f := range []struct {
		name string
		a, b string
	}{{"status", o.Status, other.Status}, {"error", o.Error, other.Error}, {"result", o.Result, other.Result},
		{"stdout", o.Stdout, other.Stdout}, {"stderr", o.Stderr, other.Stderr}} {
		if f.a != f.b {
			diff = append(diff, f.name)
		}
	}
	if !slices.Equal(o.Files, other.Files) {
		diff = append(diff, "files")
	}
	return diff
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// live is one REPL in a sandbox of its own, serving every cell of a notebook: the live
// interpreter kiln's sessions are measured against.
type live struct {
	sb *kilntest.Sandbox
	n  int
}

func startLive(t *testing.T) *live {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := kilntest.StartSandbox(ctx, kilntest.DefaultSpec(image), "")
	if err != nil {
		t.Fatalf("starting the live interpreter: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("removing the live interpreter: %v", err)
		}
	})
	return &live{sb: sb}
}

func (l *live) run(t *testing.T, code string) Outcome {
	t.Helper()
	l.n++
	ctx, cancel := context.WithTimeout(context.Background(), cellLimit+30*time.Second)
	defer cancel()
	resp, err := l.sb.Exec(ctx, &protocol.Request{ID: fmt.Sprintf("cell-%d", l.n), Op: protocol.OpExec, Lang: "python",
		Code: code, TimeoutMS: cellLimit.Milliseconds(), Figures: true, Limits: kilntest.DefaultLimits})
	if err != nil {
		t.Fatalf("live interpreter, cell %d: %v", l.n, err)
	}
	o := Outcome{Status: resp.Status, Error: normalize(deref(resp.Error)), Result: normalize(deref(resp.Result)),
		Stdout: normalize(resp.Stdout), Stderr: normalize(resp.Stderr)}
	for _, f := range resp.Files {
		o.Files = append(o.Files, f.Path+" "+digest(f.Content))
	}
	slices.Sort(o.Files)
	return o
}

// session runs cells through one kiln session, as a client would.
type session struct {
	s  *kilntest.Server
	id string
}

func (k *session) run(t *testing.T, code string) (Outcome, kilntest.ExecResponse) {
	t.Helper()
	body := map[string]any{"code": code, "timeout": cellLimit.Milliseconds()}
	if k.id != "" {
		body["session_id"] = k.id
	}
	var out kilntest.ExecResponse
	resp, err := k.s.PostJSON("/exec", body, &out)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec: %v (status %v: %s)", err, status(resp), out.Message)
	}
	if k.id != "" && out.SessionID != k.id {
		t.Fatalf("the session changed: %s, then %s", k.id, out.SessionID)
	}
	k.id = out.SessionID
	o := Outcome{Status: out.Status, Error: normalize(kilntest.Str(out.Error)), Result: normalize(kilntest.Str(out.Result)),
		Stdout: normalize(out.Stdout), Stderr: normalize(out.Stderr)}
	if o.Error == "<nil>" {
		o.Error = ""
	}
	if o.Result == "<nil>" {
		o.Result = ""
	}
	for _, f := range out.Files {
		resp, b, err := k.s.Request(http.MethodGet, "/download/"+f.SessionID+"/"+f.ID, nil, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("downloading %s: %v (status %v)", f.Name, err, status(resp))
		}
		o.Files = append(o.Files, f.Name+" "+digest(b))
	}
	slices.Sort(o.Files)
	return o, out
}

// A CellReport is one cell's comparison in one mode.
type CellReport struct {
	Mode       string // "live" or "restored"
	Notebook   string
	Cell       int
	Live, Kiln Outcome
	Diff       []string
	Explained  string // what the notebook says may differ, in restored mode only
	StateError string
}

// modes are the two ways a kiln session runs a notebook, each against its own server.
type mode struct {
	name string
	srv  *kilntest.Server
}

// TestNotebooks runs every notebook through a kiln session with live sessions on and
// through one with them off, and through a live interpreter, cell by cell. It fails on
// any cell whose outcome differs, unless, with live sessions off, the notebook explains
// it (an object that cannot be pickled): a live session keeps even those.
func TestNotebooks(t *testing.T) {
	notebooks, err := LoadNotebooks("notebooks")
	if err != nil {
		t.Fatal(err)
	}
	var cells int
	for _, nb := range notebooks {
		cells += len(nb.Cells)
	}
	if cells < 200 {
		t.Fatalf("the suite holds %d cells, want at least 200", cells)
	}
	restored, err := kilntest.Start(kilntest.Options{Key: key, Env: []string{
		"POOL_SIZE=2", "QUEUE_TIMEOUT_SECONDS=120", "API_KEYS=" + key, "LIVE_SESSIONS=false",
	}})
	if err != nil {
		t.Fatalf("starting kiln with live sessions off: %v", err)
	}
	t.Cleanup(func() {
		if err := restored.Stop(time.Minute); err != nil {
			t.Errorf("stopping kiln with live sessions off: %v", err)
		}
	})
	modes := []mode{{"live", srv}, {"restored", restored}}
	var reports []CellReport
	for _, nb := range notebooks {
		t.Run(nb.Name, func(t *testing.T) {
			l := startLive(t)
			sessions := []*session{{s: srv}, {s: restored}}
			for i, cell := range nb.Cells {
				want := l.run(t, cell.Code)
				for j, m := range modes {
					got, raw := sessions[j].run(t, cell.Code)
					r := CellReport{Mode: m.name, Notebook: nb.Name, Cell: i + 1, Live: want, Kiln: got,
						Diff: want.differences(got), StateError: kilntest.Str(raw.StateError)}
					if m.name == "restored" {
						r.Explained = cell.Explained
					}
					reports = append(reports, r)
					if len(r.Diff) > 0 && r.Explained == "" {
						t.Errorf("%s: cell %d differs in %s:\n%s", m.name, i+1, strings.Join(r.Diff, ", "), r.detail())
					}
				}
			}
		})
	}
	summary := writeReport(t, reports)
	fmt.Println(summary)
	t.Log(summary)
}

func (r CellReport) detail() string {
	var b strings.Builder
	get := map[string]func(Outcome) any{
		"status": func(o Outcome) any { return o.Status }, "error": func(o Outcome) any { return o.Error },
		"result": func(o Outcome) any { return o.Result }, "stdout": func(o Outcome) any { return o.Stdout },
		"stderr": func(o Outcome) any { return o.Stderr }, "files": func(o Outcome) any { return o.Files },
	}
	for _, field := range r.Diff {
		fmt.Fprintf(&b, "  %s: live %.600q\n  %s  kiln %.600q\n", field, fmt.Sprint(get[field](r.Live)),
			strings.Repeat(" ", len(field)), fmt.Sprint(get[field](r.Kiln)))
	}
	if r.StateError != "<nil>" {
		fmt.Fprintf(&b, "  state_error: %.600q\n", r.StateError)
	}
	return b.String()
}

// writeReport writes every cell's comparison to test/results/fidelity/report.txt and
// returns the summary line, which make test prints.
func writeReport(t *testing.T, reports []CellReport) string {
	t.Helper()
	type tally struct{ total, same, explained int }
	tallies := map[string]*tally{"live": {}, "restored": {}}
	var b strings.Builder
	for _, r := range reports {
		n := tallies[r.Mode]
		n.total++
		mark := "same"
		switch {
		case len(r.Diff) == 0:
			n.same++
		case r.Explained != "":
			n.explained++
			mark = "explained (" + r.Explained + "): " + strings.Join(r.Diff, ", ")
		default:
			mark = "DIFFERS: " + strings.Join(r.Diff, ", ")
		}
		fmt.Fprintf(&b, "%s %s cell %d: live interpreter %s, kiln %s: %s\n", r.Mode, r.Notebook, r.Cell, r.Live.Status, r.Kiln.Status, mark)
		if len(r.Diff) > 0 {
			b.WriteString(r.detail())
		}
	}
	var parts []string
	for _, name := range []string{"live", "restored"} {
		n := tallies[name]
		parts = append(parts, fmt.Sprintf("%s sessions %d of %d cells (%.1f%%), %d explained, %d unexplained", name,
			n.same, n.total, 100*float64(n.same)/float64(max(n.total, 1)), n.explained, n.total-n.same-n.explained))
	}
	summary := "fidelity, cells with the live interpreter's outcome: " + strings.Join(parts, "; ")
	dir := filepath.Join(kilntest.Root(), "test", "results", "fidelity")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(b.String()+summary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return summary
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func status(resp *http.Response) any {
	if resp == nil {
		return "none"
	}
	return resp.StatusCode
}
