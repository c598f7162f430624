package api

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDoc is the OpenAPI 3.1 description of this API, written by hand and kept
// honest by openapi_test.go, which checks it against the routes the router serves.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI serves GET /openapi.json: an open route, like the health checks.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openAPIDoc)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}
