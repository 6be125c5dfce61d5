package console

import (
	"context"
	"html"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// parallelHistory: attempt 1 runs "fetch" (10–110 ms), then "left" and
// "right" in parallel (workflow.Go: left 110–410, right recorded after it,
// in position order, at 412 having run 200 ms), then "store" (420–520)
// once both are joined, and waits for "approval" from 530 until ops
// signals it at 1530; attempt 2 runs "notify" (1550–1600) and completes
// at 1610.
func parallelHistory() []history.Event {
	return []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(110), Attempt: 1, Data: history.StepCompletedData{Position: 0, Name: "fetch", DurationMillis: 100}},
		{Seq: 4, At: at(410), Attempt: 1, Data: history.StepCompletedData{Position: 1, Name: "left", DurationMillis: 300}},
		{Seq: 5, At: at(412), Attempt: 1, Data: history.StepCompletedData{Position: 2, Name: "right", DurationMillis: 200}},
		{Seq: 6, At: at(520), Attempt: 1, Data: history.StepCompletedData{Position: 3, Name: "store", DurationMillis: 100}},
		{Seq: 7, At: at(530), Attempt: 1, Data: history.WaitStartedData{Name: "approval", Position: 0, Deadline: at(3_600_530)}},
		{Seq: 8, At: at(1530), Data: history.SignalReceivedData{Name: "approval", Sender: "ops", Payload: []byte(`{"approved":true}`)}},
		{Seq: 9, At: at(1540), Attempt: 2, Data: history.AttemptStartedData{WorkerID: "w2", LeaseEpoch: 2}},
		{Seq: 10, At: at(1600), Attempt: 2, Data: history.StepCompletedData{Position: 4, Name: "notify", DurationMillis: 50}},
		{Seq: 11, At: at(1610), Attempt: 2, Data: history.TaskCompletedData{}},
	}
}

// bar is a row's drawn extent, in percent of the axis.
type bar struct{ left, width float64 }

func (b bar) end() float64 { return b.left + b.width }

// overlaps reports whether two bars share more than the rounding of
// their places (thousandths of a percent): one that ends where the other
// starts does not overlap it.
func (b bar) overlaps(o bar) bool { return b.left < o.end()-1e-6 && o.left < b.end()-1e-6 }

// axisRowRE reads a rendered row of the time axis: its kind, class, label
// and the left and width of its span.
var axisRowRE = regexp.MustCompile(`<div class="axis-row row-(\w+) ([\w-]+)"><span class="name" title="([^"]*)">[^<]*</span>` +
	`<div class="track"><span class="span(?: open)?" style="left: ([0-9.]+)%; width: ([0-9.]+)%"`)

// renderedBars reads the bars of the time axis on a task page, by kind
// and label ("step left").
func renderedBars(t *testing.T, page string) map[string]bar {
	t.Helper()
	bars := map[string]bar{}
	for _, m := range axisRowRE.FindAllStringSubmatch(page, -1) {
		left, err := strconv.ParseFloat(m[4], 64)
		require.NoError(t, err)
		width, err := strconv.ParseFloat(m[5], 64)
		require.NoError(t, err)
		key := m[1] + " " + html.UnescapeString(m[3])
		_, dup := bars[key]
		require.False(t, dup, "two rows %q", key)
		bars[key] = bar{left, width}
	}
	require.NotEmpty(t, bars, "no time axis on the page:\n%s", page)
	return bars
}

// pct is ms's place on an axis of span ms, as buildTimeAxis rounds it.
func pct(ms, span float64) float64 { return math.Round(100*ms/span*1000) / 1000 }

// Parallel steps are drawn overlapping, sequential ones one after the
// other, each at At − duration to At; the wait runs from its wait_started
// to the signal that ended it, which is marked with its sender.
func TestTimeAxisDrawsParallelStepsOverlapping(t *testing.T) {
	t.Parallel()
	ax := buildTimeAxis(parallelHistory(), true, at(99_999))
	require.Equal(t, at(0), ax.Start)
	require.Equal(t, at(1610), ax.End, "a finished task's axis ends at its last event, not now")
	rows := map[string]*axisRow{}
	var order []string
	for _, r := range ax.Rows {
		rows[r.Kind+" "+r.Label] = r
		order = append(order, r.Kind+" "+r.Label)
	}
	require.Equal(t, []string{"attempt Attempt 1", "step fetch", "step left", "step right", "step store", "wait wait approval",
		"attempt Attempt 2", "step notify"}, order)
	const span = 1610.0
	want := map[string][2]float64{ // start and end, in ms
		"attempt Attempt 1": {10, 530}, "step fetch": {10, 110}, "step left": {110, 410}, "step right": {212, 412},
		"step store": {420, 520}, "wait wait approval": {530, 1530}, "attempt Attempt 2": {1540, 1610}, "step notify": {1550, 1600},
	}
	for key, w := range want {
		r := rows[key]
		require.Equal(t, pct(w[0], span), r.Left, key)
		require.Equal(t, thousandth(pct(w[1], span)-pct(w[0], span)), r.Width, key)
	}
	b := func(key string) bar { return bar{rows[key].Left, rows[key].Width} }
	require.True(t, b("step left").overlaps(b("step right")), "parallel steps overlap")
	require.False(t, b("step fetch").overlaps(b("step left")), "fetch ends before the parallel steps start")
	require.False(t, b("step store").overlaps(b("step left")), "store starts after the join")
	require.False(t, b("step store").overlaps(b("step right")), "store starts after the join")
	require.LessOrEqual(t, b("step right").end(), b("step store").left)

	wait := rows["wait wait approval"]
	require.Equal(t, rowSignalled, wait.Class)
	require.Len(t, wait.Marks, 1, "the signal; the deadline, an hour on, is past the axis")
	require.Equal(t, "signal", wait.Marks[0].Class)
	require.Equal(t, pct(1530, span), wait.Marks[0].Left)
	require.Contains(t, wait.Marks[0].Text, "signal approval from ops")
	require.Contains(t, wait.Detail, "by ops")
	require.Contains(t, wait.Detail, "deadline 2026-03-01 13:00:00.930Z")
	require.Equal(t, blockOK, rows["attempt Attempt 1"].Class)

	// The page draws the same geometry.
	page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusCompleted, Type: "doc", Queue: "default"}, parallelHistory())
	bars := renderedBars(t, page)
	require.Len(t, bars, len(want))
	for key := range want {
		require.Equal(t, b(key), bars[key], key)
	}
	require.True(t, bars["step left"].overlaps(bars["step right"]))
	require.False(t, bars["step store"].overlaps(bars["step right"]))
	require.Contains(t, page, `aria-label="signal approval from ops at 2026-03-01 12:00:01.930Z"`)
	require.Contains(t, page, "signalled after 1s by ops · deadline 2026-03-01 13:00:00.930Z")
}

// Sequential steps, each recorded as the next begins, are drawn end to
// start: no two overlap.
func TestTimeAxisDrawsSequentialStepsApart(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
	}
	for i := range 5 {
		events = append(events, history.Event{Seq: int64(3 + i), At: at(10 + 100*(i+1)), Attempt: 1,
			Data: history.StepCompletedData{Position: i, Name: "s" + strconv.Itoa(i), DurationMillis: 100}})
	}
	events = append(events, history.Event{Seq: 8, At: at(520), Attempt: 1, Data: history.TaskCompletedData{}})
	bars := renderedBars(t, renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusCompleted, Type: "doc", Queue: "default"}, events))
	for i := range 4 {
		a, b := bars["step s"+strconv.Itoa(i)], bars["step s"+strconv.Itoa(i+1)]
		require.Positive(t, a.width)
		require.False(t, a.overlaps(b), "s%d %v and s%d %v", i, a, i+1, b)
		require.InDelta(t, a.end(), b.left, 0.001, "each starts where the one before ended")
	}
}

// A wait that timed out runs to its wait_timed_out with its deadline
// marked inside it; a wait under way runs to now, its deadline written
// beside it; a signal no wait took has a row of its own.
func TestTimeAxisDrawsWaitsToTheirEnd(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(100), Attempt: 1, Data: history.WaitStartedData{Name: "docs", Position: 0, Deadline: at(600)}},
		{Seq: 4, At: at(620), Attempt: 2, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 2}},
		{Seq: 5, At: at(625), Attempt: 2, Data: history.WaitTimedOutData{Name: "docs", Position: 0}},
		{Seq: 6, At: at(700), Data: history.SignalReceivedData{Name: "docs", Sender: "late-bot"}},
		{Seq: 7, At: at(800), Attempt: 2, Data: history.WaitStartedData{Name: "approval", Position: 1, Deadline: at(3_600_000)}},
	}
	ax := buildTimeAxis(events, false, at(1000))
	require.Equal(t, at(1000), ax.End, "a task under way: the axis ends now")
	require.Len(t, ax.Rows, 5)
	timedOut, signal, open := ax.Rows[1], ax.Rows[3], ax.Rows[4]
	require.Equal(t, []string{"wait docs", rowTimedOut}, []string{timedOut.Label, timedOut.Class})
	require.Equal(t, bar{10, 52.5}, bar{timedOut.Left, timedOut.Width})
	require.Equal(t, []axisMark{{Class: "deadline", At: at(600), Left: 60, Text: "deadline of wait docs: 2026-03-01 12:00:01.000Z"}}, timedOut.Marks)
	require.Contains(t, timedOut.Detail, "timed out after 525ms")
	require.Equal(t, []string{"signal docs", rowSignal, "from late-bot"}, []string{signal.Label, signal.Class, signal.Detail})
	require.Equal(t, 70.0, signal.Marks[0].Left)
	require.Equal(t, []string{"wait approval", rowWaiting}, []string{open.Label, open.Class})
	require.True(t, open.Open)
	require.Equal(t, bar{80, 20}, bar{open.Left, open.Width}, "to now")
	require.Empty(t, open.Marks, "the deadline is an hour away, past the axis")
	require.Equal(t, "deadline 2026-03-01 13:00:00.400Z", open.Detail)
	second := ax.Rows[2]
	require.Equal(t, []string{rowAttempt, "Attempt 2", blockOK}, []string{second.Kind, second.Label, second.Class})
	require.False(t, second.Open, "attempt 2 ended with its wait")
	require.Equal(t, bar{62, 18}, bar{second.Left, second.Width})
}

// A workflow's parallel steps, run by a real worker, are drawn
// overlapping on the task's page, and the step after their join after
// both.
func TestTaskPageDrawsParallelStepsOfARealRun(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			nap := func(d time.Duration) func(context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					select {
					case <-time.After(d):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				}
			}
			wf := sdk.NewWorkflow("console.parallel", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
				left := workflow.Go(ctx, "left", nap(300*time.Millisecond), nil)
				right := workflow.Go(ctx, "right", nap(200*time.Millisecond), nil)
				if _, err := left.Get(ctx); err != nil {
					return 0, err
				}
				if _, err := right.Get(ctx); err != nil {
					return 0, err
				}
				return workflow.Step(ctx, "after", nap(100*time.Millisecond), nil)
			}, nil)
			client, run := runToCompletion(t, ns.Store, wf, struct{}{})

			h := testConsole(t, ns.Store)
			a := servertest.Send(t, h, http.MethodGet, "/console/tasks/"+run.ID.String(), nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			bars := renderedBars(t, string(a.Body))
			left, right, after := bars["step left"], bars["step right"], bars["step after"]
			for name, b := range map[string]bar{"left": left, "right": right, "after": after} {
				require.Positive(t, b.width, name)
			}
			events, err := client.History(context.Background(), run.ID)
			require.NoError(t, err)
			span := float64(events[len(events)-1].At.Sub(events[0].At))
			// How long each ran as its history says, not as it was asked
			// to: a loaded machine's naps run long.
			ran := map[string]time.Duration{}
			for _, e := range events {
				if d, ok := e.Data.(history.StepCompletedData); ok {
					ran[d.Name] = time.Duration(d.DurationMillis) * time.Millisecond
				}
			}
			for name, b := range map[string]bar{"left": left, "right": right, "after": after} {
				require.GreaterOrEqual(t, ran[name], map[string]time.Duration{"left": 300 * time.Millisecond, "right": 200 * time.Millisecond, "after": 100 * time.Millisecond}[name], name)
				require.InDelta(t, 100*float64(ran[name])/span, b.width, 100*float64(50*time.Millisecond)/span+0.002,
					"%s is drawn as long as it ran (%s of %s)", name, ran[name], time.Duration(span))
			}
			require.True(t, left.overlaps(right), "left %v and right %v ran together", left, right)
			shared := min(left.end(), right.end()) - max(left.left, right.left)
			require.Greater(t, shared, right.width/2, "for most of right's run: left %v, right %v", left, right)
			// after starts once both are recorded; 0.002 is the rounding
			// of the two places (a thousandth of a percent each).
			require.GreaterOrEqual(t, after.left, max(left.end(), right.end())-0.002, "after %v follows left %v and right %v", after, left, right)
			require.Greater(t, after.width, 0.0)
			attempt := bars["attempt Attempt 1"]
			for name, b := range map[string]bar{"left": left, "right": right, "after": after} {
				require.GreaterOrEqual(t, b.left, attempt.left-0.002, "%s lies inside its attempt", name)
				require.LessOrEqual(t, b.end(), attempt.end()+0.002, "%s lies inside its attempt", name)
			}
		})
	}
}

// testCallbackSecret signs the callback links of these tests.
var testCallbackSecret = []byte("console-test-callback-secret-012")

// The callback links carry the server's prefix and the wait's position,
// and a wait past its deadline, about to time out, gets none.
func TestCallbackLinksOfAWait(t *testing.T) {
	t.Parallel()
	_, st := consoleServer(t)
	srv := newTestConsole(t, st, Config{Prefix: "/cairn", CallbackURL: func(base string, cb sdk.Callback) (string, error) {
		// As the server's: its prefix, its callbacks route, its secret.
		token, err := sdk.CallbackToken(testCallbackSecret, cb)
		return base + "/cairn/v1/callbacks/" + token, err
	}})
	now := time.Now()
	wait := &waitingTask{Task: &sdk.TaskInfo{ID: uuid.New()}, Name: "approve-order", Position: 3, Deadline: now.Add(time.Hour)}
	r := httptest.NewRequest(http.MethodGet, "/console/tasks/x", nil)
	r.Host = "cairn.example:8443"
	links := srv.callbackLinks(r, "shop", wait, now)
	require.NotNil(t, links)
	token, ok := strings.CutPrefix(links.URL, "http://cairn.example:8443/cairn/v1/callbacks/")
	require.True(t, ok, links.URL)
	cb, err := sdk.ParseCallbackToken(testCallbackSecret, token, now)
	require.NoError(t, err)
	require.Equal(t, sdk.Callback{Namespace: "shop", TaskID: wait.Task.ID, Name: "approve-order", Wait: 3, Expires: time.Unix(wait.Deadline.Unix(), 0).UTC()}, cb)
	require.Equal(t, links.URL+"?decision=approve", links.Approve)
	require.Equal(t, links.URL+"?decision=reject", links.Reject)

	wait.Name = "documents"
	links = srv.callbackLinks(r, "shop", wait, now)
	require.NotNil(t, links)
	require.Empty(t, links.Approve, "not an approval: one link, its body the payload")
	require.Empty(t, links.Reject)

	wait.Deadline = now.Add(-time.Second)
	require.Nil(t, srv.callbackLinks(r, "shop", wait, now), "past its deadline")
	none := newTestConsole(t, st, Config{})
	wait.Deadline = now.Add(time.Hour)
	require.Nil(t, none.callbackLinks(r, "shop", wait, now), "no secret")
}

// A patch marker is drawn as a mark of its own on the time axis, and
// noted in its attempt on the timeline.
func TestTaskPageShowsAPatchMarker(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(110), Attempt: 1, Data: history.StepCompletedData{Position: 0, Name: "extract", DurationMillis: 100}},
		{Seq: 4, At: at(120), Attempt: 1, Data: history.PatchRecordedData{PatchID: "add-classify", Position: 1}},
		{Seq: 5, At: at(220), Attempt: 1, Data: history.StepCompletedData{Position: 1, Name: "classify", DurationMillis: 100}},
		{Seq: 6, At: at(230), Attempt: 1, Data: history.TaskCompletedData{}},
	}
	ax := buildTimeAxis(events, true, at(230))
	var patch *axisRow
	for _, r := range ax.Rows {
		if r.Kind == rowPatch {
			patch = r
		}
	}
	require.NotNil(t, patch, "no patch row")
	require.Equal(t, "patch add-classify", patch.Label)
	require.Equal(t, "new branch from step 1", patch.Detail)
	require.Len(t, patch.Marks, 1)
	require.Contains(t, patch.Marks[0].Text, "patch add-classify taken at step 1")

	page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusCompleted, Type: "doc", Queue: "default"}, events)
	require.Contains(t, page, `class="axis-row row-patch patch"`)
	require.Contains(t, page, "took the new branch of patch add-classify at step 1")
}

// A select's wait is drawn as one wait, ended by its decision, and its
// wait and decision are noted on the timeline.
func TestTaskPageShowsASelect(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
		{Seq: 3, At: at(20), Attempt: 1, Data: history.WaitStartedData{Position: 0, Deadline: at(1000),
			Select: &history.SelectWait{Signals: []string{"approval"}}}},
		{Seq: 4, At: at(1000), Attempt: 2, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 2}},
		{Seq: 5, At: at(1010), Attempt: 2, Data: history.SelectMatchedData{Position: 0, Case: 1, Kind: history.SelectTimer}},
		{Seq: 6, At: at(1020), Attempt: 2, Data: history.TaskCompletedData{}},
	}
	ax := buildTimeAxis(events, true, at(1020))
	var wait *axisRow
	for _, r := range ax.Rows {
		if r.Kind == rowWait {
			wait = r
		}
	}
	require.NotNil(t, wait, "no wait row")
	require.Equal(t, "select 0", wait.Label)
	require.False(t, wait.Open)
	require.Equal(t, at(1010), wait.End)
	require.Contains(t, wait.Detail, "select 0: the timer won")

	page := renderTask(t, &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusCompleted, Type: "doc", Queue: "default"}, events)
	require.Contains(t, page, "waiting for signal approval, a timer at")
	require.Contains(t, page, "select 0: the timer won")
}
