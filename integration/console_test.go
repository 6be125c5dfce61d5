package integration_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/chromedp/chromedp"
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
	timeline := text(t, ctx, "ol.timeline")
	require.Contains(t, timeline, "Attempt 1")
	require.Contains(t, timeline, "echo", "the step is on the timeline")
	require.Contains(t, timeline, "completed")

	// Cancel a running task from its page.
	waitText(t, ctx, srv.url+"/console/tasks/"+slow.String(), "#task-status", "running")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(css("#cancel-task")), visible(`p[role="status"]`)))
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
		screenshot(t, "dead-letters.png"), chromedp.Click(css(requeue)), visible(`p[role="status"]`)))
	waitText(t, ctx, srv.url+"/console/tasks/"+fragile.String(), "#task-status", "completed")
	require.NoError(t, chromedp.Do(ctx, screenshot(t, "task-requeued.png")))

	// Pause the schedule from its page.
	pause := `button[aria-label="Pause schedule nightly-report"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/console/schedules"), visible(pause),
		screenshot(t, "schedules.png"), chromedp.Click(css(pause)), visible(`button[aria-label="Resume schedule nightly-report"]`)))
	schedules, err := client.Schedules(bg)
	require.NoError(t, err)
	require.True(t, schedules[0].Paused)

	// Readable on a phone: the same page at 390 px wide.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(srv.url+"/console/tasks/"+done.String()), visible("#task-status"), screenshot(t, "task-phone.png")))
	enginetest.RequireProjectionsMatch(t, client.Store())
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
	res, err := client.Start(context.Background(), sdk.TypeRef{Name: "e2e.echo", Version: 1}, "x", nil)
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
