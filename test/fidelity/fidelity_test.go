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

// srv is a kiln with live sessions (the default): a session's calls share its sandbox,
// and a call answers before its state is stored. TestNotebooks starts two more: stored,
// with live sessions that store every state before the answer (STATE_SAVE_DELAY_MS=0),
// against which every live cell is held, the cells after one that killed its sandbox
// included; and restored, with live sessions off: each call restores the session's
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
	Mode     string // "live", "restored", or "live = stored"
	Notebook string
	Cell     int
	// Live is the reference: the live interpreter's outcome, or, once a cell has killed
	// it (and for "live = stored"), the stored session's.
	Live, Kiln Outcome
	Diff       []string
	Explained  string // what the notebook says may differ, in restored mode only
	StateError string
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
	start := func(what string, env ...string) *kilntest.Server {
		s, err := kilntest.Start(kilntest.Options{Key: key, Env: append([]string{
			"POOL_SIZE=2", "QUEUE_TIMEOUT_SECONDS=120", "API_KEYS=" + key, "DATA_DIR=" + t.TempDir()}, env...)})
		if err != nil {
			t.Fatalf("starting kiln %s: %v", what, err)
		}
		t.Cleanup(func() {
			if err := s.Stop(time.Minute); err != nil {
				t.Errorf("stopping kiln %s: %v", what, err)
			}
		})
		return s
	}
	restored := start("with live sessions off", "LIVE_SESSIONS=false")
	stored := start("storing every state before its answer", "STATE_SAVE_DELAY_MS=0")
	var reports []CellReport
	for _, nb := range notebooks {
		t.Run(nb.Name, func(t *testing.T) {
			l := startLive(t)
			interpreter := true // until a cell kills it
			live, rest, strict := &session{s: srv}, &session{s: restored}, &session{s: stored}
			add := func(r CellReport) {
				reports = append(reports, r)
				if len(r.Diff) > 0 && r.Explained == "" {
					t.Errorf("%s: cell %d differs in %s:\n%s", r.Mode, r.Cell, strings.Join(r.Diff, ", "), r.detail())
				}
			}
			for i, cell := range nb.Cells {
				if cell.Kills != "" {
					interpreter = false // it would die here: the stored session is the reference from now on
				}
				fromStored, _ := strict.run(t, cell.Code)
				reference := fromStored
				if interpreter {
					reference = l.run(t, cell.Code)
				}
				got, raw := live.run(t, cell.Code)
				again, rawRest := rest.run(t, cell.Code)
				// A live call answers before its state is stored; what it keeps must be what
				// it would keep stored before the answer, whatever happens to its sandbox.
				add(CellReport{Mode: "live = stored", Notebook: nb.Name, Cell: i + 1, Live: fromStored, Kiln: got,
					Diff: fromStored.differences(got), StateError: kilntest.Str(raw.StateError)})
				add(CellReport{Mode: "live", Notebook: nb.Name, Cell: i + 1, Live: reference, Kiln: got,
					Diff: reference.differences(got), StateError: kilntest.Str(raw.StateError)})
				add(CellReport{Mode: "restored", Notebook: nb.Name, Cell: i + 1, Live: reference, Kiln: again,
					Diff: reference.differences(again), StateError: kilntest.Str(rawRest.StateError), Explained: cell.Explained})
				if cell.Kills != "" && (got.Status != cell.Kills || again.Status != cell.Kills || reference.Status != cell.Kills) {
					t.Errorf("cell %d: live %s, restored %s, stored %s; want each %s", i+1, got.Status, again.Status, reference.Status, cell.Kills)
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
	tallies := map[string]*tally{"live": {}, "restored": {}, "live = stored": {}}
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
		fmt.Fprintf(&b, "%s %s cell %d: reference %s, kiln %s: %s\n", r.Mode, r.Notebook, r.Cell, r.Live.Status, r.Kiln.Status, mark)
		if len(r.Diff) > 0 {
			b.WriteString(r.detail())
		}
	}
	var parts []string
	for _, name := range []string{"live", "restored", "live = stored"} {
		n := tallies[name]
		parts = append(parts, fmt.Sprintf("%s: %d of %d cells (%.1f%%), %d explained, %d unexplained", name,
			n.same, n.total, 100*float64(n.same)/float64(max(n.total, 1)), n.explained, n.total-n.same-n.explained))
	}
	summary := "fidelity, cells with the reference's outcome (the live interpreter, or a session storing before each answer): " +
		strings.Join(parts, "; ")
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
