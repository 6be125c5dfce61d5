package server

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.1 description of the API, served at GET
// /v1/openapi.yaml. openapi_test.go holds the server to it: every route
// routes registers is described, with its role, and nothing else is; the
// requests and answers of this package's tests are checked against it.
//
//go:embed openapi.yaml
var openAPIDoc []byte

// openAPI serves openAPIDoc, without an API token: it describes the API,
// not the server's data (the console links to it, and a console session
// is not a bearer token).
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}

// route is a pattern routes registered and the roles its handler requires,
// all of them (none for one that is not an API call: probes, metrics,
// callbacks, the console).
type route struct {
	pattern string
	roles   []Role
}

// routeMux is the mux routes registers on: an http.ServeMux that keeps
// the routes in order, so the tests can hold them to the description.
type routeMux struct {
	*http.ServeMux
	routes []route
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern, as http.ServeMux.Handle.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	var roles []Role
	if a, ok := h.(apiHandler); ok {
		roles = a.roles
	}
	m.routes = append(m.routes, route{pattern: pattern, roles: roles})
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers h for pattern, as http.ServeMux.HandleFunc.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// apiHandler is an API call's handler ([Server.api]) and the roles it
// requires, all of them.
type apiHandler struct {
	http.Handler
	roles []Role
}

// testHookHandler, set by this package's tests only, wraps the handler of
// every server New makes (with one that checks requests and answers
// against the description).
var testHookHandler func(http.Handler) http.Handler
