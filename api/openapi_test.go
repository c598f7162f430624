package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/kilnsh/kiln/execution"
)

// openAPIDocument is the part of api/openapi.json the tests read.
type openAPIDocument struct {
	OpenAPI  string                                `json:"openapi"`
	Servers  []struct{ URL string }                `json:"servers"`
	Security []map[string][]string                 `json:"security"`
	Paths    map[string]map[string]json.RawMessage `json:"paths"`
	Comps    struct {
		Schemas map[string]struct {
			Enum []string `json:"enum"`
		} `json:"schemas"`
		SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
	} `json:"components"`
}

type openAPIOperation struct {
	Security  *[]map[string][]string    `json:"security"`
	Responses map[string]map[string]any `json:"responses"`
}

func loadOpenAPI(t *testing.T) openAPIDocument {
	t.Helper()
	var doc openAPIDocument
	dec := json.NewDecoder(bytes.NewReader(openAPIDoc))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("api/openapi.json does not parse: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	if len(doc.Paths) == 0 {
		t.Fatal("api/openapi.json has no paths")
	}
	return doc
}

// openAPIServer is a Server with every optional route mounted and auth on.
func openAPIServer(t *testing.T) *Server {
	t.Helper()
	return NewHarness(t, HarnessConfig{
		Keys:    []string{"k"},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "kiln_up 1\n") }),
	}).Server
}

var chiParam = regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)

// openAPIPath writes a chi route pattern as an OpenAPI path: {name:regexp} loses its
// regexp and a trailing wildcard becomes the {path} parameter.
func openAPIPath(pattern string) string {
	p := chiParam.ReplaceAllString(pattern, "{$1}")
	if strings.HasSuffix(p, "/*") {
		p = strings.TrimSuffix(p, "*") + "{path}"
	}
	return p
}

// servedRoutes walks the router: "METHOD /path" at the root and, separately, under /v1
// with the prefix taken off.
func servedRoutes(t *testing.T, s *Server) (root, v1 map[string]bool) {
	t.Helper()
	root, v1 = map[string]bool{}, map[string]bool{}
	err := chi.Walk(s.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		set := root
		if route == "/v1" || strings.HasPrefix(route, "/v1/") {
			set, route = v1, strings.TrimPrefix(route, "/v1")
			if route == "" {
				route = "/"
			}
		}
		set[method+" "+openAPIPath(route)] = true
		return nil
	})
	if err != nil {
		t.Fatalf("walking the router: %v", err)
	}
	return root, v1
}

func documentedRoutes(doc openAPIDocument) map[string]bool {
	out := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				out[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIMatchesRouter: every route the router serves is documented with its
// method, and every documented operation is served. The /v1 copies are checked to
// mirror the root, and the document names /v1 as a second server instead.
func TestOpenAPIMatchesRouter(t *testing.T) {
	doc := loadOpenAPI(t)
	root, v1 := servedRoutes(t, openAPIServer(t))
	documented := documentedRoutes(doc)

	for _, r := range sortedKeys(root) {
		if !documented[r] {
			t.Errorf("served but not in api/openapi.json: %s", r)
		}
	}
	for _, r := range sortedKeys(documented) {
		if !root[r] {
			t.Errorf("in api/openapi.json but not served: %s", r)
		}
	}
	for _, r := range sortedKeys(root) {
		if !v1[r] {
			t.Errorf("served at the root but not under /v1: %s", r)
		}
	}
	for _, r := range sortedKeys(v1) {
		if !root[r] {
			t.Errorf("served under /v1 but not at the root: %s", r)
		}
	}
	var servers []string
	for _, s := range doc.Servers {
		servers = append(servers, s.URL)
	}
	if !slices.Contains(servers, "/") || !slices.Contains(servers, "/v1") {
		t.Errorf("servers = %v, want both / and /v1", servers)
	}
}

// TestOpenAPISecurity: an operation marked open (security: []) answers without a key,
// and every other one answers 401 without a key, as the document says.
func TestOpenAPISecurity(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, scheme := range []string{"ApiKeyHeader", "BearerAuth", "BasicAuth"} {
		if _, ok := doc.Comps.SecuritySchemes[scheme]; !ok {
			t.Errorf("security scheme %s missing", scheme)
		}
	}
	if len(doc.Security) != 3 {
		t.Errorf("top-level security = %v, want the three schemes as alternatives", doc.Security)
	}
	s := openAPIServer(t)
	sample := strings.NewReplacer("{session_id}", "aWOimoK9wOmceEH4yJX5r", "{file_id}", "0Z9r8JKHDluAbMMSbIfYN", "{path}", "")
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			open := op.Security != nil && len(*op.Security) == 0
			req := httptest.NewRequest(strings.ToUpper(method), sample.Replace(path), nil)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			switch {
			case open && rec.Code == http.StatusUnauthorized:
				t.Errorf("%s %s is documented as open but answers 401 without a key", method, path)
			case !open && rec.Code != http.StatusUnauthorized:
				t.Errorf("%s %s is documented as needing a key but answers %d without one", method, path, rec.Code)
			case !open && op.Responses["401"] == nil:
				t.Errorf("%s %s needs a key but documents no 401", method, path)
			}
		}
	}
}

// TestOpenAPIEnums: the error codes and execution statuses in the document are the
// ones the code uses.
func TestOpenAPIEnums(t *testing.T) {
	doc := loadOpenAPI(t)
	var codes []string
	for c := range statusOf {
		codes = append(codes, string(c))
	}
	sort.Strings(codes)
	got := slices.Sorted(slices.Values(doc.Comps.Schemas["ErrorCode"].Enum))
	if !slices.Equal(got, codes) {
		t.Errorf("ErrorCode enum = %v, want %v", got, codes)
	}
	statuses := []string{execution.StatusError, execution.StatusOK, execution.StatusOOM, execution.StatusSandboxDied, execution.StatusTimeout, execution.StatusCancelled}
	sort.Strings(statuses)
	got = slices.Sorted(slices.Values(doc.Comps.Schemas["ExecStatus"].Enum))
	if !slices.Equal(got, statuses) {
		t.Errorf("ExecStatus enum = %v, want %v", got, statuses)
	}
}

// TestOpenAPIServed: the document is served at /openapi.json and /v1/openapi.json
// without a key.
func TestOpenAPIServed(t *testing.T) {
	s := openAPIServer(t)
	for _, path := range []string{"/openapi.json", "/v1/openapi.json"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d", path, rec.Code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
		if rec.Header().Get("X-Request-Id") == "" {
			t.Errorf("GET %s: no X-Request-Id", path)
		}
		if !bytes.Equal(rec.Body.Bytes(), openAPIDoc) {
			t.Errorf("GET %s: body is not the embedded document", path)
		}
	}
}
