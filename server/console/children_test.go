package console

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/workflow"
)

// panelChild is a row of the children panel as the page renders it.
type panelChild struct {
	Position     int
	ID, Href     string
	Type, Status string
	Started      bool
	Finished     bool
	Error        string
	Cost         string
}

var (
	panelRowRE  = regexp.MustCompile(`(?s)<tr class="child">(.*?)</tr>`)
	panelCellRE = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	panelLinkRE = regexp.MustCompile(`<a class="mono" href="([^"]+)" aria-label="Child task ([^"]+)">`)
	panelStatRE = regexp.MustCompile(`<span class="status status-(\w+)">`)
)

// panelChildren reads the children panel's rows off a task page.
func panelChildren(t *testing.T, page string) []panelChild {
	t.Helper()
	var out []panelChild
	for _, m := range panelRowRE.FindAllStringSubmatch(page, -1) {
		cells := panelCellRE.FindAllStringSubmatch(m[1], -1)
		require.Len(t, cells, 8, "a child row has eight cells: %s", m[1])
		pos, err := strconv.Atoi(cells[0][1])
		require.NoError(t, err)
		link := panelLinkRE.FindStringSubmatch(cells[1][1])
		require.NotNil(t, link, "a child row links to the child: %s", cells[1][1])
		c := panelChild{Position: pos, Href: html.UnescapeString(link[1]), ID: link[2], Type: cells[2][1],
			Started: cells[4][1] != "", Finished: cells[5][1] != "", Cost: cells[6][1], Error: html.UnescapeString(cells[7][1])}
		if st := panelStatRE.FindStringSubmatch(cells[3][1]); st != nil {
			c.Status = st[1]
		}
		out = append(out, c)
	}
	return out
}

// getPage gets a console page and requires it is served.
func getPage(t *testing.T, h http.Handler, target string) string {
	t.Helper()
	a := servertest.Send(t, h, http.MethodGet, target, nil)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	return string(a.Body)
}

// A parent with a few children, run by a real worker: its page lists
// them by position with their statuses (a failed one with its error, a
// running one with its row's status) and links down to each; each
// child's page links back up; the time axis draws a bar per child and the
// parent's wait for the one it awaits.
func TestTaskPageShowsAParentsChildrenAndTheWayBack(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			kid := sdk.NewWorkflow("console.kid", 1, func(ctx workflow.Context, n int) (int, error) {
				return workflow.Step(ctx, "work", func(context.Context) (int, error) {
					if n == 2 {
						return 0, activities.Permanent(errors.Newf("page %d unreadable", n))
					}
					return 10 * n, nil
				}, nil)
			}, &sdk.WorkflowOpts{SkipDeadLetter: true})
			waiter := sdk.NewWorkflow("console.waiter", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
				_, _, err := workflow.Receive[struct{}](ctx, "go", time.Hour)
				return 7, err
			}, nil)
			parent := sdk.NewWorkflow("console.fan", 1, func(ctx workflow.Context, _ struct{}) (int, error) {
				outs, err := workflow.MapChildren(ctx, kid, []int{1, 2, 3}, nil)
				var ce *workflow.ChildError
				if err != nil && !errors.As(err, &ce) {
					return 0, err
				}
				n, err := workflow.StartChild(ctx, waiter, struct{}{}, nil).Result(ctx)
				if err != nil {
					return 0, err
				}
				return outs[0] + outs[2] + n, nil
			}, nil)
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: ns.Store, Concurrency: 4, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
			require.NoError(t, err)
			sdk.Register(w, kid)
			sdk.Register(w, waiter)
			sdk.Register(w, parent)
			require.NoError(t, w.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
			client, err := sdk.NewClient(sdk.ClientConfig{Store: ns.Store})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, err := sdk.Start(ctx, client, parent, struct{}{}, nil)
			require.NoError(t, err)

			// Wait until the parent awaits the waiter, which awaits its signal.
			var waiterID uuid.UUID
			require.Eventually(t, func() bool {
				events, err := client.History(ctx, run.ID)
				require.NoError(t, err)
				state, err := history.Replay(events)
				require.NoError(t, err)
				if len(state.Children) < 4 || state.ChildWait == nil {
					return false
				}
				waiterID = uuid.MustParse(state.Children[3].ID)
				wevents, err := client.History(ctx, waiterID)
				require.NoError(t, err)
				ws, err := history.Replay(wevents)
				require.NoError(t, err)
				return ws.Wait != nil
			}, 20*time.Second, 20*time.Millisecond, "the parent never awaited its waiting child")
			waiting, err := client.Get(ctx, waiterID)
			require.NoError(t, err)
			require.False(t, waiting.Status.Terminal())

			h := testConsole(t, ns.Store)
			page := getPage(t, h, "/console/tasks/"+run.ID.String())
			require.Contains(t, page, `<p id="children-summary">4 children: 2 completed, 1 failed, 1 under way</p>`)
			kids := panelChildren(t, page)
			require.Len(t, kids, 4)
			wantStatus := []string{"completed", "failed", "completed", string(waiting.Status)}
			for i, c := range kids {
				require.Equal(t, i, c.Position, "by position")
				require.Equal(t, wantStatus[i], c.Status, "child %d", i)
				require.Equal(t, "/console/tasks/"+c.ID+"?namespace=default", c.Href)
				require.True(t, c.Started)
				require.Equal(t, i != 3, c.Finished, "child %d", i)
			}
			require.Equal(t, "console.kid@1", kids[0].Type)
			require.Equal(t, "console.waiter@1", kids[3].Type)
			require.Equal(t, "page 2 unreadable", kids[1].Error)
			require.Empty(t, kids[0].Error)
			require.Equal(t, waiterID.String(), kids[3].ID)
			require.NotContains(t, page, `id="task-parent"`, "a parent started on its own has no way up")

			// Down and back up: each child's page links to the parent, at its position.
			for _, c := range kids {
				child := getPage(t, h, c.Href)
				require.Contains(t, child, `<a class="mono" id="task-parent" href="/console/tasks/`+run.ID.String()+`?namespace=default"`)
				require.Contains(t, child, fmt.Sprintf("console.fan@1 · child %d</dd>", c.Position))
				require.NotContains(t, child, `id="task-children"`, "a child with no children of its own has no panel")
			}

			// The axis: a bar per child, and the open wait for the waiter.
			bars := renderedBars(t, page)
			for i, typ := range []string{"console.kid", "console.kid", "console.kid", "console.waiter"} {
				_, ok := bars[fmt.Sprintf("child child %d %s", i, typ)]
				require.True(t, ok, "child %d has its bar: %v", i, bars)
			}
			require.Contains(t, page, `<div class="axis-row row-child failed"><span class="name" title="child 1 console.kid">`)
			require.Contains(t, page, `<div class="axis-row row-wait waiting"><span class="name" title="wait child 3">`)

			_, err = client.Signal(ctx, waiterID, "go", nil, nil)
			require.NoError(t, err)
			info, err := client.Wait(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, history.StatusCompleted, info.Status, "%+v", info.LastError)
			page = getPage(t, h, "/console/tasks/"+run.ID.String())
			require.Contains(t, page, `<p id="children-summary">4 children: 3 completed, 1 failed</p>`)
			kids = panelChildren(t, page)
			require.Len(t, kids, 4)
			require.Equal(t, "completed", kids[3].Status)
			require.True(t, kids[3].Finished)
			require.Contains(t, page, `<div class="axis-row row-wait signalled"><span class="name" title="wait child 3">`,
				"the wait ran to the child_finished that ended it")
			require.Contains(t, page, `<div class="axis-row row-child ok"><span class="name" title="child 3 console.waiter">`)
		})
	}
}

// A fan-out of 300 children, written through the store: 250 completed,
// 30 failed, 20 still running. The page lists 50 of them at a time with
// the summary of all, pages and filters them, and draws them on the time
// axis as one row of ticks, not 300 bars.
func TestTaskPageCapsABigFanOut(t *testing.T) {
	t.Parallel()
	const n, completed, failed = 300, 250, 30
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := ns.Store
			servertest.RegisterDoc(t, s, "default")
			h := testConsole(t, s)
			parentID := startDoc(t, s)
			parent := servertest.ClaimDoc(t, s)
			require.Equal(t, parentID, parent.Task.ID)
			starts := make([]store.ChildStart, n)
			for i := range starts {
				starts[i] = store.ChildStart{Task: store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
					TaskType: "kid", TypeVersion: 1, Queue: "kids", MaxAttempts: 1, Input: json.RawMessage(strconv.Itoa(i))}}}
			}
			res, err := enginetest.StartChildren(ctx, s, &store.ChildStartParams{
				Parent:   store.EventAppendParams{TaskID: parent.Task.ID, State: parent.State, Epoch: parent.State.Lease.Epoch, Attempt: parent.State.Attempt},
				Children: starts,
			})
			require.NoError(t, err)
			require.Len(t, res.IDs, n)
			parent.State = res.State
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			servertest.AppendFor(t, s, parent, history.ChildWaitStartedData{Positions: all, Count: n})

			var claimed []*store.ClaimedTask
			for len(claimed) < n {
				gotRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"kids"},
					Types: []store.TypeKey{{Type: "kid", Version: 1}}, Owner: "w", Max: n - len(claimed), LeaseTTL: time.Hour})
				got := gotRes.Tasks
				require.NoError(t, err)
				require.NotEmpty(t, got, "claimed %d of %d children", len(claimed), n)
				for _, ct := range got {
					require.NoError(t, ct.Err)
				}
				claimed = append(claimed, got...)
			}
			var ends []*store.EventAppendParams
			for _, ct := range claimed {
				pos := ct.Task.ParentPosition
				require.Equal(t, parentID, ct.Task.ParentID)
				p := &store.EventAppendParams{TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt}
				switch {
				case pos < completed:
					p.Payloads = []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`{}`)}}
				case pos < completed+failed:
					info := history.ErrorInfo{Class: history.Permanent, Message: fmt.Sprintf("kid %d broke", pos), Step: "work"}
					p.Payloads = []history.Payload{history.AttemptFailedData{Error: info}, history.TaskFailedData{Error: info}}
				default:
					continue // still running
				}
				ends = append(ends, p)
			}
			out, err := s.EventAppendMany(ctx, ends)
			require.NoError(t, err)
			for _, r := range out {
				require.NoError(t, r.Err)
			}

			base := "/console/tasks/" + parentID.String()
			page := getPage(t, h, base)
			require.Contains(t, page, `<p id="children-summary">300 children: 250 completed, 30 failed, 20 under way</p>`)
			kids := panelChildren(t, page)
			require.Len(t, kids, childrenPageSize, "a page of children, not all 300")
			for i, c := range kids {
				require.Equal(t, i, c.Position)
				require.Equal(t, "completed", c.Status)
				require.Equal(t, res.IDs[i].String(), c.ID)
			}
			require.Contains(t, page, `<span class="muted" id="children-shown">1–50 of 300</span>`)
			require.Contains(t, page, `href="/console/tasks/`+parentID.String()+`?children_page=2&amp;namespace=default#task-children" rel="next"`)
			require.NotContains(t, page, `rel="prev"`)
			require.Contains(t, page, `hx-get="/console/tasks/`+parentID.String()+`?namespace=default"`, "the first page refreshes itself")

			// The last page: the failed ones with their errors, the running
			// ones with their rows' status.
			page = getPage(t, h, base+"?children_page=6")
			kids = panelChildren(t, page)
			require.Len(t, kids, 50)
			for i, c := range kids {
				pos := 250 + i
				require.Equal(t, pos, c.Position)
				if pos < completed+failed {
					require.Equal(t, "failed", c.Status, "child %d", pos)
					require.Equal(t, fmt.Sprintf("kid %d broke", pos), c.Error)
					require.True(t, c.Finished)
				} else {
					require.Equal(t, "running", c.Status, "child %d is read from its row", pos)
					require.Empty(t, c.Error)
					require.False(t, c.Finished)
				}
			}
			require.Contains(t, page, "251–300 of 300")
			require.Contains(t, page, `?children_page=5&amp;namespace=default#task-children" rel="prev"`)
			require.NotContains(t, page, `rel="next"`)
			require.Contains(t, page, `hx-get="/console/tasks/`+parentID.String()+`?namespace=default&amp;children_page=6"`,
				"the refresh stays on the page shown")
			page = getPage(t, h, base+"?children_page=99")
			require.Contains(t, page, "251–300 of 300", "a page past the last is the last")

			// Filtered: only the failed, only those under way.
			page = getPage(t, h, base+"?children=failed")
			kids = panelChildren(t, page)
			require.Len(t, kids, failed)
			for i, c := range kids {
				require.Equal(t, completed+i, c.Position)
				require.Equal(t, "failed", c.Status)
			}
			require.Contains(t, page, "1–30 of 30")
			require.Contains(t, page, `<strong aria-current="true">failed (30)</strong>`)
			require.Contains(t, page, `<a href="/console/tasks/`+parentID.String()+`?children=under_way&amp;namespace=default#task-children">under way (20)</a>`)
			require.Contains(t, page, `<a href="/console/tasks/`+parentID.String()+`?namespace=default#task-children">all 300</a>`)
			page = getPage(t, h, base+"?children=under_way")
			kids = panelChildren(t, page)
			require.Len(t, kids, n-completed-failed)
			for _, c := range kids {
				require.Equal(t, "running", c.Status)
			}
			page = getPage(t, h, base+"?children=bogus")
			require.Len(t, panelChildren(t, page), childrenPageSize, "an unknown filter shows all")

			// The axis: one children row, its ticks bucketed; the wait open.
			page = getPage(t, h, base)
			require.NotContains(t, page, `row-child `, "no bar per child")
			require.Equal(t, 1, strings.Count(page, `<div class="axis-row row-children `))
			require.Contains(t, page, `title="children (300)"`)
			require.Contains(t, page, "300 started, 250 completed, 30 failed, 20 under way")
			ticks := strings.Count(page, `class="mark child-`)
			require.Positive(t, ticks)
			require.LessOrEqual(t, ticks, 3*childAxisBuckets, "at most a tick per kind and slice of the axis")
			require.Contains(t, page, `<div class="axis-row row-wait waiting"><span class="name" title="wait 300 of 300 children">`)
		})
	}
}

// The axis of a big fan-out counts every child in its ticks, and a wait
// for children ends at the child_finished that makes its count.
func TestTimeAxisAggregatesChildren(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
	}
	seq := int64(3)
	const kids = 40
	positions := make([]int, kids)
	for i := range kids {
		positions[i] = i
		events = append(events, history.Event{Seq: seq, At: at(20), Attempt: 1, Data: history.ChildStartedData{Position: i, ChildID: uuid.NewString(), TaskType: "kid"}})
		seq++
	}
	events = append(events, history.Event{Seq: seq, At: at(30), Attempt: 1, Data: history.ChildWaitStartedData{Positions: positions, Count: 2}})
	seq++
	for i := range kids {
		st, info := history.StatusCompleted, (*history.ErrorInfo)(nil)
		if i%10 == 9 {
			st, info = history.StatusFailed, &history.ErrorInfo{Class: history.Permanent, Message: "no"}
		}
		id := events[2+i].Data.(history.ChildStartedData).ChildID
		events = append(events, history.Event{Seq: seq, At: at(100 + 10*i), Data: history.ChildFinishedData{Position: i, ChildID: id, Status: st, Error: info}})
		seq++
	}
	ax := buildTimeAxis(events, false, at(1000))
	var row, wait *axisRow
	for _, r := range ax.Rows {
		switch {
		case r.Kind == rowKids:
			require.Nil(t, row, "one children row")
			row = r
		case r.Kind == rowChild:
			t.Fatalf("a bar per child: %s", r.Label)
		case r.Kind == rowWait:
			wait = r
		}
	}
	require.NotNil(t, row)
	require.Equal(t, "children (40)", row.Label)
	require.Equal(t, blockFailed, row.Class, "a child failed")
	require.Equal(t, "40 started, 36 completed, 4 failed", row.Detail)
	counted := map[string]int{}
	for _, m := range row.Marks {
		k, err := strconv.Atoi(strings.Fields(m.Text)[0])
		require.NoError(t, err, m.Text)
		counted[m.Class] += k
	}
	require.Equal(t, map[string]int{"child-start": 40, "child-done": 36, "child-failed": 4}, counted)
	require.Equal(t, pct(20, 1000), row.Left)
	require.Equal(t, thousandth(pct(490, 1000)-pct(20, 1000)), row.Width, "to the last finish")

	require.NotNil(t, wait)
	require.Equal(t, "wait 2 of 40 children", wait.Label)
	require.Equal(t, rowSignalled, wait.Class)
	require.Equal(t, pct(30, 1000), wait.Left)
	require.Equal(t, thousandth(pct(110, 1000)-pct(30, 1000)), wait.Width, "ended by the second child to finish")
	require.Len(t, wait.Marks, 1)
	require.Contains(t, wait.Marks[0].Text, "child 1 completed")
}

// A parent of a big fan-out has two events per child: the page's table
// lists the first consoleEventRows and says how many more there are.
func TestTaskPageCapsItsEventTable(t *testing.T) {
	t.Parallel()
	events := []history.Event{
		{Seq: 1, At: at(0), Data: history.TaskScheduledData{TaskType: "doc", Queue: "default", RunAt: at(0)}},
		{Seq: 2, At: at(10), Attempt: 1, Data: history.AttemptStartedData{WorkerID: "w1", LeaseEpoch: 1}},
	}
	for i := range consoleEventRows + 498 {
		events = append(events, history.Event{Seq: int64(3 + i), At: at(20), Attempt: 1,
			Data: history.ChildStartedData{Position: i, ChildID: uuid.NewString(), TaskType: "kid"}})
	}
	listed, more := listedEvents(events)
	require.Len(t, listed, consoleEventRows)
	require.Equal(t, 500, more)
	short, none := listedEvents(events[:10])
	require.Len(t, short, 10)
	require.Zero(t, none)

	srv, _ := consoleServer(t)
	info := &sdk.TaskInfo{ID: uuid.New(), Status: history.StatusRunning, Type: "doc", Queue: "default"}
	data := &taskData{Task: info, Events: listed, MoreEvents: more, Axis: buildTimeAxis(events, false, at(100))}
	w := httptest.NewRecorder()
	srv.render(w, http.StatusOK, "task", &consolePage{Title: "Task", Page: "tasks", Namespace: "default", Data: data})
	require.Equal(t, http.StatusOK, w.Code)
	page := w.Body.String()
	require.Equal(t, consoleEventRows-2, strings.Count(page, "<td>child_started</td>"))
	require.Contains(t, page, `<p class="muted" id="more-events">500 later events are not listed;`)
}
