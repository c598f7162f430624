package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/kilnsh/kiln"
)

func TestSanitizeName(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"report.csv", "report.csv"},
		{"héllo wörld.txt", "héllo wörld.txt"},
		{"../../etc/passwd", "passwd"},
		{"/abs/path/x.py", "x.py"},
		{`C:\Users\me\data.xlsx`, "data.xlsx"},
		{"dir/", "dir"},
		{"a\x00b\nc\td\x7f.txt", "abcd.txt"},
		{"\u0085nel.txt", "nel.txt"},                                         // a C1 control character
		{"a\xffb.txt", "ab.txt"},                                             // not UTF-8
		{"\u202egnp.exe", "gnp.exe"},                                         // a right-to-left override would show "exe.png"
		{"a\u2066b\u2069\u200fc.txt", "abc.txt"},                             // isolates and marks: bidirectional formatting
		{"\U0001F468\u200D\U0001F469.txt", "\U0001F468\u200D\U0001F469.txt"}, // a zero-width joiner is not one
		{"  spaced.txt \t", "spaced.txt"},
		{"...", "..."},
		{"", "file"},
		{".", "file"},
		{"..", "file"},
		{"/", "file"},
		{`\`, "file"},
		{"   ", "file"},
		{"\x00\x01\x02", "file"},
		{".\x00.", "file"}, // ".." once the control character is gone
		{"a/..", "file"},
		{strings.Repeat("a", 300), strings.Repeat("a", 255)},
		{strings.Repeat("a", 254) + "é", strings.Repeat("a", 254)}, // é would straddle byte 255
		{strings.Repeat("é", 200), strings.Repeat("é", 127)},
		{strings.Repeat("€", 100), strings.Repeat("€", 85)},
	}
	for _, tt := range tests {
		t.Run(shorten(tt.in), func(t *testing.T) {
			got := SanitizeName(tt.in)
			if got != tt.want {
				t.Errorf("SanitizeName(%q) = %q, want %q", tt.in, got, tt.want)
			}
			checkSafeName(t, got)
		})
	}
}

// checkSafeName fails the test unless name keeps every promise of SanitizeName.
func checkSafeName(t *testing.T, name string) {
	t.Helper()
	if !utf8.ValidString(name) {
		t.Errorf("%q is not valid UTF-8", name)
	}
	if len(name) == 0 || len(name) > 255 {
		t.Errorf("%q is %d bytes, want 1 to 255", name, len(name))
	}
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		t.Errorf("%q is or holds a path part", name)
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		t.Errorf("%q holds a control character", name)
	}
	if strings.IndexFunc(name, func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }) >= 0 {
		t.Errorf("%q holds a bidirectional formatting character", name)
	}
}

func shorten(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

func TestSanitizePath(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"out.txt", "out.txt"},
		{"a/b/c.txt", "a/b/c.txt"},
		{"../x", "x"},
		{"../../../../etc/passwd", "etc/passwd"},
		{"/abs/y", "abs/y"},
		{"a/../../b", "b"},
		{"a/b/../c", "a/c"},
		{`a\..\..\b`, "b"},
		{"./a//b/", "a/b"},
		{"a/ .. /b", "a/file/b"}, // not "..", but no name either once trimmed
		{"a/\x00/b", "a/file/b"},
		{"dir/na\x07me.txt", "dir/name.txt"},
		{"", "file"},
		{".", "file"},
		{"..", "file"},
		{"/", "file"},
		{"../..", "file"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := sanitizePath(tt.in)
			if got != tt.want {
				t.Errorf("sanitizePath(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for part := range strings.SplitSeq(got, "/") {
				checkSafeName(t, part)
			}
		})
	}
}

func TestContentType(t *testing.T) {
	tests := []struct {
		name, want string
	}{
		{"plot.png", "image/png"},
		{"PLOT.PNG", "image/png"},
		{"photo.jpg", "image/jpeg"},
		{"data.json", "application/json"},
		{"page.html", "text/html; charset=utf-8"},
		{"chart.svg", "image/svg+xml"},
		{"doc.pdf", "application/pdf"},
		{"sub/dir/plot.png", "image/png"},
		{"noext", "application/octet-stream"},
		{"weird.kiln-unknown-ext", "application/octet-stream"},
		{"trailing.", "application/octet-stream"},
		{"", "application/octet-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ContentType(tt.name); got != tt.want {
				t.Errorf("ContentType(%q) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}

func TestCallerOwns(t *testing.T) {
	tests := []struct {
		name    string
		creator Caller
		caller  Caller
		want    bool
	}{
		{"same key, no user", alice, alice, true},
		{"same key and user", aliceU1, aliceU1, true},
		{"same key, caller names no user", aliceU1, alice, true},
		{"same key, session names no user", alice, aliceU1, true},
		{"same key, another user", aliceU1, aliceU2, false},
		{"another key", alice, bob, false},
		{"another key, same user", aliceU1, Caller{Key: "key-b", User: "u1"}, false},
		{"no key, no key", anon, anon, true},
		{"no key, a key", anon, alice, false},
		{"a key, no key", alice, anon, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.caller.owns(tt.creator.owner()); got != tt.want {
				t.Errorf("%+v owns a session of %+v = %v, want %v", tt.caller, tt.creator, got, tt.want)
			}
		})
	}
}

// fixture is a session with a file and state, made for ownership checks.
type fixture struct {
	e        *testEnv
	sid, fid string
}

func newFixture(t *testing.T, creator Caller, expired bool) *fixture {
	t.Helper()
	e := newEnv(t, testLimits)
	sid := ""
	if expired {
		sid = e.expiredSession(t, creator, "").ID
	} else {
		sid = e.session(t, creator, "").ID
	}
	f := e.file(t, sid, "secret.txt", "secret")
	e.putState(t, sid, "STATE")
	return &fixture{e: e, sid: sid, fid: f.ID}
}

// intact fails the test unless the fixture's session, file and state are all there.
func (fx *fixture) intact(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	if _, err := fx.e.st.Session(ctx, fx.sid); err != nil {
		t.Errorf("session gone: %v", err)
	}
	if _, data, err := fx.e.st.File(ctx, fx.sid, fx.fid); err != nil || string(data) != "secret" {
		t.Errorf("file = %q, %v; want it intact", data, err)
	}
	if got := fx.e.state(t, fx.sid); string(got) != "STATE" {
		t.Errorf("state = %q, want it intact", got)
	}
}

// accessOps are the Service's calls on a session, each reduced to an error. Files
// answers a session the caller may not see with an empty list, as the API's 200 []
// does; the op reports that as not_found so that every op is judged alike.
var accessOps = []struct {
	name string
	do   func(ctx context.Context, fx *fixture, c Caller) error
}{
	{"Session", func(ctx context.Context, fx *fixture, c Caller) error {
		sess, err := fx.e.svc.Session(ctx, c, fx.sid)
		if err == nil && sess.ID != fx.sid {
			return errors.New("wrong session")
		}
		return err
	}},
	{"Files", func(ctx context.Context, fx *fixture, c Caller) error {
		list, err := fx.e.svc.Files(ctx, c, fx.sid)
		if err != nil {
			return err
		}
		if list == nil {
			return errors.New("nil list")
		}
		if len(list) == 0 {
			return errNotFound("files")
		}
		return nil
	}},
	{"File", func(ctx context.Context, fx *fixture, c Caller) error {
		_, data, err := fx.e.svc.File(ctx, c, fx.sid, fx.fid)
		if err == nil && string(data) != "secret" {
			return errors.New("wrong data")
		}
		return err
	}},
	{"DeleteFile", func(ctx context.Context, fx *fixture, c Caller) error {
		return fx.e.svc.DeleteFile(ctx, c, fx.sid, fx.fid)
	}},
	{"State", func(ctx context.Context, fx *fixture, c Caller) error {
		blob, _, err := fx.e.svc.State(ctx, c, fx.sid)
		if err == nil && string(blob) != "STATE" {
			return errors.New("wrong state")
		}
		return err
	}},
	{"PutState", func(ctx context.Context, fx *fixture, c Caller) error {
		_, err := fx.e.svc.PutState(ctx, c, fx.sid, []byte("OTHER"))
		return err
	}},
	{"DeleteState", func(ctx context.Context, fx *fixture, c Caller) error {
		return fx.e.svc.DeleteState(ctx, c, fx.sid)
	}},
	{"DeleteSession", func(ctx context.Context, fx *fixture, c Caller) error {
		return fx.e.svc.DeleteSession(ctx, c, fx.sid)
	}},
}

func TestOwnership(t *testing.T) {
	tests := []struct {
		name    string
		creator Caller
		caller  Caller
		expired bool
		allowed bool
	}{
		{"the owner", aliceU1, aliceU1, false, true},
		{"same key without a user", aliceU1, alice, false, true},
		{"same key with a user, session without", alice, aliceU1, false, true},
		{"same key, another user", aliceU1, aliceU2, false, false},
		{"another key", alice, bob, false, false},
		{"a key, session made with auth off", anon, alice, false, false},
		{"auth off, session made with a key", alice, anon, false, false},
		{"the owner, session expired", alice, alice, true, false},
	}
	for _, tt := range tests {
		for _, op := range accessOps {
			t.Run(tt.name+"/"+op.name, func(t *testing.T) {
				fx := newFixture(t, tt.creator, tt.expired)
				err := op.do(t.Context(), fx, tt.caller)
				if tt.allowed {
					if err != nil {
						t.Fatalf("%s: %v, want success", op.name, err)
					}
					return
				}
				wantCode(t, err, kiln.CodeNotFound)
				fx.intact(t)
			})
		}
	}
}
