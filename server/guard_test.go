package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cairnflow/cairn/server/console"
	"github.com/cairnflow/cairn/workflow"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// guardBundle is a server over one store, served by httptest on
// 127.0.0.1, with a worker for guard.echo (succeeds) and guard.broken
// (dead-letters), a client, a pending task on a queue no worker serves,
// and a dead letter.
type guardBundle struct {
	store   store.Store
	client  *sdk.Client
	url     string // http://127.0.0.1:port
	host    string // 127.0.0.1:port
	pending uuid.UUID
	dead    uuid.UUID
}

// onEachGuardStore runs test on PostgreSQL and on the embedded store.
func onEachGuardStore(t *testing.T, test func(t *testing.T, setup func(t *testing.T, cfg server.Config) *guardBundle)) {
	t.Helper()
	for _, name := range []string{"PostgreSQL", "SQLite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, func(t *testing.T, cfg server.Config) *guardBundle {
				t.Helper()
				var st store.Store
				if name == "PostgreSQL" {
					st = enginetest.Store(t)
				} else {
					s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "guard.db"))
					require.NoError(t, err)
					t.Cleanup(func() { _ = s.Close() })
					st = s
				}
				return guardSetup(t, st, cfg)
			})
		})
	}
}

func guardSetup(t *testing.T, st store.Store, cfg server.Config) *guardBundle {
	t.Helper()
	ctx := context.Background()
	echo := sdk.NewWorkflow("guard.echo", 1, func(ctx workflow.Context, in json.RawMessage) (json.RawMessage, error) {
		return in, nil
	}, nil)
	broken := sdk.NewWorkflow("guard.broken", 1, func(ctx workflow.Context, _ string) (string, error) {
		return workflow.Step(ctx, "parse", func(context.Context) (string, error) {
			return "", activities.Permanent(errors.New("parser bug"))
		}, nil)
	}, nil)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Concurrency: 2, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
	require.NoError(t, err)
	sdk.Register(w, echo)
	sdk.Register(w, broken)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	pending, err := client.StartDynamic(ctx, echo, "stays", &sdk.StartOpts{Queue: "parked"})
	require.NoError(t, err)
	dead, err := sdk.Start(ctx, client, broken, "doc", nil)
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := client.Wait(waitCtx, dead.ID)
	require.NoError(t, err)
	require.Equal(t, history.StatusDeadLettered, info.Status)

	cfg.Store = st
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { require.NoError(t, srv.Stop(context.Background())) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &guardBundle{store: st, client: client, url: hs.URL, host: strings.TrimPrefix(hs.URL, "http://"),
		pending: pending.ID, dead: dead.ID}
}

// send makes one request; header holds name, value pairs, and "Host"
// sets the Host header. Redirects are not followed.
func send(t *testing.T, method, u, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Add(header[i], header[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(raw)
}

// requireProblem checks a response is the problem with status and code.
func requireProblem(t *testing.T, resp *http.Response, body string, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, body)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), body)
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	require.Equal(t, code, p.Code, body)
}

// unchanged checks the bundle's tasks are as setup left them: two plus
// the ones named, the pending task still pending with its events, the
// dead letter still dead-lettered with its events.
func (b *guardBundle) snapshot(t *testing.T) [3]int {
	t.Helper()
	list, err := b.client.List(context.Background(), &sdk.ListOpts{Limit: 100})
	require.NoError(t, err)
	return [3]int{len(list), len(enginetest.Events(t, b.store, b.pending)), len(enginetest.Events(t, b.store, b.dead))}
}

func (b *guardBundle) requireUntouched(t *testing.T, before [3]int, what string) {
	t.Helper()
	require.Equal(t, before, b.snapshot(t), "%s: nothing written", what)
	require.Equal(t, history.StatusPending, enginetest.GetTask(t, b.store, b.pending).Status, what)
	require.Equal(t, history.StatusDeadLettered, enginetest.GetTask(t, b.store, b.dead).Status, what)
}

const evil = "http://evil.example"

// Finding 3: without tokens, what a web page of another site, or one that
// rebinds its DNS name to the server, can send is refused and writes
// nothing; what a local client sends still works.
func TestTokenlessServerRefusesWebPages(t *testing.T) {
	t.Parallel()
	onEachGuardStore(t, func(t *testing.T, setup func(*testing.T, server.Config) *guardBundle) {
		b := setup(t, server.Config{})
		before := b.snapshot(t)

		// <form enctype=text/plain action=.../v1/tasks> on evil.example.
		resp, body := send(t, "POST", b.url+"/v1/tasks", `{"type":"guard.echo","input":1}`,
			"Content-Type", "text/plain", "Origin", evil)
		requireProblem(t, resp, body, http.StatusUnsupportedMediaType, "unsupported_media_type")
		b.requireUntouched(t, before, "text/plain task start")
		// No type at all, and the urlencoded and multipart types of forms.
		for _, ct := range []string{"", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
			resp, body = send(t, "POST", b.url+"/v1/tasks/"+b.pending.String()+"/cancel", "", "Content-Type", ct)
			requireProblem(t, resp, body, http.StatusUnsupportedMediaType, "unsupported_media_type")
		}
		// JSON, but a browser says it comes from another site.
		resp, body = send(t, "POST", b.url+"/v1/tasks", `{"type":"guard.echo","input":1}`,
			"Content-Type", "application/json", "Origin", evil, "Sec-Fetch-Site", "cross-site")
		requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
		resp, body = send(t, "POST", b.url+"/v1/tasks", `{"type":"guard.echo","input":1}`,
			"Content-Type", "application/json", "Origin", evil)
		requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
		b.requireUntouched(t, before, "cross-origin JSON task start")

		// The console's bulk requeue, posted cross-site.
		resp, body = send(t, "POST", b.url+"/console/dead-letters/retry?namespace=default", url.Values{"reason": {"x"}}.Encode(),
			"Content-Type", "application/x-www-form-urlencoded", "Origin", evil)
		requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
		require.NotContains(t, resp.Header.Get("Location"), "Requeued")
		b.requireUntouched(t, before, "cross-site dead-letter retry")

		// DNS rebinding: evil.example now resolves to 127.0.0.1, and its page
		// reads the API with its own name as Host.
		for _, path := range []string{"/v1/tasks", "/v1/tasks/" + b.pending.String(), "/console/tasks/" + b.pending.String(), "/metrics"} {
			resp, body = send(t, "GET", b.url+path, "", "Host", "attacker.example:"+strings.Split(b.host, ":")[1])
			requireProblem(t, resp, body, http.StatusForbidden, "host_not_allowed")
			for _, secret := range []string{"stays", "parked", "guard.echo", "parser bug"} { // input, queue, type, error
				require.NotContains(t, body, secret, path)
			}
		}

		// What a local client or the console's own page sends still works.
		resp, body = send(t, "GET", b.url+"/v1/tasks", "", "Host", "localhost:"+strings.Split(b.host, ":")[1])
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, b.pending.String())
		resp, body = send(t, "POST", b.url+"/v1/tasks", `{"type":"guard.echo","input":1}`, "Content-Type", "application/json; charset=utf-8")
		require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
		resp, _ = send(t, "POST", b.url+"/console/dead-letters/retry?namespace=default", url.Values{"reason": {"fixed"}}.Encode(),
			"Content-Type", "application/x-www-form-urlencoded", "Origin", b.url, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "flash=")
		resp, body = send(t, "GET", b.url+resp.Header.Get("Location"), "")
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, "Requeued 1 dead letter(s)")
	})
}

// Config.AllowedHosts opens the tokenless server to the names listed, and
// a server with tokens answers any Host (a rebinding page has no token).
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	st := enginetest.Store(t)
	srv, err := server.New(server.Config{Store: st, AllowedHosts: []string{"Cairn.Internal."}})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	resp, body := send(t, "GET", hs.URL+"/v1/tasks", "", "Host", "cairn.internal:7233")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = send(t, "GET", hs.URL+"/v1/tasks", "", "Host", "other.internal:7233")
	requireProblem(t, resp, body, http.StatusForbidden, "host_not_allowed")
	for _, h := range []string{"[::1]:7233", "127.0.0.2", "localhost.", "app.localhost:1"} {
		resp, body = send(t, "GET", hs.URL+"/healthz", "", "Host", h)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", h, body)
	}
	_, err = server.New(server.Config{Store: st, AllowedHosts: []string{"http://cairn.internal"}})
	require.Error(t, err)

	withTokens := mount(t, server.Config{Store: st, Tokens: []server.Token{{Name: "ops", SHA256: server.HashToken("ops-token"),
		Namespaces: []string{"*"}, Roles: []server.Role{server.RoleAdmin}}}})
	resp, body = send(t, "GET", withTokens.url+"/cairn/v1/tasks", "", "Host", "attacker.example", "Authorization", "Bearer ops-token")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	// With tokens too, the API takes only JSON writes.
	resp, body = send(t, "POST", withTokens.url+"/cairn/v1/tasks", `{"type":"guard.echo"}`,
		"Authorization", "Bearer ops-token", "Content-Type", "text/plain")
	requireProblem(t, resp, body, http.StatusUnsupportedMediaType, "unsupported_media_type")
}

// signIn signs in with token through the console's own page and returns
// the session cookie.
func signIn(t *testing.T, base, token string) *http.Cookie {
	t.Helper()
	resp, body := send(t, "POST", base+"/console/login", url.Values{"token": {token}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded", "Origin", base)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	for _, c := range resp.Cookies() {
		if c.Name == "cairn_session" {
			return c
		}
	}
	t.Fatal("no session cookie")
	return nil
}

// Finding 5 and the cookie of finding 9: with tokens, the console's forms
// work only from its own pages (another port of the same host is another
// origin), sign-in and sign-out included; the cookie holds a session id
// that expires and ends at sign-out; no page may be framed or sniffed,
// and /console/static/ lists nothing.
func TestConsoleRefusesCrossOriginForms(t *testing.T) {
	t.Parallel()
	onEachGuardStore(t, func(t *testing.T, setup func(*testing.T, server.Config) *guardBundle) {
		const token = "ops-secret-token"
		b := setup(t, server.Config{SecureCookies: true, Tokens: []server.Token{{Name: "ops", SHA256: server.HashToken(token),
			Namespaces: []string{"default"}, Roles: []server.Role{server.RoleOperate}}}})
		before := b.snapshot(t)
		cookie := signIn(t, b.url, token)
		require.NotContains(t, cookie.Value, token, "the cookie holds no token")
		require.True(t, cookie.HttpOnly)
		require.True(t, cookie.Secure, "Config.SecureCookies")
		require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
		require.Positive(t, cookie.MaxAge)
		require.WithinDuration(t, time.Now().Add(console.DefaultSessionTTL), cookie.Expires, time.Minute)
		withCookie := "cairn_session=" + cookie.Value

		cancel := b.url + "/console/tasks/" + b.pending.String() + "/cancel?namespace=default"
		form := url.Values{"reason": {"forged"}}.Encode()
		for _, h := range [][]string{
			{"Origin", evil},
			{"Origin", "http://127.0.0.1:1"}, // another port of the same host: same site, another origin
			{"Origin", "null"},
			{"Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:1"},
			{"Sec-Fetch-Site", "cross-site"},
			{}, // neither header: refused too
		} {
			resp, body := send(t, "POST", cancel, form, append([]string{"Cookie", withCookie, "Content-Type", "application/x-www-form-urlencoded"}, h...)...)
			requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
			b.requireUntouched(t, before, "cancel with "+strings.Join(h, " "))
		}
		resp, body := send(t, "POST", b.url+"/console/dead-letters/retry?namespace=default", form,
			"Cookie", withCookie, "Content-Type", "application/x-www-form-urlencoded", "Origin", evil)
		requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
		b.requireUntouched(t, before, "cross-site dead-letter retry")

		// A forged sign-in sets no cookie; a forged sign-out ends nothing.
		resp, body = send(t, "POST", b.url+"/console/login", url.Values{"token": {token}}.Encode(),
			"Content-Type", "application/x-www-form-urlencoded", "Origin", evil)
		requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
		require.Empty(t, resp.Cookies())
		resp, body = send(t, "POST", b.url+"/console/logout", "", "Cookie", withCookie, "Origin", evil)
		requireProblem(t, resp, body, http.StatusForbidden, "cross_origin")
		resp, _ = send(t, "GET", b.url+"/console/", "", "Cookie", withCookie)
		require.Equal(t, http.StatusOK, resp.StatusCode, "the session survived the forged sign-out")

		// Every page says: no framing, no sniffing, same-origin referrers.
		for _, path := range []string{"/console/", "/console/login", "/v1/tasks", "/healthz", "/console/static/console.css"} {
			resp, _ = send(t, "GET", b.url+path, "", "Cookie", withCookie)
			require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
			require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
			require.Equal(t, "same-origin", resp.Header.Get("Referrer-Policy"), path)
		}
		resp, _ = send(t, "GET", b.url+"/console/", "", "Cookie", withCookie)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
		for _, path := range []string{"/console/static/", "/console/static/nope.js"} {
			resp, body = send(t, "GET", b.url+path, "")
			require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
			require.NotContains(t, body, "htmx.min.js", path)
		}

		// From its own page the cancel works, recorded as the token's name.
		resp, _ = send(t, "POST", cancel, form, "Cookie", withCookie, "Content-Type", "application/x-www-form-urlencoded",
			"Origin", b.url, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "console:ops", cancelledBy(t, b.store, b.pending))

		// Sign-out ends the session: the cookie, replayed, no longer works.
		resp, _ = send(t, "POST", b.url+"/console/logout", "", "Cookie", withCookie, "Origin", b.url)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		resp, _ = send(t, "GET", b.url+"/console/", "", "Cookie", withCookie)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/console/login", resp.Header.Get("Location"))
	})
}

// cancelledBy is who the task's cancel_requested names.
func cancelledBy(t *testing.T, st store.Store, id uuid.UUID) string {
	t.Helper()
	for _, e := range enginetest.Events(t, st, id) {
		if p, ok := e.Data.(history.CancelRequestedData); ok {
			return p.By
		}
	}
	return ""
}

// Finding 6: a schedule whose name is a relative path, stored before
// names were checked, stays one path segment in its button: posting the
// button pauses the schedule and leaves task V alone.
func TestScheduleButtonStaysOnItsSchedule(t *testing.T) {
	t.Parallel()
	onEachGuardStore(t, func(t *testing.T, setup func(*testing.T, server.Config) *guardBundle) {
		b := setup(t, server.Config{})
		ctx := context.Background()
		name := "../tasks/" + b.pending.String() + "/cancel?x="
		require.NoError(t, b.store.ScheduleCreate(ctx, &store.ScheduleCreateParams{Namespace: "default", Name: name, Cron: "@daily",
			TaskType: "guard.echo", TypeVersion: 1, Queue: "parked", Input: json.RawMessage(`"x"`)}))
		resp, page := send(t, "GET", b.url+"/console/schedules", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		action := "/console/schedules/..%2Ftasks%2F" + b.pending.String() + "%2Fcancel%3Fx=/pause?namespace=default"
		require.Contains(t, strings.ReplaceAll(page, "&amp;", "&"), `action="`+action+`"`)
		require.NotContains(t, page, `action="/console/schedules/../`)

		resp, _ = send(t, "POST", b.url+action, "", "Origin", b.url)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, history.StatusPending, enginetest.GetTask(t, b.store, b.pending).Status, "task V is not cancelled")
		require.Empty(t, cancelledBy(t, b.store, b.pending))
		schedules, err := b.client.Schedules(ctx)
		require.NoError(t, err)
		require.Len(t, schedules, 1)
		require.True(t, schedules[0].Paused, "the button paused its own schedule")
	})
}

// Finding 9: tokenless console actions are recorded as console:anonymous.
func TestTokenlessConsoleRecordsAnonymous(t *testing.T) {
	t.Parallel()
	onEachGuardStore(t, func(t *testing.T, setup func(*testing.T, server.Config) *guardBundle) {
		b := setup(t, server.Config{})
		resp, _ := send(t, "POST", b.url+"/console/tasks/"+b.pending.String()+"/cancel?namespace=default", "",
			"Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "console:anonymous", cancelledBy(t, b.store, b.pending))
	})
}

// Finding 9: /metrics names every namespace's queues, so with tokens it
// needs a token that may read every namespace, or the metrics token; it
// can live on a handler of its own instead.
func TestMetricsAccess(t *testing.T) {
	t.Parallel()
	st := enginetest.Store(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "guard_test_total", Help: "a metric"}))
	tokens := []server.Token{
		{Name: "admin", SHA256: server.HashToken("admin-token"), Namespaces: []string{"*"}, Roles: []server.Role{server.RoleAdmin}},
		{Name: "tenant", SHA256: server.HashToken("tenant-token"), Namespaces: []string{"default"}, Roles: []server.Role{server.RoleAdmin}},
	}
	serve := func(cfg server.Config, h func(*server.Server) http.Handler) string {
		cfg.Store, cfg.Gatherer = st, reg
		srv, err := server.New(cfg)
		require.NoError(t, err)
		hs := httptest.NewServer(h(srv))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	handler := func(s *server.Server) http.Handler { return s.Handler() }
	apart := func(s *server.Server) http.Handler { return s.MetricsHandler() }

	u := serve(server.Config{Tokens: tokens}, handler)
	resp, body := send(t, "GET", u+"/metrics", "")
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")
	require.NotContains(t, body, "guard_test_total")
	resp, body = send(t, "GET", u+"/metrics", "", "Authorization", "Bearer tenant-token")
	requireProblem(t, resp, body, http.StatusForbidden, "forbidden")
	resp, body = send(t, "GET", u+"/metrics", "", "Authorization", "Bearer admin-token")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "guard_test_total")

	u = serve(server.Config{Tokens: tokens, MetricsToken: "scrape-me"}, handler)
	resp, body = send(t, "GET", u+"/metrics", "", "Authorization", "Bearer admin-token")
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")
	resp, body = send(t, "GET", u+"/metrics", "", "Authorization", "Bearer scrape-me")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "guard_test_total")

	u = serve(server.Config{MetricsApart: true}, handler)
	resp, _ = send(t, "GET", u+"/metrics", "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "apart: not on the API's handler")
	u = serve(server.Config{MetricsApart: true, MetricsToken: "scrape-me"}, apart)
	resp, body = send(t, "GET", u+"/metrics", "", "Host", "prometheus-target.internal:9090")
	requireProblem(t, resp, body, http.StatusUnauthorized, "unauthorized")
	resp, body = send(t, "GET", u+"/metrics", "", "Host", "prometheus-target.internal:9090", "Authorization", "Bearer scrape-me")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "guard_test_total")
}
