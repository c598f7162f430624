package session

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// nameSeeds are names clients send and paths runs write, hostile ones first.
var nameSeeds = []string{
	"report.csv", "héllo wörld.txt", "../../etc/passwd", "/abs/path/x.py", `C:\Users\me\data.xlsx`,
	"dir/", "a\x00b\nc\td\x7f.txt", "\u0085nel.txt", "a\xffb.txt", "  spaced.txt \t", "...", "", ".", "..",
	"/", `\`, ".\x00.", "a/..", "a/ .. /b", `a\..\..\b`, "./a//b/", "\u202egnp.exe", "con", "a\u00a0",
	strings.Repeat("a", 254) + " b", strings.Repeat("a", 254) + "\u00a0b", strings.Repeat("é", 200),
	strings.Repeat("a/", 100) + "z",
}

// FuzzSanitizeName checks that any name comes out safe, and that a safe name comes
// out as it went in: a stored name never changes when it is sanitized again, as when a
// run writes the file back and its name is matched against the session's files.
func FuzzSanitizeName(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := SanitizeName(name)
		checkSafeName(t, got)
		if again := SanitizeName(got); again != got {
			t.Fatalf("SanitizeName(%q) = %q, but SanitizeName(%q) = %q", name, got, got, again)
		}
		if !filepath.IsLocal(got) || filepath.Base(got) != got {
			t.Fatalf("SanitizeName(%q) = %q, which is not a plain local name", name, got)
		}
	})
}

// FuzzSanitizePath checks that any path a run reports is kept under the data
// directory: relative, clean, without "." or ".." parts, every part a safe name, and
// unchanged when sanitized again.
func FuzzSanitizePath(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := sanitizePath(p)
		if got == "" || path.IsAbs(got) || path.Clean(got) != got || !filepath.IsLocal(got) {
			t.Fatalf("sanitizePath(%q) = %q, not a clean relative path", p, got)
		}
		if joined := path.Join("/mnt/data", got); !strings.HasPrefix(joined, "/mnt/data/") {
			t.Fatalf("sanitizePath(%q) = %q, which leaves /mnt/data as %q", p, got, joined)
		}
		for part := range strings.SplitSeq(got, "/") {
			checkSafeName(t, part)
		}
		if again := sanitizePath(got); again != got {
			t.Fatalf("sanitizePath(%q) = %q, but sanitizePath(%q) = %q", p, got, got, again)
		}
	})
}
