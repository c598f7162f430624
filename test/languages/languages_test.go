package languages

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// args are passed to every hello program: each must arrive as one argument, spaces and all.
var args = []string{"one", "two words", "--three=3"}

// Each language prints what it is given.
func TestHello(t *testing.T) {
	for _, l := range languages {
		t.Run(l.lang, func(t *testing.T) {
			r, took := execute(t, map[string]any{"lang": l.lang, "code": l.hello, "args": args})
			want := "hello from " + l.lang + "\n[one]\n[two words]\n[--three=3]\n"
			if r.Status != "ok" || r.ExitCode != 0 || r.Stdout != want || r.Error != nil {
				t.Fatalf("%s\nwant status ok and stdout %q", describe(r), want)
			}
			if r.Stderr != "" || r.Truncated || len(r.Files) != 0 {
				t.Errorf("stderr %q, truncated %v, files %+v: want none", r.Stderr, r.Truncated, r.Files)
			}
			t.Logf("%s: %s (queue %.0f ms, exec %.0f ms)", l.lang, took.Round(time.Millisecond), r.Timing.QueueMS, r.Timing.ExecMS)
		})
	}
}

// Each language reads an uploaded CSV from its working directory (/mnt/data), and the
// file it writes there comes back in `files`, and downloads.
func TestFiles(t *testing.T) {
	in := csvInput(t)
	for _, l := range languages {
		t.Run(l.lang, func(t *testing.T) {
			r, _ := execute(t, map[string]any{"lang": l.lang, "code": l.files, "files": []any{in.ref()}})
			want := "sum=" + strconv.Itoa(csvSum) + "\n"
			if r.Status != "ok" || r.ExitCode != 0 || r.Stdout != want {
				t.Fatalf("%s\nwant status ok and stdout %q", describe(r), want)
			}
			if r.SessionID != in.SessionID {
				t.Errorf("session %q, want the upload's %q (the session of files[0])", r.SessionID, in.SessionID)
			}
			name := "out-" + l.lang + ".txt"
			if len(r.Files) != 1 || r.Files[0].Name != name {
				t.Fatalf("files %+v, want only the new %s (never the unchanged input, nor the source or the build)", r.Files, name)
			}
			f := r.Files[0]
			_, b := download(t, f.SessionID, f.ID)
			if wantFile := l.lang + ":" + strconv.Itoa(csvSum) + "\n"; string(b) != wantFile {
				t.Errorf("%s downloads as %q, want %q", name, b, wantFile)
			}
			if int64(len(b)) != f.Size {
				t.Errorf("%s: downloaded %d bytes, the answer said %d", name, len(b), f.Size)
			}
		})
	}
}

// Code that does not compile is an error whose one-line error is the compiler's first
// error, with the compiler's whole output in stderr; the program never runs.
func TestCompileError(t *testing.T) {
	for _, l := range languages {
		t.Run(l.lang, func(t *testing.T) {
			r, _ := execute(t, map[string]any{"lang": l.lang, "code": l.syntax})
			if r.Status != "error" || r.ExitCode == 0 {
				t.Fatalf("%s\nwant status error, exit code not 0", describe(r))
			}
			if !oneLine(r.Error) || !strings.Contains(*r.Error, l.syntaxSays) {
				t.Errorf("error %q, want one line that says %q", kilntest.Str(r.Error), l.syntaxSays)
			}
			if strings.TrimSpace(r.Stderr) == "" || r.Stdout != "" {
				t.Errorf("stdout %q, stderr %q: want the compiler's output in stderr and nothing else", r.Stdout, r.Stderr)
			}
			// For a compiled language the one line is a line of the compiler's output.
			// (Python appends "(line N)" to its line; bash's is its exit code.)
			if l.lang != "py" && l.lang != "bash" && r.Error != nil && !strings.Contains(r.Stderr, *r.Error) {
				t.Errorf("error %q is not a line of stderr %q", *r.Error, r.Stderr)
			}
			if l.lang == "bash" && !strings.Contains(r.Stderr, "syntax error") {
				t.Errorf("stderr %q, want bash's syntax error", r.Stderr)
			}
		})
	}
}

// A program that fails at run time is an error with a nonzero exit code, after the
// output it wrote.
func TestRuntimeError(t *testing.T) {
	for _, l := range languages {
		t.Run(l.lang, func(t *testing.T) {
			r, _ := execute(t, map[string]any{"lang": l.lang, "code": l.crash})
			if r.Status != "error" || r.ExitCode == 0 || !oneLine(r.Error) {
				t.Fatalf("%s\nwant status error, exit code not 0, a one-line error", describe(r))
			}
			if r.Stdout != "before\n" || !strings.Contains(r.Stderr, "boom at runtime") {
				t.Errorf("stdout %q, stderr %q: want \"before\\n\", and stderr saying boom at runtime", r.Stdout, r.Stderr)
			}
			if e := *r.Error; e == "Time limit exceeded" || e == "Out of memory" || strings.HasPrefix(e, "Sandbox exited") {
				t.Errorf("error %q describes no failure of the program", e)
			}
		})
	}
}

// A program that never ends is stopped at its timeout, which counts from the start of
// the run, and the answer comes within a few seconds.
func TestTimeout(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	for _, l := range languages {
		t.Run(l.lang, func(t *testing.T) {
			r, took := execute(t, map[string]any{"lang": l.lang, "code": l.loop, "timeout": timeout.Milliseconds()})
			if r.Status != "timeout" || r.ExitCode == 0 || !oneLine(r.Error) {
				t.Fatalf("%s\nwant status timeout, exit code not 0, a one-line error", describe(r))
			}
			waited := time.Duration(r.Timing.QueueMS * float64(time.Millisecond))
			if answered := took - waited; answered > timeout+3500*time.Millisecond {
				t.Errorf("answered %s after the sandbox was taken (timeout %s), want within 3.5 s of the timeout", answered.Round(time.Millisecond), timeout)
			}
			if exec := time.Duration(r.Timing.ExecMS * float64(time.Millisecond)); exec < timeout-100*time.Millisecond {
				t.Errorf("exec took %s, less than the timeout %s", exec, timeout)
			}
			// Whether the compile left time for the program to start depends on the load.
			t.Logf("%s: stdout %q, answered in %s (queue %s)", l.lang, r.Stdout, took.Round(time.Millisecond), waited.Round(time.Millisecond))
		})
	}
}

// The timeout covers the compile: a timeout shorter than rustc's compile ends the run
// before the program exists.
func TestTimeoutCoversCompile(t *testing.T) {
	r, took := execute(t, map[string]any{"lang": "rs", "code": slowToCompile, "timeout": 200})
	if r.Status != "timeout" || r.Stdout != "" {
		t.Fatalf("%s\nwant status timeout with no output: rustc takes seconds over this program", describe(r))
	}
	waited := time.Duration(r.Timing.QueueMS * float64(time.Millisecond))
	if answered := took - waited; answered > 4*time.Second {
		t.Errorf("answered %s after the sandbox was taken, want within 4 s", answered.Round(time.Millisecond))
	}
}

// slowToCompile is a Rust program whose compilation takes seconds on any machine: rustc
// evaluates the constant, about 150,000 iterations a second here (a hello world compiled
// and ran within 200 ms once no warm-up shared the cores with it).
const slowToCompile = `#![allow(long_running_const_eval)]
const SPIN: u64 = {
    let mut i = 0u64;
    let mut s = 0u64;
    while i < 1_000_000 {
        s = s.wrapping_mul(31).wrapping_add(i);
        i += 1;
    }
    s
};
fn main() {
    println!("{}", SPIN);
}
`

// truncatedMarker is the last line kiln puts in a stream it cut.
var truncatedMarker = regexp.MustCompile(`\[kiln: output truncated, (\d+) bytes dropped\]\n$`)

// Output beyond MAX_OUTPUT_KB is cut as Python's is: the answer says truncated, keeps
// the first bytes and says how many it dropped.
func TestOutputCap(t *testing.T) {
	const limit = maxOutputKB * 1024
	full := strings.Repeat(strings.Repeat("x", floodWidth)+"\n", floodLines)
	for _, l := range languages {
		t.Run(l.lang, func(t *testing.T) {
			r, _ := execute(t, map[string]any{"lang": l.lang, "code": l.flood})
			if r.Status != "ok" || r.ExitCode != 0 || !r.Truncated {
				t.Fatalf("%s\nwant status ok, truncated", describe(r))
			}
			if len(r.Stdout) > limit+200 {
				t.Fatalf("stdout is %d bytes, want at most the cap %d and a marker", len(r.Stdout), limit)
			}
			m := truncatedMarker.FindStringSubmatch(r.Stdout)
			if m == nil {
				t.Fatalf("stdout does not end with the truncation marker: %q", shorten(r.Stdout))
			}
			dropped, _ := strconv.Atoi(m[1])
			kept := floodBytes - dropped
			if kept > limit || kept < limit/2 {
				t.Fatalf("%d bytes dropped of %d printed: %d kept, want up to the cap %d", dropped, floodBytes, kept, limit)
			}
			if r.Stdout[:kept] != full[:kept] {
				t.Errorf("the kept stdout is not the start of what was printed: %q", shorten(r.Stdout))
			}
			if r.Stderr != "" {
				t.Errorf("stderr %q, want none", shorten(r.Stderr))
			}
		})
	}
}

// stderr has the same cap as stdout.
func TestStderrCap(t *testing.T) {
	const limit = maxOutputKB * 1024
	code := "const line = \"e\".repeat(99) + \"\\n\";\nfor (let i = 0; i < 20000; i++) process.stderr.write(line);\nconsole.log(\"done\");\n"
	r, _ := execute(t, map[string]any{"lang": "js", "code": code})
	if r.Status != "ok" || r.Stdout != "done\n" || !r.Truncated {
		t.Fatalf("%s\nwant status ok, stdout \"done\\n\", truncated", describe(r))
	}
	m := truncatedMarker.FindStringSubmatch(r.Stderr)
	if len(r.Stderr) > limit+200 || m == nil {
		t.Fatalf("stderr is %d bytes (cap %d), ends %q: want the cap and the truncation marker", len(r.Stderr), limit, r.Stderr[max(0, len(r.Stderr)-120):])
	}
	if dropped, _ := strconv.Atoi(m[1]); floodBytes-dropped > limit || !strings.HasPrefix(r.Stderr, strings.Repeat("e", floodWidth)+"\n") {
		t.Errorf("stderr kept %d bytes of %d, want at most %d from the start", floodBytes-dropped, floodBytes, limit)
	}
}

// A language no pool runs is refused before any sandbox is used.
func TestUnknownLanguage(t *testing.T) {
	for _, lang := range []string{"cobol", "Cobol", "brainfuck"} {
		var e kilntest.ErrorBody
		resp, err := srv.PostJSON("/exec", map[string]any{"lang": lang, "code": "DISPLAY 'HELLO'."}, &e)
		if err != nil {
			t.Fatalf("lang %q: %v", lang, err)
		}
		if resp.StatusCode != http.StatusBadRequest || e.Error != "unsupported_language" {
			t.Errorf("lang %q: status %d, error %q (%s), want 400 unsupported_language", lang, resp.StatusCode, e.Error, e.Message)
		}
	}
}

// An R plot drawn with png() comes back as a PNG file.
func TestRPlot(t *testing.T) {
	code := `png("plot.png", width = 480, height = 360)
plot(1:10, (1:10)^2, type = "b", main = "squares")
invisible(dev.off())
cat("plotted\n")
`
	r, _ := execute(t, map[string]any{"lang": "r", "code": code})
	if r.Status != "ok" || r.Stdout != "plotted\n" {
		t.Fatalf("%s\nwant status ok and stdout \"plotted\\n\"", describe(r))
	}
	if len(r.Files) != 1 || r.Files[0].Name != "plot.png" || r.Files[0].ContentType != "image/png" {
		t.Fatalf("files %+v, want only plot.png as image/png", r.Files)
	}
	resp, png := download(t, r.SessionID, r.Files[0].ID)
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 24 {
		t.Fatalf("plot.png starts with %q, want the PNG signature", png[:min(len(png), 16)])
	}
	if ct := resp.Header.Get("Content-Type"); ct != "image/png" {
		t.Errorf("download Content-Type %q, want image/png", ct)
	}
	if w, h := binary.BigEndian.Uint32(png[16:20]), binary.BigEndian.Uint32(png[20:24]); w != 480 || h != 360 {
		t.Errorf("plot.png is %dx%d, want the 480x360 the code drew", w, h)
	}
	if int64(len(png)) != r.Files[0].Size {
		t.Errorf("downloaded %d bytes, the answer said %d", len(png), r.Files[0].Size)
	}
}

// Files carry across languages within a session: a file a js run writes is read by a
// later Python run, whose file a later R run reads.
func TestFilesAcrossLanguages(t *testing.T) {
	js, _ := execute(t, map[string]any{"lang": "js", "code": `const fs = require("fs");
fs.writeFileSync("from-js.json", JSON.stringify({ items: [3, 4, 5], by: "js" }));
console.log("written");
`})
	if js.Status != "ok" || js.Stdout != "written\n" || len(js.Files) != 1 || js.Files[0].Name != "from-js.json" {
		t.Fatalf("js: %s, files %+v", describe(js), js.Files)
	}
	sid := js.SessionID

	py, _ := execute(t, map[string]any{"lang": "py", "session_id": sid, "code": `import json
with open("from-js.json") as f:
    doc = json.load(f)
print(doc["by"], sum(doc["items"]))
with open("from-py.csv", "w") as f:
    f.write("item,double\n")
    for i in doc["items"]:
        f.write(f"{i},{2 * i}\n")
`})
	if py.Status != "ok" || py.Stdout != "js 12\n" || py.SessionID != sid {
		t.Fatalf("python after js: %s, session %q (want %q)", describe(py), py.SessionID, sid)
	}
	if len(py.Files) != 1 || py.Files[0].Name != "from-py.csv" {
		t.Errorf("python's files %+v, want only the new from-py.csv", py.Files)
	}

	r, _ := execute(t, map[string]any{"lang": "r", "session_id": sid, "code": `d <- read.csv("from-py.csv")
cat(nrow(d), sum(d$double), file.exists("from-js.json"), "\n")
`})
	if r.Status != "ok" || r.Stdout != "3 24 TRUE \n" || r.SessionID != sid {
		t.Fatalf("r after python: %s, session %q (want %q)", describe(r), r.SessionID, sid)
	}
}

// The session's state is Python's alone: another language's run neither sees it nor
// changes it, and the next Python run continues from it.
func TestPythonStateAcrossLanguages(t *testing.T) {
	for _, c := range []struct{ lang, code, stdout string }{
		{"js", `console.log(typeof x, typeof globalThis.x);`, "undefined undefined\n"},
		{"bash", `echo "x=[${x-unset}]"`, "x=[unset]\n"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			py, _ := execute(t, map[string]any{"lang": "py", "code": "x = 41"})
			if py.Status != "ok" || !py.HasState {
				t.Fatalf("x = 41: %s, has_state %v", describe(py), py.HasState)
			}
			sid := py.SessionID

			other, _ := execute(t, map[string]any{"lang": c.lang, "session_id": sid, "code": c.code})
			if other.Status != "ok" || other.Stdout != c.stdout || other.SessionID != sid {
				t.Fatalf("%s: %s, session %q (want %q)", c.lang, describe(other), other.SessionID, sid)
			}
			if !other.HasState {
				t.Errorf("%s's answer says has_state false: the session should still hold Python's state", c.lang)
			}

			again, _ := execute(t, map[string]any{"lang": "py", "session_id": sid, "code": "print(x + 1)"})
			if again.Status != "ok" || again.Stdout != "42\n" {
				t.Fatalf("python after %s: %s\nwant 42: the %s run must leave Python's state alone", c.lang, describe(again), c.lang)
			}
		})
	}
}

// poolInfo is one pool of /health/detailed's "pools".
type poolInfo struct {
	Name      string   `json:"name"`
	Languages []string `json:"languages"`
	Target    int      `json:"target"`
	Ready     int      `json:"ready"`
	Warming   int      `json:"warming"`
	InUse     int      `json:"in_use"`
	Created   int64    `json:"created"`
}

func pools(t *testing.T) map[string]poolInfo {
	t.Helper()
	resp, b, err := srv.Request(http.MethodGet, "/health/detailed", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health/detailed: %v %s", err, b)
	}
	var body struct {
		Pools []poolInfo `json:"pools"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("GET /health/detailed: %v: %s", err, b)
	}
	out := map[string]poolInfo{}
	for _, p := range body.Pools {
		out[p.Name] = p
	}
	return out
}

// settledPools waits until every pool is full and quiet, and returns them.
func settledPools(t *testing.T) map[string]poolInfo {
	t.Helper()
	var ps map[string]poolInfo
	kilntest.WaitFor(t, 2*time.Minute, "full, quiet pools", func() bool {
		ps = pools(t)
		for _, p := range ps {
			if p.InUse != 0 || p.Warming != 0 || p.Ready != p.Target {
				return false
			}
		}
		return len(ps) == 2
	})
	return ps
}

// The pools advertise the languages their images run, and a call goes to the first pool
// that runs its language: py and bash to python, the others to polyglot. Which pool served
// a call shows in which pool warmed a sandbox to replace the one it used.
func TestRouting(t *testing.T) {
	ps := settledPools(t)
	py, poly := ps["python"], ps["polyglot"]
	if strings.Join(py.Languages, " ") != "python bash" || py.Target != 1 {
		t.Errorf("python pool %+v, want target 1 and languages python bash", py)
	}
	if poly.Target != 1 {
		t.Errorf("polyglot pool %+v, want target 1", poly)
	}
	for _, l := range languages {
		name := map[string]string{"py": "python"}[l.lang]
		if name == "" {
			name = l.lang
		}
		if !slices.Contains(poly.Languages, name) {
			t.Errorf("the polyglot pool's languages %v lack %q", poly.Languages, name)
		}
	}

	for _, c := range []struct{ lang, pool string }{
		{"py", "python"}, {"bash", "python"}, {"js", "polyglot"}, {"r", "polyglot"}, {"go", "polyglot"},
	} {
		before := settledPools(t)
		r, _ := execute(t, map[string]any{"lang": c.lang, "code": languages[indexOf(t, c.lang)].hello})
		if r.Status != "ok" {
			t.Fatalf("%s: %s", c.lang, describe(r))
		}
		after := settledPools(t)
		for name := range after {
			want := int64(0)
			if name == c.pool {
				want = 1
			}
			if got := after[name].Created - before[name].Created; got != want {
				t.Errorf("lang %s: pool %s created %d sandboxes, want %d (the call goes to %s)", c.lang, name, got, want, c.pool)
			}
		}
	}
}

func indexOf(t *testing.T, lang string) int {
	t.Helper()
	for i, l := range languages {
		if l.lang == lang {
			return i
		}
	}
	t.Fatalf("no language %q", lang)
	return -1
}
