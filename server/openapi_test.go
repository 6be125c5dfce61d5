package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// consoleRoutes are the routes of the console (HTML for people, not the
// API): the description leaves them out, and the catch-all that answers
// 404 not_found for any other path.
var consoleRoutes = []string{"GET /{$}", "/console/", "/"}

// allRoutes is every route a server registers when everything is on: a
// callback secret and metrics on its handler.
func allRoutes(t *testing.T) []route {
	t.Helper()
	srv, err := New(Config{Store: untouchableStore{}, CallbackSecret: testCallbackSecret, Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	return srv.routeList
}

// The description parses as OpenAPI 3.1 and is valid against the
// specification's schema.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	spec, err := apiSpec()
	require.NoError(t, err)
	require.Equal(t, "3.1.0", spec.model.Version)
	ok, errs := spec.validator.ValidateDocument()
	require.True(t, ok, "%s", describe(errs))
}

// Every route the server registers is described, and every operation the
// description has is registered: a route added to routes without its
// description, or described without its route, fails here.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	spec, err := apiSpec()
	require.NoError(t, err)
	var registered []string
	for _, r := range allRoutes(t) {
		if slices.Contains(consoleRoutes, r.pattern) {
			continue
		}
		registered = append(registered, r.pattern)
		_, described := spec.byPattern[r.pattern]
		require.True(t, described, "route %q is registered (server.go, routes) but openapi.yaml does not describe it", r.pattern)
	}
	for _, pattern := range spec.patterns {
		require.Contains(t, registered, pattern, "openapi.yaml describes %q but the server registers no such route", pattern)
	}
}

// Each operation's security says what its route requires: the role the
// route's handler checks (s.api), none for the routes outside the API's
// tokens, and for /metrics either token.
func TestOpenAPIRolesAreTheRoutes(t *testing.T) {
	spec, err := apiSpec()
	require.NoError(t, err)
	unauthenticated := []string{"POST /v1/callbacks/{token}", "GET /v1/callbacks/{token}",
		"POST /v1/callbacks/budget/{token}", "GET /v1/callbacks/budget/{token}", "GET /v1/openapi.yaml", "GET /healthz", "GET /readyz"}
	for _, r := range allRoutes(t) {
		op, ok := spec.byPattern[r.pattern]
		if !ok {
			continue // the console, or a route TestOpenAPIDescribesEveryRoute reports
		}
		var got []string
		for _, req := range op.Security {
			for name, roles := range req.Requirements.FromOldest() {
				got = append(got, name+strings.Join(append([]string{""}, roles...), ":"))
			}
		}
		switch {
		case len(r.roles) > 0:
			want := "apiToken"
			for _, role := range r.roles {
				want += ":" + string(role)
			}
			require.Equal(t, []string{want}, got, "%s requires roles %v (all of them, in one requirement)", r.pattern, r.roles)
		case slices.Contains(unauthenticated, r.pattern):
			require.NotNil(t, op.Security, "%s says it requires nothing (security: [])", r.pattern)
			require.Empty(t, got, "%s requires no token", r.pattern)
		case r.pattern == "GET /metrics":
			require.Equal(t, []string{"metricsToken", "apiToken:read"}, got, r.pattern)
		default:
			t.Errorf("route %s is neither an API call (s.api) nor one this test knows: say what it requires", r.pattern)
		}
	}
}

// untouchableStore is a store whose every method panics: New reads none.
type untouchableStore struct{ store.Store }

// The description is served, byte for byte, without a token even when the
// server has tokens, and the console links to it.
func TestOpenAPIIsServed(t *testing.T) {
	st := servertest.LiteStore(t)
	h := testServer(t, st, Token{Name: "reader", SHA256: HashToken("reader-token"), Namespaces: []string{"default"}, Roles: []Role{RoleRead}})
	a := servertest.Send(t, h, "GET", "/v1/openapi.yaml", nil)
	require.Equal(t, http.StatusOK, a.Status)
	require.True(t, bytes.Equal(openAPIDoc, a.Body))
	require.Equal(t, http.StatusUnauthorized, servertest.Send(t, h, "GET", "/v1/tasks", nil).Status, "the rest of /v1 still needs a token")

	page := servertest.SendHTML(t, testServer(t, st), "/console/", http.StatusOK)
	require.Contains(t, page, `href="/v1/openapi.yaml"`)
}

// exchange is one call of TestOpenAPIRoundTrips: a request and the status
// (and problem code) it must get.
type exchange struct {
	method, target, body string
	header               []string
	status               int
	code                 string
}

// TestOpenAPIRoundTrips sends a broad table of real calls, on both stores:
// every operation, its answers of success and its refusals. Each answer is
// checked against the description by the handler New wraps in tests
// (openapi_check_test.go); a mismatch fails this test at once (it runs
// alone: it is not parallel), and the run in TestMain.
func TestOpenAPIRoundTrips(t *testing.T) {
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			st := ns.Store
			// A task waiting for an approval, whose callback is
			// delivered once; a finished task with a blob.
			b := approvalSetup(t, st)
			waiting, position := b.startWaiting(t)
			link := b.url(t, sdk.Callback{Namespace: "default", TaskID: waiting, Name: "approve", Wait: position, Expires: timeIn(t)})
			early := b.url(t, sdk.Callback{Namespace: "default", TaskID: waiting, Name: "approve", Wait: position + 7, Expires: timeIn(t)})
			finished := finishTask(t, st, "default")
			ref := putBlob(t, st, "default", uuid.MustParse(finished), "application/pdf", []byte("%PDF-1.7"))

			srv, err := New(Config{Store: st, CallbackSecret: testCallbackSecret, Gatherer: prometheus.NewRegistry(), MaxPayloadBytes: 4096})
			require.NoError(t, err)
			h := srv.Handler()
			started := servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{"n":1},"idempotency_key":"k-1","labels":{"team":"a"},"delay":"1h","fairness_key":"f"}`))
			require.Equal(t, http.StatusAccepted, started.Status, "%s", started.Body)
			var res startResponse
			require.NoError(t, json.Unmarshal(started.Body, &res))
			id := res.ID.String()
			other := uuid.NewString()

			calls := []exchange{
				{method: "GET", target: "/healthz", status: 200},
				{method: "GET", target: "/readyz", status: 200},
				{method: "GET", target: "/metrics", status: 200},
				{method: "GET", target: "/v1/openapi.yaml", status: 200},
				{method: "GET", target: "/v1/openapi.yaml", header: []string{"Host", "evil.example"}, status: 403, code: "host_not_allowed"},

				{method: "POST", target: "/v1/tasks", body: `{"type":"doc","input":{"n":1},"idempotency_key":"k-1","labels":{"team":"a"},"delay":"1h","fairness_key":"f"}`, status: 200},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc","input":{"n":2},"idempotency_key":"k-1"}`, status: 409, code: "idempotency_key_reused"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc","run_at":"2030-01-02T03:04:05Z","priority":3,"max_attempts":2,"deadline":"2031-01-01T00:00:00Z"}`, header: []string{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, status: 202},
				{method: "POST", target: "/v1/tasks", body: `{"type":"no-such-type"}`, status: 400, code: "unknown_task_type"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc","Input":{}}`, status: 400, code: "unknown_field"},
				{method: "POST", target: "/v1/tasks", body: `{"type":`, status: 400, code: "malformed_json"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc","delay":"soon"}`, status: 400, code: "invalid_request"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc","input":"` + strings.Repeat("x", 5000) + `"}`, status: 413, code: "payload_too_large"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc"}`, header: []string{"Content-Type", "text/plain"}, status: 415, code: "unsupported_media_type"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc"}`, header: []string{"Sec-Fetch-Site", "cross-site"}, status: 403, code: "cross_origin"},
				{method: "POST", target: "/v1/tasks?namespace=bad/name", body: `{"type":"doc"}`, status: 400, code: "invalid_request"},

				{method: "GET", target: "/v1/tasks/" + id, status: 200},
				{method: "GET", target: "/v1/tasks/" + finished, status: 200},
				{method: "GET", target: "/v1/tasks/" + waiting.String(), status: 200},
				{method: "GET", target: "/v1/tasks/not-a-uuid", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/tasks/" + other, status: 404, code: "not_found"},
				{method: "GET", target: "/v1/tasks", status: 200},
				{method: "GET", target: "/v1/tasks?limit=1&include=input,output&status=pending&type=doc&queue=default", status: 200},
				{method: "GET", target: "/v1/tasks?include=input&include=output&filter=task.labels.team%20%3D%3D%20%22a%22", status: 200},
				{method: "GET", target: "/v1/tasks?status=asleep", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/tasks?limit=0", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/tasks?include=secrets", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/tasks?filter=%28%28", status: 400, code: "bad_filter"},
				{method: "GET", target: "/v1/tasks/" + id + "/history", status: 200},
				{method: "GET", target: "/v1/tasks/" + finished + "/history", status: 200},
				{method: "GET", target: "/v1/tasks/" + other + "/history", status: 404, code: "not_found"},
				{method: "GET", target: "/v1/tasks/" + finished + "/wait", status: 200},
				{method: "GET", target: "/v1/tasks/" + id + "/wait?timeout=0s", status: 200},
				{method: "GET", target: "/v1/tasks/" + id + "/wait?timeout=1h", status: 400, code: "invalid_request"},

				{method: "POST", target: "/v1/tasks/" + id + "/signals/go", body: `{"payload":{"ok":true},"dedup_id":"d-1"}`, status: 202},
				{method: "POST", target: "/v1/tasks/" + id + "/signals/go", body: `{"payload":{"ok":true},"dedup_id":"d-1"}`, status: 200},
				{method: "POST", target: "/v1/tasks/" + id + "/signals/go", status: 415, code: "unsupported_media_type"},
				{method: "POST", target: "/v1/tasks/by-key/k-1/signals/go", body: `{}`, status: 202},
				{method: "POST", target: "/v1/tasks/by-key/no-such-key/signals/go", body: `{}`, status: 404, code: "not_found"},
				{method: "POST", target: "/v1/tasks/" + finished + "/signals/go", body: `{}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + other + "/signals/go", body: `{"dedup":"x"}`, status: 400, code: "unknown_field"},

				{method: "POST", target: early, body: `{}`, status: 409, code: "wait_not_reached"},
				{method: "POST", target: link + "?decision=maybe", body: `{}`, status: 400, code: "invalid_request"},
				{method: "POST", target: link, body: `{"approved":true,"comment":"ok"}`, status: 202},
				{method: "POST", target: link, body: `{"approved":true,"comment":"ok"}`, status: 410, code: "callback_used"},
				{method: "POST", target: "/v1/callbacks/forged", body: `{}`, status: 403, code: "forbidden"},

				{method: "GET", target: "/v1/queues", status: 200},
				{method: "GET", target: "/v1/queues?window=1h", status: 200},
				{method: "GET", target: "/v1/queues?window=forever", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/queues/default/diagnosis", status: 200},
				{method: "GET", target: "/v1/queues/default/diagnosis?window=1m", status: 200},
				{method: "GET", target: "/v1/queues/default/diagnosis?window=often", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/task-types", status: 200},
				{method: "GET", target: "/v1/tasks/" + finished + "/usage", status: 200},
				{method: "GET", target: "/v1/tasks/" + id + "/usage?children=true", status: 200},
				{method: "GET", target: "/v1/tasks/" + id + "/usage?children=maybe", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/tasks/" + other + "/usage", status: 404, code: "not_found"},
				{method: "GET", target: "/v1/usage?by=model", status: 200},
				{method: "GET", target: "/v1/usage?by=tenant&since=7d&step=6h", status: 200},
				{method: "GET", target: "/v1/usage?by=colour", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/usage?by=model&step=1s", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/usage?by=model&since=60d", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/usage?by=model&since=soon", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/blobs/" + ref.Key, status: 200},
				{method: "GET", target: "/v1/blobs/no-such-blob", status: 404, code: "not_found"},

				{method: "GET", target: "/v1/namespace", status: 200},
				{method: "PUT", target: "/v1/namespace", body: `{"retention_seconds":86400,"key_retention_seconds":null,"type_retention_seconds":{"doc":3600}}`, status: 200},
				{method: "GET", target: "/v1/namespace", status: 200},
				{method: "PUT", target: "/v1/namespace", body: `{"archive":"s3://x"}`, status: 400, code: "invalid_request"},
				{method: "PUT", target: "/v1/namespace", body: `{"retention_seconds":-1}`, status: 400, code: "invalid_request"},
				{method: "PUT", target: "/v1/namespace", body: `{}`, status: 200},

				{method: "GET", target: "/v1/events", status: 200},
				{method: "GET", target: "/v1/events?since=1h&limit=5&filter=event.type%20%3D%3D%20%22task_scheduled%22", status: 200},
				{method: "GET", target: "/v1/events?filter=event.type%20%3D%3D%20%22nothing%22", status: 200},
				{method: "GET", target: "/v1/events?since=yesterday", status: 400, code: "invalid_request"},
				{method: "GET", target: "/v1/events?limit=0", status: 400, code: "invalid_request"},

				{method: "POST", target: "/v1/tasks/" + finished + "/fork", body: `{"at":0,"output":{"text":"total 21,50 €"},"idempotency_key":"fix-1"}`, status: 201},
				{method: "POST", target: "/v1/tasks/" + finished + "/fork", body: `{"at":1}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + finished + "/fork", body: `{"output":1}`, status: 400, code: "invalid_request"},
				{method: "POST", target: "/v1/tasks/" + finished + "/fork", body: `{"at":-1}`, status: 400, code: "invalid_request"},
				{method: "POST", target: "/v1/tasks/" + finished + "/fork", body: `{"at":0,"compensate":true}`, status: 400, code: "invalid_request"},
				{method: "POST", target: "/v1/tasks/" + finished + "/fork", body: `{"at":0,"output":"` + strings.Repeat("x", 5000) + `"}`, status: 413, code: "payload_too_large"},
				{method: "POST", target: "/v1/tasks/" + id + "/fork", body: `{"at":0}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + other + "/fork", body: `{"at":0}`, status: 404, code: "not_found"},
				{method: "POST", target: "/v1/tasks/" + finished + "/reset", body: `{"at":0,"compensate":true}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + finished + "/reset", body: `{"at":0,"reason":"wrong total"}`, status: 201},
				{method: "GET", target: "/v1/tasks/" + finished + "/forks", status: 200},
				{method: "GET", target: "/v1/tasks/" + other + "/forks", status: 404, code: "not_found"},

				{method: "POST", target: "/v1/tasks/" + id + "/cancel", body: `{"reason":"not needed"}`, status: 202},
				{method: "POST", target: "/v1/tasks/" + id + "/retry", body: `{}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + finished + "/retry", body: `{}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + finished + "/compensate", body: `{}`, status: 409, code: "task_state"},
				{method: "POST", target: "/v1/tasks/" + other + "/cancel", body: `{}`, status: 404, code: "not_found"},
				{method: "POST", target: "/v1/tasks/" + id + "/cancel", body: `{"why":"x"}`, status: 400, code: "unknown_field"},
				{method: "POST", target: "/v1/tasks/" + finished + "/erase", body: `{}`, status: 409, code: "task_state"}, // no data key: never encrypted

				{method: "GET", target: "/v1/no-such-endpoint", status: 404, code: "not_found"},
				{method: "DELETE", target: "/v1/tasks/" + id, body: `{}`, status: 404, code: "not_found"},
			}
			for _, c := range calls {
				before := len(OpenAPIViolations())
				a := servertest.Send(t, h, c.method, c.target, bodyOf(c.body), c.header...)
				what := fmt.Sprintf("%s %s", c.method, c.target)
				require.Equal(t, c.status, a.Status, "%s: %.500s", what, a.Body)
				if c.code != "" {
					require.Equal(t, c.code, a.Problem.Code, "%s: %s", what, a.Problem.Detail)
				}
				if v := OpenAPIViolations(); len(v) > before {
					t.Errorf("%s does not match openapi.yaml:\n%s", what, strings.Join(v[before:], "\n"))
				}
			}
		})
	}
}

// TestOpenAPIRoundTripsWithTokens: the refusals of a server with tokens.
func TestOpenAPIRoundTripsWithTokens(t *testing.T) {
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			servertest.RegisterDoc(t, ns.Store, "default")
			h := testServer(t, ns.Store,
				Token{Name: "reader", SHA256: HashToken("reader-token"), Namespaces: []string{"default"}, Roles: []Role{RoleRead}},
				Token{Name: "admin", SHA256: HashToken("admin-token"), Namespaces: []string{"*"}, Roles: []Role{RoleAdmin}})
			reader, admin := []string{"Authorization", "Bearer reader-token"}, []string{"Authorization", "Bearer admin-token"}
			calls := []exchange{
				{method: "GET", target: "/v1/tasks", status: 401, code: "unauthorized"},
				{method: "GET", target: "/v1/tasks", header: []string{"Authorization", "Bearer nobody"}, status: 401, code: "unauthorized"},
				{method: "GET", target: "/v1/tasks", header: reader, status: 200},
				{method: "GET", target: "/v1/tasks?namespace=other", header: reader, status: 403, code: "forbidden"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc"}`, header: reader, status: 403, code: "forbidden"},
				{method: "POST", target: "/v1/tasks", body: `{"type":"doc"}`, header: admin, status: 202},
				{method: "PUT", target: "/v1/namespace", body: `{}`, header: reader, status: 403, code: "forbidden"},
				{method: "GET", target: "/v1/openapi.yaml", status: 200},
				{method: "GET", target: "/healthz", status: 200},
			}
			for _, c := range calls {
				before := len(OpenAPIViolations())
				a := servertest.Send(t, h, c.method, c.target, bodyOf(c.body), c.header...)
				what := fmt.Sprintf("%s %s", c.method, c.target)
				require.Equal(t, c.status, a.Status, "%s: %.500s", what, a.Body)
				if c.code != "" {
					require.Equal(t, c.code, a.Problem.Code, "%s: %s", what, a.Problem.Detail)
				}
				if v := OpenAPIViolations(); len(v) > before {
					t.Errorf("%s does not match openapi.yaml:\n%s", what, strings.Join(v[before:], "\n"))
				}
			}
		})
	}
}

// bodyOf is body for send: nil (no body, no Content-Type) when empty.
func bodyOf(body string) []byte {
	if body == "" {
		return nil
	}
	return []byte(body)
}

// timeIn is an hour from now: a callback link's expiry.
func timeIn(t *testing.T) time.Time {
	t.Helper()
	return time.Now().Add(time.Hour)
}

// The description's EventType lists every event type the history has, so
// that a history answer with a new event is described.
func TestOpenAPIEventTypesAreTheHistorys(t *testing.T) {
	doc, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "\n    EventType:\n      type: string\n      enum:\n")
	require.True(t, ok, "openapi.yaml has no EventType enum")
	var described []string
	for _, line := range strings.Split(rest, "\n") {
		item, isItem := strings.CutPrefix(line, "        - ")
		if !isItem {
			break
		}
		described = append(described, item)
	}
	var types []string
	for _, typ := range history.Types {
		types = append(types, string(typ))
	}
	require.ElementsMatch(t, types, described)
}
