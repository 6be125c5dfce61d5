package integration_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// browser starts headless Chromium (Debian's chromium) for a test. Without
// it the test skips, or fails under CAIRN_TEST_REQUIRE_DB as in CI, whose
// .ci/run installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CAIRN_TEST_REQUIRE_DB") != "" {
			t.Fatal("the console tests need Chromium: apt-get install chromium (.ci/run does)")
		}
		t.Skip("the console tests need Chromium: apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// screenshotDir is where the console tests save a screenshot of each
// page: CAIRN_SCREENSHOT_DIR, or cairn-console-screenshots in the
// temporary directory.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("CAIRN_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "cairn-console-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

func screenshot(t *testing.T, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		png, err := chromedp.FullScreenshot(100)(ctx, target)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(screenshotDir(t), name), png, 0o644)
	})
}

// text reads an element's text.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return got
}

// textContaining reads an element's text until it holds want (for up to
// 10s), and returns what it read last. A read that fails is read again
// too: the element may be replaced under the read (the page still laying
// out after a click: "No node with given id found").
func textContaining(t *testing.T, ctx context.Context, sel, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err == nil && strings.Contains(got, want) || time.Now().After(deadline) {
			require.NoError(t, err, sel)
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitText reloads the page until the element's text is want.
func waitText(t *testing.T, ctx context.Context, url, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url)))
		got = text(t, ctx, sel)
		if strings.TrimSpace(got) == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s on %s: %q, want %q", sel, url, got, want)
}

// waitElement reloads the page until it holds an element matching sel.
func waitElement(t *testing.T, ctx context.Context, url, sel string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url)))
		if evaluate[bool](t, ctx, "document.querySelector("+strconv.Quote(sel)+") !== null") {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s on %s", sel, url)
}

// In a real browser: the overview lists the queue; a task's page shows its
// timeline; cancelling a running task from its page cancels it; a dead
// letter requeued from the dead-letter page runs to completion; schedules
// pause from their page. Each page is saved as a screenshot.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	srv := startServer(t, schema)
	wfs := startE2EWorker(t, schema, "default")
	client := newClient(t, schema)
	ctx := browser(t)
	bg := context.Background()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(css(sel)) }

	done := srv.start(map[string]any{"type": "e2e.echo", "input": map[string]string{"doc": "invoice-17"}, "labels": map[string]string{"tenant": "acme"}})
	require.Equal(t, history.StatusCompleted, srv.wait(done).Status)
	fragile := srv.start(map[string]any{"type": "e2e.fragile", "input": "doc"})
	require.Equal(t, history.StatusDeadLettered, srv.wait(fragile).Status)
	slow := srv.start(map[string]any{"type": "e2e.slow", "input": 60000})
	require.NoError(t, client.CreateSchedule(bg, sdk.ScheduleParams{Name: "nightly-report", Cron: "0 3 * * *",
		Timezone: "Europe/Berlin", Workflow: sdk.TypeRef{Name: "e2e.echo", Version: 1}, Input: "report"}))

	// The overview lists the queue.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/"), visible("#queues"), screenshot(t, "overview.png")))
	require.Contains(t, text(t, ctx, "#queues"), "default")

	// From the task list to the task's timeline.
	link := `a[aria-label="Task ` + done.String() + `"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/tasks?type=e2e.echo"), visible(link),
		screenshot(t, "tasks.png"), chromedp.Click(css(link)), visible("#task-status"), screenshot(t, "task.png")))
	// Read once the page has laid it out: under load (the whole suite on
	// two cores) its text once read empty right after the status showed.
	timeline := textContaining(t, ctx, "ol.timeline", "Attempt 1")
	require.Contains(t, timeline, "Attempt 1")
	require.Contains(t, timeline, "echo", "the step is on the timeline")
	require.Contains(t, timeline, "completed")

	// Cancel a running task from its page.
	waitText(t, ctx, srv.url+"/console/tasks/"+slow.String(), "#task-status", "running")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(css("#cancel-task")), visible(`.notice[role="status"]`)))
	waitText(t, ctx, srv.url+"/console/tasks/"+slow.String(), "#task-status", "cancelled")
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "task-cancelled.png")))
	events, err := client.History(bg, slow)
	require.NoError(t, err)
	var by string
	for _, e := range events {
		if p, ok := e.Data.(history.CancelRequestedData); ok {
			by = p.By
		}
	}
	require.Equal(t, "console:anonymous", by, "the console's request is recorded as such, without tokens anonymous")

	// Requeue the dead letter once its bug is fixed; it runs to the end.
	wfs.fixed.Store(true)
	requeue := `button[aria-label="Requeue task ` + fragile.String() + `"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/dead-letters"), visible(requeue),
		screenshot(t, "dead-letters.png"), chromedp.Click(css(requeue)), visible(`.notice[role="status"]`)))
	waitText(t, ctx, srv.url+"/console/tasks/"+fragile.String(), "#task-status", "completed")
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "task-requeued.png")))

	// Pause the schedule from its page.
	pause := `button[aria-label="Pause schedule nightly-report"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/schedules"), visible(pause),
		screenshot(t, "schedules.png"), chromedp.Click(css(pause)), visible(`button[aria-label="Resume schedule nightly-report"]`)))
	schedules, err := client.Schedules(bg)
	require.NoError(t, err)
	require.True(t, schedules[0].Paused)

	// Approve a task waiting for a signal: from the waiting list to its
	// page, whose form sends the decision; the workflow resumes with it.
	approval := srv.start(map[string]any{"type": "e2e.approval", "input": "po-7"})
	waitingLink := `a[href*="/console/tasks/` + approval.String() + `"]`
	waitElement(t, ctx, srv.url+"/console/waiting", waitingLink)
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "waiting.png"), chromedp.Click(css(waitingLink)), visible("#approve-task")))
	require.Contains(t, text(t, ctx, "#task-wait"), "Waiting for signal approval")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(css("#signal-comment"), "within budget"),
		screenshot(t, "task-waiting.png"), chromedp.Click(css("#approve-task")), visible(`.notice[role="status"]`)))
	require.Contains(t, text(t, ctx, `.notice[role="status"]`), "Approved")
	waitText(t, ctx, srv.url+"/console/tasks/"+approval.String(), "#task-status", "completed")
	require.Contains(t, text(t, ctx, `pre[aria-label="Output"]`), "approved: within budget")
	require.Contains(t, text(t, ctx, "ol.timeline"), "signal approval received from console:anonymous")
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "task-approved.png")))

	// Readable on a phone: the same page at 390 px wide.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(srv.url+"/console/tasks/"+done.String()), visible("#task-status"), screenshot(t, "task-phone.png")))
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}

// With tokens configured the console asks for one, and honours its scope:
// a read-only token sees no action buttons.
func TestConsoleAsksForAToken(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	tokens := writeTokens(t, []map[string]any{
		{"name": "viewer", "sha256": hashOf("view-token"), "namespaces": []string{"default"}, "roles": []string{"read"}},
	})
	srv := startServer(t, schema, "--tokens", tokens)
	startE2EWorker(t, schema, "default")
	client := newClient(t, schema)
	res, err := client.StartDynamic(context.Background(), sdk.TypeRef{Name: "e2e.echo", Version: 1}, "x", nil)
	require.NoError(t, err)
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		screenshot(t, "login.png")))
	location, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(location, "/console/login"), location)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), "wrong"),
		chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS(`p[role="alert"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#token"), "view-token"),
		chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("#queues"))))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/tasks/"+res.ID.String()),
		chromedp.WaitVisible(chromedp.CSS("#task-status"))))
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#cancel-task, #retry-task, #compensate-task").length`))
	require.NoError(t, err)
	require.Zero(t, buttons, "a read-only token is offered no actions")
}

// forgery is a page of another origin (an httptest server on another port
// of the same host: same site, another origin) whose forms post to a
// cairn server on load, as a malicious page would.
type forgery struct {
	t   *testing.T
	url string
}

// newForgery serves one auto-submitting form per path: forms maps a path
// to the form's HTML.
func newForgery(t *testing.T, forms map[string]string) *forgery {
	t.Helper()
	mux := http.NewServeMux()
	for path, form := range forms {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, `<!doctype html><html><body>`+form+
				`<script>document.forms[0].submit()</script></body></html>`)
		})
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &forgery{t: t, url: hs.URL}
}

// submit opens the forgery's page at path, lets its form post, and returns
// the text of the page the browser lands on at target (a URL prefix).
func (f *forgery) submit(ctx context.Context, path, target string) string {
	f.t.Helper()
	require.NoError(f.t, chromedp.Do(ctx, chromedp.Navigate(f.url+path)))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		require.NoError(f.t, err)
		if strings.HasPrefix(loc, target) {
			state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState`))
			if err == nil && state == "complete" {
				body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
				require.NoError(f.t, err)
				return body
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("the form of %s did not land on %s", path, target)
	return ""
}

func form(action, enctype string, fields ...string) string {
	var b strings.Builder
	b.WriteString(`<form method="post" action="` + html.EscapeString(action) + `"`)
	if enctype != "" {
		b.WriteString(` enctype="` + enctype + `"`)
	}
	b.WriteString(`>`)
	for i := 0; i+1 < len(fields); i += 2 {
		b.WriteString(`<input type="hidden" name="` + html.EscapeString(fields[i]) + `" value="` + html.EscapeString(fields[i+1]) + `">`)
	}
	b.WriteString(`</form>`)
	return b.String()
}

// In a real browser, a page of another origin (another port of the same
// host) posts the console's forms and the API's: cancel, requeue the dead
// letters, a text/plain task start, and, against a server with tokens
// where the browser is signed in, cancel with the session cookie, sign the
// user in as the attacker and sign them out. Every one is refused, and
// the tasks and the session stay as they were.
func TestConsoleRefusesFormsFromAnotherOrigin(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	open := startServer(t, schema)
	tokens := writeTokens(t, []map[string]any{
		{"name": "ops", "sha256": hashOf("ops-token"), "namespaces": []string{"default"}, "roles": []string{"operate"}},
		{"name": "intruder", "sha256": hashOf("intruder-token"), "namespaces": []string{"default"}, "roles": []string{"read"}},
	})
	guarded := startServer(t, schema, "--tokens", tokens)
	startE2EWorker(t, schema, "default")
	client := newClient(t, schema)
	bg := context.Background()
	fragile := open.start(map[string]any{"type": "e2e.fragile", "input": "doc"})
	require.Equal(t, history.StatusDeadLettered, open.wait(fragile).Status)
	later := open.start(map[string]any{"type": "e2e.echo", "input": "x", "delay": "1h"})
	tasksBefore, err := client.List(bg, &sdk.ListOpts{Limit: 100})
	require.NoError(t, err)
	untouched := func(what string) {
		t.Helper()
		require.Equal(t, []history.Type{history.TaskScheduled}, eventTypes(t, client, later), "%s: the pending task is as it was", what)
		require.Equal(t, 0, countEvents(t, client, fragile, history.TaskRequeued), what)
		info, err := client.Get(bg, fragile)
		require.NoError(t, err)
		require.Equal(t, history.StatusDeadLettered, info.Status, what)
		tasks, err := client.List(bg, &sdk.ListOpts{Limit: 100})
		require.NoError(t, err)
		require.Len(t, tasks, len(tasksBefore), "%s: no task started", what)
	}
	cancelPath := "/console/tasks/" + later.String() + "/cancel?namespace=default"
	evil := newForgery(t, map[string]string{
		"/open/cancel":     form(open.url+cancelPath, "", "reason", "forged"),
		"/open/retry":      form(open.url+"/console/dead-letters/retry?namespace=default", "", "reason", "forged"),
		"/open/start":      form(open.url+"/v1/tasks", "text/plain", `{"type":"e2e.echo","input":"`, `"}`),
		"/guarded/cancel":  form(guarded.url+cancelPath, "", "reason", "forged"),
		"/guarded/login":   form(guarded.url+"/console/login", "", "token", "intruder-token"),
		"/guarded/logout":  form(guarded.url+"/console/logout", ""),
		"/guarded/retry":   form(guarded.url+"/console/dead-letters/retry?namespace=default", "", "reason", "forged"),
		"/guarded/startv1": form(guarded.url+"/v1/tasks", "text/plain", `{"type":"e2e.echo","input":"`, `"}`),
	})
	ctx := browser(t)

	// The tokenless server: each form is refused, nothing written.
	for path, code := range map[string]string{"/open/cancel": "cross_origin", "/open/retry": "cross_origin", "/open/start": "unsupported_media_type"} {
		body := evil.submit(ctx, path, open.url)
		require.Contains(t, body, code, path)
		require.NotContains(t, body, "Requeued", path)
		untouched(path)
	}

	// The server with tokens, the browser signed in as ops.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(guarded.url+"/console/login"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "ops-token"), chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#queues"))))
	require.Contains(t, text(t, ctx, "header"), "token ops")
	for _, path := range []string{"/guarded/cancel", "/guarded/retry", "/guarded/login", "/guarded/logout", "/guarded/startv1"} {
		body := evil.submit(ctx, path, guarded.url)
		want := "cross_origin"
		if path == "/guarded/startv1" {
			want = "unsupported_media_type" // and it has no token to send either
		}
		require.Contains(t, body, want, path)
		untouched(path)
		// Still signed in, as ops, not as the intruder.
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(guarded.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#queues"))))
		require.Contains(t, text(t, ctx, "header"), "token ops", path)
	}
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "forgeries-refused.png")))

	// From its own page the same cancel works.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(guarded.url+"/console/tasks/"+later.String()),
		chromedp.WaitVisible(chromedp.CSS("#cancel-task")), chromedp.Click(chromedp.CSS("#cancel-task")),
		chromedp.WaitVisible(chromedp.CSS(`.notice[role="status"]`))))
	require.Equal(t, 1, countEvents(t, client, later, history.CancelRequested))
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}

// docScreenshot saves a screenshot for the documentation under
// docs/console/ when CAIRN_UPDATE_SCREENSHOTS is set (so a test run does
// not change the tree), and to the screenshot directory always.
func docScreenshot(t *testing.T, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		png, err := chromedp.FullScreenshot(100)(ctx, target)
		if err != nil {
			return err
		}
		if os.Getenv("CAIRN_UPDATE_SCREENSHOTS") != "" {
			if err := os.WriteFile(filepath.Join("..", "docs", "console", name), png, 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(screenshotDir(t), name), png, 0o644)
	})
}

// evaluate runs a script on the page and returns its value.
func evaluate[T any](t *testing.T, ctx context.Context, script string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](script))
	require.NoError(t, err, script)
	return v
}

// In a real browser, over a queue with some history (completed tasks, a
// dead letter, a compensated and so cancelled task): the overview and the
// queue's page draw their SVG charts with a point per bucket; the failed
// step's bar is red; the cancelled attempt is not drawn green and its task
// has no empty actions card; the dead-letter reason shows its whole
// default text; /console/queues is a page.
func TestConsoleChartsInABrowser(t *testing.T) {
	t.Parallel()
	schema := enginetest.Schema(t)
	srv := startServer(t, schema)
	startE2EWorker(t, schema, "default")
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(css(sel)) }

	var done []uuid.UUID
	for i := range 6 {
		done = append(done, srv.start(map[string]any{"type": "e2e.echo", "input": i}))
	}
	fragile := srv.start(map[string]any{"type": "e2e.fragile", "input": "doc"})
	booking := srv.start(map[string]any{"type": "e2e.booking", "input": "trip"})
	require.Equal(t, history.StatusDeadLettered, srv.wait(fragile).Status)
	require.Equal(t, history.StatusCompleted, srv.wait(booking).Status)
	srv.expect(http.StatusAccepted, nil, "POST", "/v1/tasks/"+booking.String()+"/compensate", nil)
	require.Equal(t, history.StatusCancelled, srv.wait(booking).Status)
	srv.start(map[string]any{"type": "e2e.echo", "input": "later", "delay": "1h"})
	for _, id := range done {
		require.Equal(t, history.StatusCompleted, srv.wait(id).Status)
	}

	const points = `Array.from(document.querySelectorAll("#queue-charts svg polyline")).map(p => p.getAttribute("points").trim().split(" ").length)`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/"), visible("#queue-charts svg"),
		docScreenshot(t, "overview-charts.png")))
	perLine := evaluate[[]int](t, ctx, points)
	require.Len(t, perLine, 6, "one queue: waiting, due, running, throughput, error rate, latency")
	for _, n := range perLine {
		require.Equal(t, 60, n, "a point per bucket")
	}
	labels := evaluate[[]string](t, ctx, `Array.from(document.querySelectorAll("#queue-charts svg")).map(s => s.getAttribute("aria-label"))`)
	require.Contains(t, labels, "Tasks of queue default over the last 1h, now 1 waiting, 0 due, 0 running")
	require.Contains(t, labels[2], "Failed attempts of queue default over the last 1h, now ")

	// The queue's page, through the list of queues, over 15 minutes.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/queues"), visible("#queue-list"),
		chromedp.Click(css(`#queue-list a[href^="/console/queues/default"]`)), visible("#queue-charts svg"),
		chromedp.Navigate(srv.url+"/console/queues/default?window=15m"), visible("#queue-charts svg")))
	require.Equal(t, 6, len(evaluate[[]int](t, ctx, points)))
	completed := evaluate[string](t, ctx, `document.querySelector("#q-default-throughput").getAttribute("aria-label")`)
	require.Contains(t, completed, "Completed/min of queue default over the last 15m")
	title := evaluate[string](t, ctx, `document.querySelector("#q-default-errors title").textContent`)
	require.True(t, strings.HasPrefix(title, "Failed attempts of queue default"), title)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), docScreenshot(t, "queue-charts.png")))

	// The failed step's bar is red (the console's --bad).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/tasks/"+fragile.String()), visible(".step.failed")))
	require.Equal(t, "rgb(180, 35, 24)", evaluate[string](t, ctx, `getComputedStyle(document.querySelector(".step.failed .bar span")).backgroundColor`))

	// The cancelled attempt is dashed grey, not green; no empty actions card.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/tasks/"+booking.String()), visible("#task-status")))
	require.Equal(t, "cancelled", strings.TrimSpace(text(t, ctx, "#task-status")))
	require.Equal(t, "dashed", evaluate[string](t, ctx, `getComputedStyle(document.querySelector(".attempt.cancelled")).borderLeftStyle`))
	require.Zero(t, evaluate[int](t, ctx, `document.querySelectorAll(".actions.card").length`), "a cancelled task has no actions")

	// The dead-letter reason box shows its whole default text.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/dead-letters"), visible("#reason-all")))
	require.True(t, evaluate[bool](t, ctx, `(e => e.scrollWidth <= e.clientWidth)(document.querySelector("#reason-all"))`),
		"the reason box is not cut off")
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), schema))
}
