package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// t0 is the start of the hand-written histories below, with milliseconds
// that whole seconds would cut.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 400*int(time.Millisecond), time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// failedThenRetried: attempt 1 completes "fetch", fails in "parse" and
// schedules a retry 300 ms later; attempt 2 starts 50 ms after that, all
// within one second.
func failedThenRetried() []history.Event {
	retry := at(700)
	return []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(110), Attempt: 1, Data: history.StepCompletedData{Position: 0, Name: "fetch", DurationMillis: 100}},
		{Seq: 4, At: at(400), Attempt: 1, Data: history.AttemptFailedData{NextRunAt: &retry,
			Error: history.ErrorInfo{Class: history.Transient, Message: "bad page", Step: "parse", Position: 1}}},
		{Seq: 5, At: at(750), Attempt: 2, Data: history.AttemptStartedData{WorkerID: "w2", LeaseEpoch: 2}},
	}
}

// renderTask renders the task page of info with events, for an operator.
func renderTask(t *testing.T, info *sdk.TaskInfo, events []history.Event) string {
	t.Helper()
	srv, _ := consoleServer(t)
	finished := info.Status.Terminal()
	now := t0
	if len(events) > 0 {
		now = events[len(events)-1].At.Add(100 * time.Millisecond)
	}
	data := &taskData{Task: info, Finished: finished, Events: events, Timeline: buildTimeline(events), Axis: buildTimeAxis(events, finished, now),
		CanCancel: !finished, CanRetry: info.Status == history.StatusDeadLettered, CanCompensate: info.Status == history.StatusCompleted}
	w := httptest.NewRecorder()
	srv.render(w, http.StatusOK, "task", &consolePage{Title: "Task", Page: "tasks", Namespace: "default", CanOperate: true, Data: data})
	require.Equal(t, http.StatusOK, w.Code)
	return w.Body.String()
}

// The failed step gets its own bar (red, from the attempt's previous
// event to the failure), and the retry time follows it, not the last
// step that succeeded.
func TestTimelineDrawsTheFailedStepAndTheRetryAfterIt(t *testing.T) {
	t.Parallel()
	blocks := buildTimeline(failedThenRetried())
	require.Len(t, blocks, 3, "scheduled, attempt 1, attempt 2")
	attempt := blocks[1]
	require.Equal(t, blockFailed, attempt.Class)
	require.Equal(t, []timelineStep{
		{Name: "fetch", Duration: 100 * time.Millisecond, Width: 100 * 100.0 / 390},
		{Name: "parse", Duration: 290 * time.Millisecond, Width: 100 * 290.0 / 390, Failed: true},
	}, attempt.Steps)
	require.Equal(t, at(700), *attempt.Retry)
	require.Empty(t, attempt.Notes, "the retry is not a note under the steps")

	page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusRunning, Type: "doc", Queue: "default"}, failedThenRetried())
	parse := strings.Index(page, `aria-label="parse failed after 290ms"`)
	fetch := strings.Index(page, `aria-label="fetch took 100ms"`)
	retry := strings.Index(page, "next attempt due 2026-03-01 12:00:01.100Z")
	require.Positive(t, fetch, page)
	require.Greater(t, parse, fetch, "the failed step's bar follows the step that completed")
	require.Greater(t, retry, parse, "the retry is printed after the failed step")
	require.Contains(t, page, `class="step failed"`)
}

// Times on the task page keep their milliseconds, so a retry reads as
// after the failure that scheduled it and before the attempt it started.
func TestTaskPageTimesKeepMilliseconds(t *testing.T) {
	t.Parallel()
	page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusRunning, Type: "doc", Queue: "default"}, failedThenRetried())
	failedAt := "2026-03-01 12:00:00.800Z" // attempt 1's end: its start plus its 390ms
	retryAt := "2026-03-01 12:00:01.100Z"
	secondAt := "2026-03-01 12:00:01.150Z"
	for _, s := range []string{"due 2026-03-01 12:00:00.400Z", "Attempt 1 <span class=\"muted\">2026-03-01 12:00:00.410Z · 390ms",
		retryAt, "Attempt 2 <span class=\"muted\">" + secondAt, failedAt} {
		require.Contains(t, page, s)
	}
	require.Less(t, failedAt, retryAt)
	require.Less(t, retryAt, secondAt)
	require.NotRegexp(t, regexp.MustCompile(`\d{2}:\d{2}:\d{2}Z`), page, "no time cut to whole seconds")
}

// A cancelled attempt is drawn as cancelled, not as a success.
func TestTimelineDrawsACancelledAttemptAsCancelled(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(20), Attempt: 1, Data: history.CancelRequestedData{By: "ops", Reason: "wrong input"}},
		{Seq: 4, At: at(30), Attempt: 1, Data: history.TaskCancelledData{Reason: "wrong input"}},
	}
	blocks := buildTimeline(events)
	require.Equal(t, blockCancelled, blocks[1].Class)
	page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusCancelled, Type: "doc", Queue: "default"}, events)
	require.Contains(t, page, `<li class="attempt cancelled">`)
	require.NotContains(t, page, `<li class="attempt ok">`)
}

// A task that allows no action (cancelled, failed) has no actions card,
// rather than an empty one; one that allows some has it.
func TestTaskPageShowsNoEmptyActionsCard(t *testing.T) {
	t.Parallel()
	events := []history.Event{{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}}}
	for status, want := range map[history.Status]string{
		history.StatusCancelled: "", history.StatusFailed: "",
		history.StatusPending: "cancel-task", history.StatusDeadLettered: "retry-task", history.StatusCompleted: "compensate-task",
	} {
		page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: status, Type: "doc", Queue: "default"}, events)
		if want == "" {
			require.NotContains(t, page, `aria-label="Task actions"`, status)
			continue
		}
		require.Contains(t, page, `aria-label="Task actions"`, status)
		require.Contains(t, page, `id="`+want+`"`, status)
	}
}

// The dead-letter page's reason box is wide enough for its default text.
func TestDeadLetterReasonFitsItsDefault(t *testing.T) {
	t.Parallel()
	srv, _ := consoleServer(t)
	a := servertest.Send(t, srv, http.MethodGet, "/console/dead-letters", nil)
	require.Equal(t, http.StatusOK, a.Status)
	m := regexp.MustCompile(`<input id="reason-all" name="reason" value="([^"]*)" size="(\d+)"`).FindStringSubmatch(string(a.Body))
	require.NotNil(t, m, "%s", a.Body)
	size, err := strconv.Atoi(m[2])
	require.NoError(t, err)
	require.Greater(t, size, len(m[1]), "the box is wider than its default text")
}

// Every console URL answers HTML: /console/queues lists the queues with
// links to their pages, a queue's page has its charts, and a URL naming no
// page is an HTML 404, never the API's JSON.
func TestConsoleQueuePagesAreHTML(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, st.Store, "default")
			h := testConsole(t, st.Store)
			startDoc(t, st.Store)

			list := servertest.SendHTML(t, h, "/console/queues", http.StatusOK)
			require.Contains(t, list, `href="/console/queues/default?namespace=default"`)

			queue := servertest.SendHTML(t, h, "/console/queues/default?window=15m", http.StatusOK)
			require.Contains(t, queue, "<h1>Queue default</h1>")
			require.Equal(t, 4, strings.Count(queue, "<svg "), "load, throughput, error rate, latency")
			require.Contains(t, queue, `aria-label="Tasks of queue default over the last 15m, now 1 waiting, 1 due, 0 running"`)
			require.Contains(t, queue, `aria-current="true">15m</a>`)

			overview := servertest.SendHTML(t, h, "/console/?window=6h", http.StatusOK)
			require.Contains(t, overview, `aria-label="Charts of queue default"`)
			require.Contains(t, overview, "flow over the last 6 h")
			require.Contains(t, overview, "kept as long as the server's default says")
			require.Contains(t, overview, "No finished task is kept.")
			require.NoError(t, st.Store.NamespaceSet(t.Context(), &store.NamespaceSetParams{Namespace: "default", Retention: 30 * 24 * time.Hour, KeyRetention: 90 * time.Minute}))
			overview = servertest.SendHTML(t, h, "/console/", http.StatusOK)
			require.Contains(t, overview, "Finished tasks are kept 30 days, their idempotency keys 1h30m0s after that.")

			bad := servertest.SendHTML(t, h, "/console/queues/default?window=2d", http.StatusBadRequest)
			require.Contains(t, bad, `window &#34;2d&#34; is not one of 15m, 1h, 6h, 24h`)
			missing := servertest.SendHTML(t, h, "/console/no-such-page", http.StatusNotFound)
			require.Contains(t, missing, "There is no console page at /console/no-such-page.")
		})
	}
}

// A chart has a point per bucket scaled into its plot, its axis labels,
// and says what it shows with the latest value.
func TestQueueChartsScaleTheSeries(t *testing.T) {
	t.Parallel()
	q := store.QueueSeries{Queue: "docs", Step: time.Minute, Points: make([]store.SeriesPoint, 3)}
	q.Points[0] = store.SeriesPoint{Waiting: 4, Completed: 2, AttemptsEnded: 4, AttemptsFailed: 1}
	q.Points[2] = store.SeriesPoint{Waiting: 2, Running: 1, Completed: 6, AttemptsEnded: 6, AttemptsFailed: 3,
		Started: 2, LatencyTotal: 3 * time.Second, LatencyMax: 2 * time.Second}
	charts := queueCharts(q, "1h")
	require.Len(t, charts, 4)
	load := charts[0]
	require.Equal(t, "4", load.YMax)
	require.Equal(t, "44.0,18.0 155.0,74.0 266.0,46.0", load.Lines[0].Points, "waiting: 4 at the top, 0, 2 half way")
	require.Equal(t, "Tasks of queue docs over the last 1h, now 2 waiting, 0 due, 1 running", load.Summary)
	require.Equal(t, "6.0/min · last 1 min", charts[1].Latest)
	require.Equal(t, "50% · last 1 min", charts[2].Latest)
	require.Equal(t, "1.5s", charts[3].Latest)
	require.Equal(t, "−1h", load.From)
}

// The console shows a payload still sealed (an erased task's, or one whose
// key the server lacks) as encrypted, not as its ciphertext.
func TestConsoleShowsSealedPayloadsAsEncrypted(t *testing.T) {
	t.Parallel()
	sealed := history.Sealed{V: 1, Task: "01a23434-ccaa-76fa-9f11-fe3743ae6937", Data: make([]byte, 44)}.Encode()
	require.Equal(t, "🔒 encrypted (44 bytes): erased, or the server has no key for it", prettyJSON(sealed, consoleJSONLimit))
	require.Equal(t, "{\n  \"a\": 1\n}", prettyJSON(json.RawMessage(`{"a":1}`), consoleJSONLimit))
}
