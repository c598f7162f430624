package kilntest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Wheel makes a pure-Python wheel of one package, name/__init__.py holding module: what
// a test's own package index serves to pip.
func Wheel(name, version, module string) ([]byte, error) {
	distInfo := name + "-" + version + ".dist-info"
	files := []struct{ name, body string }{
		{name + "/__init__.py", module},
		{distInfo + "/METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"},
		{distInfo + "/WHEEL", "Wheel-Version: 1.0\nGenerator: kiln-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
	w, err := zw.Create(distInfo + "/RECORD")
	if err != nil {
		return nil, err
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WheelFile is the file name pip expects of Wheel's wheel.
func WheelFile(name, version string) string { return name + "-" + version + "-py3-none-any.whl" }

// PackageIndex serves a PEP 503 index of one package and its wheel under prefix
// ("/simple/", "/files/"), for mounting on a test's upstream.
func PackageIndex(mux *http.ServeMux, name, version string, wheel []byte) {
	sum := sha256.Sum256(wheel)
	file := WheelFile(name, version)
	mux.HandleFunc("/simple/", func(w http.ResponseWriter, r *http.Request) {
		switch strings.Trim(r.URL.Path, "/") {
		case "simple":
			fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="%s/">%s</a></body></html>`, name, name)
		case "simple/" + name:
			fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%x">%s</a></body></html>`, file, sum, file)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("/files/"+file, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(wheel)
	})
}

// patternChunk is what Bytes repeats: 64 KiB of "0123456789abcdef".
var patternChunk = bytes.Repeat([]byte("0123456789abcdef"), 4096)

// Bytes serves /bytes?n=N on mux: N bytes of "0123456789abcdef" repeated, with their
// length, written a chunk at a time; PatternDigest is their SHA-256.
func Bytes(mux *http.ServeMux) {
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(patternChunk))
			if _, err := w.Write(patternChunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
}

// PatternDigest is the hex SHA-256 of the n bytes Bytes serves.
func PatternDigest(n int) string {
	h := sha256.New()
	for n > 0 {
		k := min(n, len(patternChunk))
		h.Write(patternChunk[:k])
		n -= k
	}
	return hex.EncodeToString(h.Sum(nil))
}
