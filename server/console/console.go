package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// consoleFiles are the templates and the static files (htmx, vendored by
// scripts/vendor-htmx.sh; the style sheet).
//
//go:embed templates/*.html static/*
var consoleFiles embed.FS

// consolePages are the templates, each page parsed with the layout. Their
// "prefix" function is a placeholder: [consoleTemplates] gives each console
// copies whose prefix is its Config.Prefix.
var consolePages = func() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, page := range []string{"login", "overview", "tasks", "task", "waiting", "schedules", "queues", "queue", "stranded", "usage", "budgets", "namespaces"} {
		pages[page] = template.Must(template.New(page).Funcs(consoleFuncs).Funcs(consolePrefix("")).
			ParseFS(consoleFiles, "templates/layout.html", "templates/charts.html", "templates/raise.html", "templates/"+page+".html"))
	}
	return pages
}()

// consoleTemplates returns copies of the console's pages for a console
// mounted at prefix: every URL a page holds starts with {{prefix}}.
func consoleTemplates(prefix string) map[string]*template.Template {
	pages := make(map[string]*template.Template, len(consolePages))
	for name, t := range consolePages {
		pages[name] = template.Must(t.Clone()).Funcs(consolePrefix(prefix))
	}
	return pages
}

// consolePrefix is the templates' prefix function: Config.Prefix.
func consolePrefix(prefix string) template.FuncMap {
	return template.FuncMap{"prefix": func() string { return prefix }}
}

var consoleFuncs = template.FuncMap{
	"age": func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return roundDuration(d).String()
	},
	"dur": func(d time.Duration) string { return roundDuration(d).String() },
	// completedPerMinute is the overview's rate: the queue's completed
	// tasks per minute over its window, the quantity and unit of the
	// throughput chart beside it.
	"completedPerMinute": func(q cairntype.QueueStats) string {
		if q.Window <= 0 {
			return perMinute(0)
		}
		return perMinute(float64(q.Completed) / q.Window.Minutes())
	},
	"span": span,
	// days shows a retention in whole days where it is some.
	"days": func(d time.Duration) string {
		const day = 24 * time.Hour
		if d >= day && d%day == 0 {
			return fmt.Sprintf("%d days", d/day)
		}
		return roundDuration(d).String()
	},
	// cost is a cost in US dollars as the task page and the CLI write
	// it, to 4 decimals.
	"cost": func(f float64) string { return fmt.Sprintf("$%.4f", f) },
	// otherAfter is how many keys a usage series names before it sums
	// the rest into (other).
	"otherAfter": func() int { return cairntype.MaxUsageKeys - 1 },
	"percent":    func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
	"short":      func(id uuid.UUID) string { return id.String()[:8] + "…" + id.String()[32:] },
	// seg escapes a value put in a URL path as one segment: a name with
	// '/', '?', '#' or dots stored before names were checked stays one.
	"seg":  func(v any) string { return url.PathEscape(fmt.Sprint(v)) },
	"when": consoleTime,
	// waitingShort and waitingLong say what a pending task waits for: in
	// its status cell, and in that cell's title with the deadline.
	"waitingShort": waitingShort,
	// raise is the Raise form of the budget ref (on the page of task,
	// when not empty: the form lands back there).
	"raise": func(namespace, ref, task string) raiseForm {
		return raiseForm{Namespace: namespace, Ref: ref, Task: task}
	},
	"spend": spendText,
	"waitRow": func(namespace string, w sdk.BudgetWaiter, earlier bool) budgetWaitRow {
		return budgetWaitRow{Namespace: namespace, Wait: w, Earlier: earlier}
	},
	"hasPrefix":   strings.HasPrefix,
	"waitingLong": waitingLong,
	"truncate": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
}

// span writes a window or a bucket's length in whole hours or minutes
// where it is some: "24 h", "30 min".
func span(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}

// roundDuration keeps a duration readable: milliseconds below a second,
// tenths of a second below a minute, seconds above.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// consolePage is what every page's template gets.
type consolePage struct {
	Title, Page   string
	Namespace     string
	Who           string // the token's name; empty without tokens
	Notice, Error string
	// Tasks are the tasks Notice is about, linked under it: those a
	// budget's raise woke.
	Tasks      []uuid.UUID
	CanOperate bool
	Data       any
}

// routes is the console's handler: its pages behind its defences.
func (s *Console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /console/static/", s.consoleStatic())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.path("/console/"), http.StatusFound)
	})
	mux.HandleFunc("GET /console/login", s.consoleLogin)
	mux.HandleFunc("POST /console/login", s.consoleLogin)
	mux.HandleFunc("POST /console/logout", s.consoleLogout)
	mux.Handle("GET /console/{$}", s.console(web.RoleRead, s.consoleOverview))
	mux.Handle("GET /console/tasks", s.console(web.RoleRead, s.consoleTasks))
	mux.Handle("GET /console/tasks/{id}", s.console(web.RoleRead, s.consoleTask))
	mux.Handle("GET /console/tasks/{id}/stream", s.console(web.RoleRead, s.consoleTaskStream))
	mux.Handle("GET /console/blobs/{key}", s.console(web.RoleRead, s.consoleBlob))
	mux.Handle("POST /console/tasks/{id}/{action}", s.console(web.RoleOperate, s.consoleTaskAction))
	mux.Handle("POST /console/tasks/{id}/signals/{name}", s.console(web.RoleOperate, s.consoleSignal))
	mux.Handle("GET /console/waiting", s.console(web.RoleRead, s.consoleWaiting))
	mux.Handle("GET /console/stranded", s.console(web.RoleRead, s.consoleStranded))
	mux.Handle("GET /console/dead-letters", s.console(web.RoleRead, s.consoleDeadLetters))
	mux.Handle("POST /console/dead-letters/retry", s.console(web.RoleOperate, s.consoleRetryDeadLetters))
	mux.Handle("GET /console/schedules", s.console(web.RoleRead, s.consoleSchedules))
	mux.Handle("POST /console/schedules/{name}/{action}", s.console(web.RoleOperate, s.consoleScheduleAction))
	mux.Handle("GET /console/queues", s.console(web.RoleRead, s.consoleQueues))
	mux.Handle("GET /console/queues/{queue}", s.console(web.RoleRead, s.consoleQueue))
	mux.Handle("GET /console/usage", s.console(web.RoleRead, s.consoleUsage))
	mux.Handle("GET /console/budgets", s.console(web.RoleRead, s.consoleBudgets))
	mux.Handle("GET /console/namespaces", s.console(web.RoleRead, s.consoleNamespaces))
	mux.Handle("POST /console/budgets/raise", s.console(web.RoleOperate, s.consoleRaiseBudget))
	// Any other console URL is an HTML page too, never the API's JSON.
	mux.Handle("/console/", s.console(web.RoleRead, s.consoleNotFound))
	return s.guard(mux)
}

// consoleNotFound answers a console URL that names no page.
func (s *Console) consoleNotFound(w http.ResponseWriter, r *http.Request, _ *call, page *consolePage) {
	s.consoleFail(w, r, page, http.StatusNotFound, "There is no console page at "+r.URL.Path+".")
}

// consoleStatic serves the console's embedded files, and 404 for
// anything else, directories included: no listings.
func (s *Console) consoleStatic() http.Handler {
	static, _ := fs.Sub(consoleFiles, "static")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/console/static/")
		if fi, err := fs.Stat(static, name); err != nil || !fi.Mode().IsRegular() || !fs.ValidPath(name) {
			s.writeProblem(w, r, web.NewProblem(http.StatusNotFound, web.CodeNotFound, "no such file"))
			return
		}
		http.ServeFileFS(w, r, static, name)
	})
}

// consoleCookie holds the id of the console's session (never the API
// token): HttpOnly (no script reads it), SameSite=Strict, Secure over TLS
// or with Config.SecureCookies, and it expires with the session.
const consoleCookie = "cairn_session"

// legacyCookie clears the cookie of earlier versions, which held the raw
// API token.
func legacyCookie(path string) *http.Cookie {
	return &http.Cookie{Name: "cairn_token", Path: path, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// consoleWho is who a console request acts for: without tokens,
// everyone, recorded as console:anonymous; with tokens, the session's
// principal, or a bearer token sent by a script. Nil: sign in first.
func (s *Console) consoleWho(r *http.Request) *web.Principal {
	if len(s.tokens) == 0 {
		return web.Anonymous
	}
	if c, err := r.Cookie(consoleCookie); err == nil && c.Value != "" {
		if who := s.sessions.lookup(c.Value); who != nil {
			return who
		}
	}
	if r.Header.Get("Authorization") != "" {
		if who, p := web.Authenticate(s.tokens, r); p == nil {
			return who
		}
	}
	return nil
}

// consoleRequester is recorded as "by" in the histories of what who asks
// from the console: console:<token name>, or console:anonymous without
// tokens (any request that reached the server, from a loopback Host or an
// allowed one).
func consoleRequester(who *web.Principal) string {
	if who.Name() == "" {
		return "console:anonymous"
	}
	return "console:" + who.Name()
}

// console wraps a console handler: who acts comes from the session (a
// sign-in page asks for a token when tokens are configured), the role and
// namespace are checked as for the API.
func (s *Console) console(role web.Role, h func(http.ResponseWriter, *http.Request, *call, *consolePage)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := s.consoleWho(r)
		if who == nil {
			http.Redirect(w, r, s.path("/console/login"), http.StatusSeeOther)
			return
		}
		ns := r.URL.Query().Get("namespace")
		if ns == "" {
			ns = who.DefaultNamespace()
		}
		page := &consolePage{Namespace: ns, Who: who.Name(), CanOperate: who.Can(web.RoleOperate)}
		page.Notice, page.Error, page.Tasks = s.flashes.take(r.URL.Query().Get("flash"), who.Name())
		if err := sdk.ValidateName("namespace", ns); err != nil {
			s.consoleFail(w, r, page, http.StatusBadRequest, err.Error())
			return
		}
		if !who.Can(role) || !who.InNamespace(ns) {
			s.consoleFail(w, r, page, http.StatusForbidden, "your token does not allow this here")
			return
		}
		c, err := s.cfg.Client(ns)
		if err != nil {
			if p := web.ProblemFor(err); p != nil { // a namespace the placement map does not place
				s.consoleFail(w, r, page, p.Status, p.Detail)
				return
			}
			s.log.Error("console: client", "namespace", ns, slog.String("error", err.Error()))
			s.consoleFail(w, r, page, http.StatusInternalServerError, "internal error")
			return
		}
		h(w, r.WithContext(sdk.WithRequester(r.Context(), consoleRequester(who))), &call{who: who, namespace: ns, client: c}, page)
	})
}

func (s *Console) render(w http.ResponseWriter, status int, name string, page *consolePage) {
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", page); err != nil {
		s.log.Error("console: render", "page", name, "error", err.Error())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// consoleFail shows an error on an empty page.
func (s *Console) consoleFail(w http.ResponseWriter, r *http.Request, page *consolePage, status int, msg string) {
	page.Title, page.Page, page.Error = "Error", "", msg
	page.Data = overviewData{}
	s.render(w, status, "overview", page)
}

// consoleError turns an sdk error into what the page says: the problem's
// detail for what the user got wrong, "internal error" for the rest.
func (s *Console) consoleError(r *http.Request, err error) string {
	if p := web.ProblemFor(err); p != nil {
		if p.Detail != "" {
			return p.Detail
		}
		return p.Title
	}
	s.log.Error("console request failed", "path", r.URL.Path, "error", err.Error())
	return "internal error"
}

func (s *Console) consoleLogin(w http.ResponseWriter, r *http.Request) {
	page := &consolePage{Title: "Sign in", Page: "login", Namespace: "default"}
	if len(s.tokens) == 0 {
		http.Redirect(w, r, s.path("/console/"), http.StatusSeeOther)
		return
	}
	if r.Method == http.MethodPost && r.URL.Query().Has("token") {
		// A token in the URL lands in logs, histories and Referer
		// headers: refused, even with a good one in the form.
		page.Error = "Send the token in the form, never in the URL."
		s.render(w, http.StatusBadRequest, "login", page)
		return
	}
	if r.Method == http.MethodPost {
		token := strings.TrimSpace(r.PostFormValue("token"))
		check := &http.Request{Header: http.Header{"Authorization": {"Bearer " + token}}}
		if who, p := web.Authenticate(s.tokens, check); p == nil {
			if c, err := r.Cookie(consoleCookie); err == nil {
				s.sessions.end(c.Value) // a session of another sign-in is not kept alive beside this one
			}
			http.SetCookie(w, legacyCookie(s.path("/console")))
			id, expires := s.sessions.create(who)
			http.SetCookie(w, s.sessionCookie(r, id, expires))
			http.Redirect(w, r, s.path("/console/"), http.StatusSeeOther)
			return
		}
		page.Error = "That token is not known."
	}
	s.render(w, http.StatusOK, "login", page)
}

// consoleLogout ends the session and clears its cookie.
func (s *Console) consoleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(consoleCookie); err == nil {
		s.sessions.end(c.Value)
	}
	c := s.sessionCookie(r, "", time.Time{})
	c.MaxAge = -1
	http.SetCookie(w, c)
	http.SetCookie(w, legacyCookie(s.path("/console")))
	http.Redirect(w, r, s.path("/console/login"), http.StatusSeeOther)
}

// sessionCookie is the console's cookie holding session id, expiring at
// expires (zero: now).
func (s *Console) sessionCookie(r *http.Request, id string, expires time.Time) *http.Cookie {
	c := &http.Cookie{Name: consoleCookie, Value: id, Path: s.path("/console"), HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || s.cfg.SecureCookies}
	if !expires.IsZero() {
		c.Expires, c.MaxAge = expires, int(time.Until(expires).Seconds())
	}
	return c
}

type overviewData struct {
	Window    time.Duration
	Queues    []cairntype.QueueStats
	Windows   windowLinks
	Charts    []queueChartRow
	Retention retentionView
}

// retentionView is the namespace's retention on the overview. Zero
// durations are the server's defaults.
type retentionView struct {
	Retention, KeyRetention time.Duration
	// OldestFinishedAge is how long ago the oldest finished task kept
	// finished; 0 when none is kept.
	OldestFinishedAge time.Duration
}

// namespaceRetention reads the namespace's retention settings.
func namespaceRetention(ctx context.Context, c *sdk.Client, namespace string) (retentionView, error) {
	ns, err := c.NamespaceConfig(ctx, namespace)
	v := retentionView{Retention: ns.Retention, KeyRetention: ns.KeyRetention}
	if !ns.OldestFinished.IsZero() {
		v.OldestFinishedAge = time.Since(ns.OldestFinished)
	}
	return v, err
}

// queueChartRow is one queue's charts on the overview.
type queueChartRow struct {
	Queue  string
	Charts []chart
}

// windowLinks are the links that choose a chart window: Base is the
// page's URL up to "window=".
type windowLinks struct {
	Base, Current string
	Windows       []string
}

func (s *Console) windowLinks(page string, c *call, current string) windowLinks {
	return s.windowLinksOf(page, url.Values{"namespace": {c.namespace}}, current, chartWindows)
}

// windowLinksOf are the links to page with query and each of windows.
func (s *Console) windowLinksOf(page string, query url.Values, current string, windows []chartWindowOption) windowLinks {
	links := windowLinks{Base: s.path(page + "?" + query.Encode() + "&"), Current: current}
	for _, w := range windows {
		links.Windows = append(links.Windows, w.Name)
	}
	return links
}

// consoleOverview is every queue's load now and flow over the chosen
// window (?window=, an hour by default), with a row of charts per queue.
func (s *Console) consoleOverview(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	page.Title, page.Page = "Queues", "overview"
	name, window, err := chartWindow(r)
	if err != nil {
		s.consoleFail(w, r, page, http.StatusBadRequest, err.Error())
		return
	}
	data := overviewData{Window: window, Windows: s.windowLinks("/console/", c, name)}
	data.Queues, err = c.client.QueueStats(r.Context(), window)
	if err == nil {
		data.Retention, err = namespaceRetention(r.Context(), c.client, c.namespace)
	}
	if err == nil {
		var series []cairntype.QueueSeries
		series, err = c.client.QueueSeries(r.Context(), "", window, chartBuckets)
		for _, q := range series {
			data.Charts = append(data.Charts, queueChartRow{Queue: q.Queue, Charts: queueCharts(q, name)})
		}
	}
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	page.Data = data
	s.render(w, http.StatusOK, "overview", page)
}

// consoleQueues lists the queues, each linking to its page.
func (s *Console) consoleQueues(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	stats, err := c.client.QueueStats(r.Context(), time.Hour)
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	page.Title, page.Page, page.Data = "Queues", "overview", overviewData{Queues: stats}
	s.render(w, http.StatusOK, "queues", page)
}

type queueData struct {
	Stranded queueStranded
	Stats    cairntype.QueueStats
	Windows  windowLinks
	Charts   []chart
}

// consoleQueue is one queue's page: its load and settings, and its charts
// over the chosen window.
func (s *Console) consoleQueue(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	queue := r.PathValue("queue")
	page.Title, page.Page = "Queue "+queue, "overview"
	name, window, err := chartWindow(r)
	if err != nil {
		s.consoleFail(w, r, page, http.StatusBadRequest, err.Error())
		return
	}
	data := &queueData{Stats: cairntype.QueueStats{Queue: queue, Window: window},
		Windows: s.windowLinks("/console/queues/"+url.PathEscape(queue), c, name)}
	stats, err := c.client.QueueStats(r.Context(), window)
	for _, q := range stats {
		if q.Queue == queue {
			data.Stats = q
		}
	}
	series := []cairntype.QueueSeries{{Queue: queue}}
	if err == nil {
		series, err = c.client.QueueSeries(r.Context(), queue, window, chartBuckets)
	}
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	if len(series) == 0 { // a queue with no history in the window: flat charts
		series = []cairntype.QueueSeries{{Queue: queue, Step: window / chartBuckets, Points: make([]cairntype.SeriesPoint, chartBuckets)}}
	}
	data.Charts = queueCharts(series[0], name)
	if d, derr := c.client.DiagnoseQueue(r.Context(), queue, queueStrandedWindow); derr == nil {
		data.Stranded = strandedOf(d)
	} else if page.Error == "" {
		page.Error = s.consoleError(r, derr)
	}
	page.Data = data
	s.render(w, http.StatusOK, "queue", page)
}

type tasksData struct {
	DeadLetters                 bool
	Statuses                    []history.Status
	Status, Type, Queue, Filter string
	Tasks                       []*sdk.TaskInfo
	FilterErrors                int
	FilterError                 string
	Next                        string // the next page's URL
}

var consoleStatuses = []history.Status{history.StatusPending, history.StatusRunning, history.StatusRetrying,
	history.StatusCompleted, history.StatusFailed, history.StatusCancelled, history.StatusDeadLettered, history.StatusExpired,
	history.StatusContinued}

func (s *Console) consoleTasks(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	q := r.URL.Query()
	data := tasksData{Statuses: consoleStatuses, Status: q.Get("status"), Type: q.Get("type"), Queue: q.Get("queue"), Filter: q.Get("filter")}
	page.Title, page.Page, page.Data = "Tasks", "tasks", &data
	opts := sdk.ListOpts{Status: history.Status(data.Status), Type: data.Type, Queue: data.Queue, Limit: 50}
	if data.Status != "" && !slices.Contains(consoleStatuses, opts.Status) { // the statuses there are
		page.Error = "status " + data.Status + " is not a task status"
		s.render(w, http.StatusBadRequest, "tasks", page)
		return
	}
	if v := q.Get("cursor"); v != "" {
		opts.Before, _ = uuid.Parse(v)
	}
	if data.Filter != "" {
		f, err := sdk.CompileTaskFilter(data.Filter)
		if err != nil {
			page.Error = s.consoleError(r, err)
			s.render(w, http.StatusBadRequest, "tasks", page)
			return
		}
		opts.Filter = f
	}
	list, err := c.client.ListPage(r.Context(), &opts)
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	data.Tasks, data.FilterErrors = list.Tasks, list.FilterErrors
	if list.FirstFilterError != nil {
		data.FilterError = list.FirstFilterError.Error()
	}
	if list.Next != uuid.Nil {
		next := r.URL.Query()
		next.Set("cursor", list.Next.String())
		data.Next = s.path("/console/tasks?" + next.Encode())
	}
	s.render(w, consoleStatus(err), "tasks", page)
}

// consoleStatus is the status of a listing page that err (nil or not)
// interrupted: a filter over the request's limits is the API's 422.
func consoleStatus(err error) int {
	if errors.Is(err, sdk.ErrFilterTooExpensive) {
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

func (s *Console) consoleDeadLetters(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	q := r.URL.Query()
	data := tasksData{DeadLetters: true, Type: q.Get("type"), Filter: q.Get("filter")}
	page.Title, page.Page, page.Data = "Dead letters", "dead-letters", &data
	opts, errMsg := s.deadLetterOpts(r, data.Type, data.Filter)
	if errMsg != "" {
		page.Error = errMsg
		s.render(w, http.StatusBadRequest, "tasks", page)
		return
	}
	opts.Limit = 100
	tasks, err := c.client.DeadLetters(r.Context(), &opts)
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	data.Tasks = tasks
	s.render(w, consoleStatus(err), "tasks", page)
}

func (s *Console) deadLetterOpts(r *http.Request, typ, filter string) (sdk.DeadLetterOpts, string) {
	opts := sdk.DeadLetterOpts{Type: typ}
	if filter != "" {
		f, err := sdk.CompileTaskFilter(filter)
		if err != nil {
			return sdk.DeadLetterOpts{}, s.consoleError(r, err)
		}
		opts.Filter = f
	}
	return opts, ""
}

func (s *Console) consoleRetryDeadLetters(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	back := url.Values{"namespace": {c.namespace}, "type": {r.FormValue("type")}, "filter": {r.FormValue("filter")}}
	var notice string
	opts, errMsg := s.deadLetterOpts(r, r.FormValue("type"), r.FormValue("filter"))
	if errMsg == "" {
		opts.Limit = -1
		report, err := c.client.RetryDeadLetters(r.Context(), consoleReason(r, "requeued from the console"), &opts)
		switch {
		case err != nil:
			errMsg = s.consoleError(r, err)
		default:
			notice = fmt.Sprintf("Requeued %d dead letter(s); %d could not be.", len(report.Retried), len(report.Failed))
		}
	}
	s.flash(back, c, notice, errMsg)
	http.Redirect(w, r, s.path("/console/dead-letters?"+back.Encode()), http.StatusSeeOther)
}

// flash keeps what a form's redirect shows on its landing page, if
// anything, and puts its id in back, the landing page's query.
func (s *Console) flash(back url.Values, c *call, notice, errMsg string) {
	if notice != "" || errMsg != "" {
		back.Set("flash", s.flashes.put(c.who.Name(), notice, errMsg))
	}
}

func consoleReason(r *http.Request, fallback string) string {
	if reason := strings.TrimSpace(r.FormValue("reason")); reason != "" {
		return reason
	}
	return fallback
}

func (s *Console) consoleTaskAction(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.consoleFail(w, r, page, http.StatusBadRequest, "not a task id")
		return
	}
	do := map[string]func(context.Context, uuid.UUID, string) error{
		"cancel": c.client.Cancel, "retry": c.client.Retry, "compensate": c.client.Compensate,
	}[r.PathValue("action")]
	back := url.Values{"namespace": {c.namespace}}
	switch {
	case do == nil:
		s.flash(back, c, "", "unknown action "+r.PathValue("action"))
	default:
		if err := do(r.Context(), id, consoleReason(r, r.PathValue("action")+" from the console")); err != nil {
			s.flash(back, c, "", s.consoleError(r, err))
		} else {
			s.flash(back, c, actionNotice[r.PathValue("action")], "")
		}
	}
	http.Redirect(w, r, s.path("/console/tasks/"+url.PathEscape(id.String())+"?"+back.Encode()), http.StatusSeeOther)
}

var actionNotice = map[string]string{
	"cancel":     "Cancel requested.",
	"retry":      "Sent back to its queue.",
	"compensate": "Compensation requested.",
}

func (s *Console) consoleSchedules(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	schedules, err := c.client.Schedules(r.Context())
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	page.Title, page.Page, page.Data = "Schedules", "schedules", struct{ Schedules []cairntype.Schedule }{schedules}
	s.render(w, http.StatusOK, "schedules", page)
}

func (s *Console) consoleScheduleAction(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	name := r.PathValue("name")
	var err error
	switch r.PathValue("action") {
	case "pause":
		err = c.client.PauseSchedule(r.Context(), name)
	case "resume":
		err = c.client.ResumeSchedule(r.Context(), name)
	default:
		err = errmark.Mark(errors.Newf("unknown action %q", r.PathValue("action")), sdk.ErrInvalid)
	}
	back := url.Values{"namespace": {c.namespace}}
	if err != nil {
		s.flash(back, c, "", s.consoleError(r, err))
	} else {
		s.flash(back, c, "Schedule "+name+" "+r.PathValue("action")+"d.", "")
	}
	http.Redirect(w, r, s.path("/console/schedules?"+back.Encode()), http.StatusSeeOther)
}

// prettyJSON indents a JSON value for the page and cuts it at limit bytes.
func prettyJSON(raw json.RawMessage, limit int) string {
	if len(raw) == 0 {
		return "—"
	}
	if sealed, ok := history.ParseSealed(raw); ok {
		// Still sealed after the server's keys had their turn: the task
		// was erased, or its key is not configured here.
		return fmt.Sprintf("🔒 encrypted (%d bytes): erased, or the server has no key for it", len(sealed.Data))
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		buf.Reset()
		buf.Write(raw)
	}
	if buf.Len() > limit {
		return buf.String()[:limit] + fmt.Sprintf("\n… (%d bytes more)", buf.Len()-limit)
	}
	return buf.String()
}
