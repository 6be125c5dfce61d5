package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cairnflow/cairn/workflow"
	"github.com/stretchr/testify/require"
)

// mounted is a service's own mux with cairn's handler under /cairn/ beside
// a handler of the service's, served over HTTP; its client does not
// follow redirects, so a test sees each one.
type mounted struct {
	t      *testing.T
	url    string
	client *http.Client
}

func mount(t *testing.T, cfg server.Config) *mounted {
	t.Helper()
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop(context.Background())) })
	mux := http.NewServeMux()
	mux.Handle("/cairn/", http.StripPrefix("/cairn", srv.Handler()))
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "the service's orders") })
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &mounted{t: t, url: hs.URL, client: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends a request and returns the response with its body read; a
// POST comes from the service's own origin, as a console form's does.
func (m *mounted) do(method, path, contentType, body string) (*http.Response, string) {
	m.t.Helper()
	req, err := http.NewRequest(method, m.url+path, strings.NewReader(body))
	require.NoError(m.t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if method == http.MethodPost {
		req.Header.Set("Origin", m.url) // the console's own page; the API ignores it
	}
	resp, err := m.client.Do(req)
	require.NoError(m.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(m.t, err)
	return resp, string(raw)
}

func (m *mounted) get(path string) (*http.Response, string) {
	return m.do(http.MethodGet, path, "", "")
}

// urlAttr finds the URLs a console page links to, posts to, loads or
// refreshes itself from.
var urlAttr = regexp.MustCompile(`\b(href|src|action|hx-get)="([^"]*)"`)

// requireUnderPrefix checks every URL of page is under /cairn/, and
// returns them by attribute.
func requireUnderPrefix(t *testing.T, page string) map[string][]string {
	t.Helper()
	urls := map[string][]string{}
	for _, m := range urlAttr.FindAllStringSubmatch(page, -1) {
		u := strings.ReplaceAll(m[2], "&amp;", "&")
		require.True(t, strings.HasPrefix(u, "/cairn/"), "%s=%q is not under the mount point /cairn/", m[1], u)
		urls[m[1]] = append(urls[m[1]], u)
	}
	require.NotEmpty(t, urls["href"], "the page links somewhere")
	return urls
}

// The API and the console, mounted under /cairn/ in a service's own mux
// beside its own handler: requests reach cairn through the prefix, and
// every URL cairn sends back (Location, problem instances, links, assets,
// form actions, htmx requests, redirects, the cookie's path) carries it.
func TestMountUnderAPrefix(t *testing.T) {
	store := enginetest.Store(t)
	echo := sdk.NewWorkflow("mount.echo", 1, func(ctx workflow.Context, in json.RawMessage) (json.RawMessage, error) {
		return workflow.Step(ctx, "echo", func(context.Context) (json.RawMessage, error) { return in, nil }, nil)
	}, nil)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: store, Concurrency: 2, PollInterval: 50 * time.Millisecond, RescueInterval: -1})
	require.NoError(t, err)
	sdk.Register(w, echo)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	m := mount(t, server.Config{Store: store, Prefix: "/cairn"})
	// Enough for a second page of tasks, and a schedule to pause.
	enginetest.StartTasks(t, store, 50, &enginetest.TaskOpts{Queue: "parked"})
	client, err := sdk.NewClient(sdk.ClientConfig{Store: store})
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.CreateSchedule(context.Background(), sdk.ScheduleParams{Name: "nightly", Cron: "@daily", Workflow: echo, Queue: "parked"}))

	// The service's own handler and paths stay the service's.
	resp, body := m.get("/orders")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "the service's orders", body)
	resp, _ = m.get("/v1/tasks")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NotContains(t, resp.Header.Get("Content-Type"), "problem+json", "cairn answers only under /cairn/")

	// The API: start a task, follow its Location, wait for it.
	resp, body = m.do(http.MethodPost, "/cairn/v1/tasks", "application/json", `{"type":"mount.echo","input":{"x":1}}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	var started struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &started))
	require.Equal(t, "/cairn/v1/tasks/"+started.ID, resp.Header.Get("Location"))
	resp, body = m.get(resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var task struct {
		ID     string
		Status string
		Output json.RawMessage
	}
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, started.ID, task.ID)
	resp, body = m.get("/cairn/v1/tasks/" + started.ID + "/wait?timeout=5m")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, "completed", task.Status)
	require.JSONEq(t, `{"x":1}`, string(task.Output))
	resp, body = m.get("/cairn/v1/tasks/not-a-uuid")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var problem struct{ Instance string }
	require.NoError(t, json.Unmarshal([]byte(body), &problem))
	require.Equal(t, "/cairn/v1/tasks/not-a-uuid", problem.Instance)

	// The console: / redirects under the prefix; every page's URLs are
	// under it, and its assets load from there.
	resp, _ = m.get("/cairn/")
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, "/cairn/console/", resp.Header.Get("Location"))
	for _, page := range []string{"/cairn/console/", "/cairn/console/tasks?namespace=default", "/cairn/console/dead-letters",
		"/cairn/console/schedules", "/cairn/console/tasks/" + started.ID} {
		resp, body = m.get(page)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		requireUnderPrefix(t, body)
	}
	resp, body = m.get("/cairn/console/tasks?namespace=default")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	urls := requireUnderPrefix(t, body)
	require.Contains(t, urls["href"], "/cairn/console/tasks/"+started.ID+"?namespace=default", "the task list links to the task")
	require.Contains(t, urls["action"], "/cairn/console/tasks", "the filter form")
	require.Condition(t, func() bool {
		return slices.ContainsFunc(urls["href"], func(u string) bool { return strings.Contains(u, "cursor=") })
	}, "the next page's link")
	assets := append(urls["src"], "/cairn/console/static/console.css")
	for _, asset := range assets {
		resp, _ := m.get(asset)
		require.Equal(t, http.StatusOK, resp.StatusCode, asset)
	}

	// A form posts under the prefix, and its 303 lands under it.
	resp, body = m.do(http.MethodPost, "/cairn/v1/tasks", "application/json", `{"type":"mount.echo","queue":"parked"}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body) // no worker serves queue parked: it stays pending
	require.NoError(t, json.Unmarshal([]byte(body), &started))
	resp, body = m.get("/cairn/console/tasks/" + started.ID + "?namespace=default")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	urls = requireUnderPrefix(t, body)
	require.Contains(t, urls["hx-get"], "/cairn/console/tasks/"+started.ID+"?namespace=default", "a pending task's page refreshes itself")
	cancel := "/cairn/console/tasks/" + started.ID + "/cancel?namespace=default"
	require.Contains(t, urls["action"], cancel)
	resp, _ = m.do(http.MethodPost, cancel, "application/x-www-form-urlencoded", url.Values{"reason": {"mounted"}}.Encode())
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	landing := resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(landing, "/cairn/console/tasks/"+started.ID+"?"), landing)
	resp, body = m.get(landing)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Cancel requested.")
	require.Contains(t, body, `id="task-status">cancelled<`)
	requireUnderPrefix(t, body)

	resp, body = m.get("/cairn/console/schedules")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	pause := "/cairn/console/schedules/nightly/pause?namespace=default"
	require.Contains(t, requireUnderPrefix(t, body)["action"], pause)
	resp, _ = m.do(http.MethodPost, pause, "application/x-www-form-urlencoded", "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	landing = resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(landing, "/cairn/console/schedules?"), landing)
	resp, body = m.get(landing)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Schedule nightly paused.")
	require.Contains(t, requireUnderPrefix(t, body)["action"], "/cairn/console/schedules/nightly/resume?namespace=default")
}

// With tokens, the console's sign-in sets its cookie for the prefix's
// console path, so the browser sends it back there.
func TestMountUnderAPrefixSignsIn(t *testing.T) {
	const token = "cairn_mount-test-token"
	m := mount(t, server.Config{Store: enginetest.Store(t), Prefix: "/cairn", Tokens: []server.Token{
		{Name: "ops", SHA256: server.HashToken(token), Namespaces: []string{"default"}, Roles: []server.Role{server.RoleRead}}}})

	resp, _ := m.get("/cairn/console/")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/cairn/console/login", resp.Header.Get("Location"))
	resp, body := m.get("/cairn/console/login")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, requireUnderPrefix(t, body)["action"], "/cairn/console/login")

	resp, _ = m.do(http.MethodPost, "/cairn/console/login", "application/x-www-form-urlencoded", url.Values{"token": {token}}.Encode())
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/cairn/console/", resp.Header.Get("Location"))
	cookies := resp.Cookies()
	require.Len(t, cookies, 2, "the session's, and the clearing of the old raw-token cookie")
	for _, c := range cookies {
		require.Equal(t, "/cairn/console", c.Path, c.Name)
	}
	resp, body = m.get("/cairn/console/") // the jar sends the cookie: its path matches
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "token ops")
	urls := requireUnderPrefix(t, body)
	require.Contains(t, urls["action"], "/cairn/console/logout")
}

// New refuses a prefix it could not put in front of its URLs.
func TestMountPrefixIsChecked(t *testing.T) {
	store := store.Store(nil)
	for _, bad := range []string{"cairn", "/cairn/", "/a//b", "/a/../b", "/a/./b", "/ca irn", "/cairn?x=1", "/caïrn", "/%63"} {
		_, err := server.New(server.Config{Store: untouchable{store}, Prefix: bad})
		require.Error(t, err, "prefix %q", bad)
	}
	for _, good := range []string{"", "/", "/cairn", "/ops/cairn-1.2_x~"} {
		_, err := server.New(server.Config{Store: untouchable{store}, Prefix: good})
		require.NoError(t, err, "prefix %q", good)
	}
}
