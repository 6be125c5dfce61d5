package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vderrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// This file holds every server this package's tests make (and so the
// external tests' too: they share the test binary) to openapi.yaml: the
// handler New returns is wrapped in [checkedHandler], which checks each
// request to a described operation and its answer against the
// description, and keeps what does not match for TestMain to fail the
// run with ([OpenAPIViolations]). TestOpenAPI… in openapi_test.go check
// the description itself, and the routes.

func init() { testHookHandler = checkedHandler }

// apiSpec is openapi.yaml parsed once: its model, the validator over it,
// and a mux of its operations ("METHOD /path") that finds a request's.
var apiSpec = sync.OnceValues(func() (*openAPISpec, error) {
	doc, err := libopenapi.NewDocument(openAPIDoc)
	if err != nil {
		return nil, err
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, err
	}
	spec := &openAPISpec{model: &model.Model, ops: http.NewServeMux(), byPattern: map[string]*v3.Operation{}}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions(),
		// A server without tokens takes requests without one: the
		// security schemes say what a server with tokens requires, which
		// TestOpenAPIRolesAreTheRoutes holds to the code.
		config.WithoutSecurityValidation())
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	spec.validator = v
	spec.schemas = schema_validation.NewSchemaValidator(config.WithFormatAssertions())
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			pattern := strings.ToUpper(method) + " " + path
			spec.ops.Handle(pattern, http.NotFoundHandler())
			spec.byPattern[pattern] = op
			spec.patterns = append(spec.patterns, pattern)
		}
	}
	return spec, nil
})

type openAPISpec struct {
	model     *v3.Document
	validator validator.Validator
	schemas   schema_validation.SchemaValidator
	ops       *http.ServeMux           // a pattern per operation, to match requests with
	byPattern map[string]*v3.Operation // by "METHOD /path"
	patterns  []string                 // in the document's order
}

// operation is the described operation r asks for ("" when none is).
func (s *openAPISpec) operation(r *http.Request) string {
	_, pattern := s.ops.Handler(r)
	return pattern
}

// openAPIViolations are the requests of this run whose answer the
// description does not describe.
var openAPIViolations struct {
	sync.Mutex
	list []string
}

// OpenAPIViolations returns the answers of this test run that did not
// match openapi.yaml, each with its request: TestMain fails the run with
// them.
func OpenAPIViolations() []string {
	openAPIViolations.Lock()
	defer openAPIViolations.Unlock()
	return slices.Clone(openAPIViolations.list)
}

func recordViolation(v string) {
	openAPIViolations.Lock()
	defer openAPIViolations.Unlock()
	openAPIViolations.list = append(openAPIViolations.list, v)
}

// maxCheckedBody is the most bytes of a request or answer body checked:
// past it (a history of megabytes, a listing at its 8 MiB bound, a body
// over the limit) the body is passed on unchecked, so the tests that
// measure the server's memory measure the server.
const maxCheckedBody = 1 << 20

// checkedHandler wraps a server's handler: each request to a path under
// /v1/, /healthz, /readyz or /metrics, and its answer, is checked with
// checkExchange after the handler returns. Everything else (the console)
// passes unchecked.
func checkedHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") && !slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		in := &teeBody{ReadCloser: r.Body}
		outer := r
		if r.Body != nil && r.Body != http.NoBody {
			r = r.Clone(r.Context())
			r.Body = in
		}
		rec := &teeWriter{ResponseWriter: w, status: http.StatusOK}
		aborted := true
		defer func() {
			if aborted || r.Context().Err() != nil {
				// A panic (a streamed answer cut on purpose), or a client
				// that went away: nobody gets a whole answer to check.
				return
			}
			if v := checkExchange(outer, in, rec); v != "" {
				recordViolation(v)
			}
		}()
		next.ServeHTTP(rec, r)
		aborted = false
	})
}

// checkExchange checks one request and its answer, and says what does
// not match the description ("" when all does):
//
//   - a request to no described operation must be answered 404 not_found
//     (the catch-all), or be the console's;
//   - a request the description refuses must be refused (4xx): the
//     description may not be stricter than the server;
//   - every answer must be one the operation describes: its status, its
//     content type and its body's schema (each line of a JSON lines
//     stream).
func checkExchange(r *http.Request, in *teeBody, out *teeWriter) string {
	spec, err := apiSpec()
	if err != nil {
		return "openapi.yaml does not parse: " + err.Error()
	}
	what := fmt.Sprintf("%s %s -> %d", r.Method, r.URL.RequestURI(), out.status)
	pattern := spec.operation(r)
	if pattern == "" {
		if out.status == http.StatusNotFound && out.Header().Get("Content-Type") == "application/problem+json" {
			return ""
		}
		if r.Method == http.MethodGet && r.URL.Path == "/metrics" && out.status == http.StatusNotFound {
			return ""
		}
		return what + ": the description has no such operation, yet the server answered it"
	}
	var problems []string
	// The request, when its whole body was read (a refusal before the
	// body, such as a 401, leaves it unread: nothing to check then).
	if in.complete() {
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(in.buf.Bytes()))
		req.ContentLength = int64(in.buf.Len())
		if ok, errs := spec.validator.ValidateHttpRequestSync(req); !ok && out.status < 400 {
			problems = append(problems, "the server took a request the description refuses: "+describe(errs))
		}
	}
	if out.overflow {
		return joinProblems(what, problems)
	}
	// The answer.
	resp := &http.Response{StatusCode: out.status, Header: out.Header().Clone(), Request: r,
		Body: io.NopCloser(bytes.NewReader(out.buf.Bytes())), ContentLength: int64(out.buf.Len())}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/x-ndjson" {
		problems = append(problems, spec.checkLines(pattern, out)...)
	} else if ok, errs := spec.validator.ValidateHttpResponse(r, resp); !ok {
		problems = append(problems, "the answer is not described: "+describe(errs))
	}
	return joinProblems(what, problems)
}

// checkLines checks each line of a JSON lines answer against the
// schema of the operation's answer of that status.
func (s *openAPISpec) checkLines(pattern string, out *teeWriter) []string {
	op := s.byPattern[pattern]
	resp, ok := op.Responses.Codes.Get(strconv.Itoa(out.status))
	if !ok {
		return []string{"status " + strconv.Itoa(out.status) + " is not described"}
	}
	mediaType, ok := resp.Content.Get("application/x-ndjson")
	if !ok {
		return []string{"the operation's answer is not described as application/x-ndjson"}
	}
	schema := mediaType.Schema.Schema()
	var problems []string
	lines := bufio.NewScanner(bytes.NewReader(out.buf.Bytes()))
	lines.Buffer(nil, maxCheckedBody)
	for n := 1; lines.Scan(); n++ {
		if ok, errs := s.schemas.ValidateSchemaBytes(schema, lines.Bytes()); !ok {
			problems = append(problems, fmt.Sprintf("line %d (%.200s): %s", n, lines.Bytes(), describe(errs)))
		}
	}
	return problems
}

func joinProblems(what string, problems []string) string {
	if len(problems) == 0 {
		return ""
	}
	return what + ":\n\t" + strings.Join(problems, "\n\t")
}

// describe is a validator's errors, with the fields of their schema
// failures.
func describe(errs []*vderrors.ValidationError) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Message)
		if e.Reason != "" && e.Reason != e.Message {
			b.WriteString(": " + e.Reason)
		}
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, " [%s at %s]", f.Reason, f.FieldPath)
		}
	}
	return b.String()
}

// teeBody keeps a copy of what the handler reads of a request body, up
// to maxCheckedBody.
type teeBody struct {
	io.ReadCloser
	buf      bytes.Buffer
	eof      bool // read to its end
	overflow bool
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if t.buf.Len()+n > maxCheckedBody {
		t.overflow = true
	} else {
		t.buf.Write(p[:n])
	}
	if err == io.EOF {
		t.eof = true
	}
	return n, err
}

// complete reports whether the request's whole body (or none) is in buf.
func (t *teeBody) complete() bool {
	return t.ReadCloser == nil || t.ReadCloser == http.NoBody || t.eof && !t.overflow
}

// teeWriter passes an answer on and keeps its status and a copy of its
// body, up to maxCheckedBody. It unwraps to the writer it wraps, so
// http.ResponseController reaches its deadlines and flushing.
type teeWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	buf         bytes.Buffer
	overflow    bool
}

func (t *teeWriter) WriteHeader(status int) {
	if !t.wroteHeader {
		t.status, t.wroteHeader = status, true
	}
	t.ResponseWriter.WriteHeader(status)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.wroteHeader = true
	n, err := t.ResponseWriter.Write(p)
	if err != nil {
		// The client went away (or its deadline passed): what it got is
		// not the answer.
		t.overflow = true
	}
	if t.buf.Len()+n > maxCheckedBody {
		t.overflow = true
	} else {
		t.buf.Write(p[:n])
	}
	return n, err
}

// Flush flushes the writer it wraps, as the handlers' http.Flusher
// assertions expect.
func (t *teeWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
