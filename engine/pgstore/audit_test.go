package pgstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// auditTimeline builds, in a fresh schema, tasks whose later events have
// known times: each task is claimed and given one step_completed at its
// own minute after base (an hour from now, so every task_scheduled and
// attempt_started comes before base).
type auditTimeline struct {
	s    *pgstore.Store
	base time.Time
}

func newAuditTimeline(t *testing.T) *auditTimeline {
	return &auditTimeline{s: enginetest.Store(t), base: plan.Now(nil).Add(time.Hour).Truncate(time.Minute)}
}

// minute is the time of the step of the task built with that minute.
func (tl *auditTimeline) minute(m int) time.Time { return tl.base.Add(time.Duration(m) * time.Minute) }

// task starts a task of opts, claims it and appends its step at minute m.
func (tl *auditTimeline) task(t *testing.T, opts *enginetest.TaskOpts, m int) uuid.UUID {
	t.Helper()
	id := enginetest.StartTask(t, tl.s, opts)
	p := opts.Params()
	claimed := enginetest.Claim(t, tl.s, &store.TaskClaimParams{
		Namespace: p.Namespace, Queues: []string{p.Scheduled.Queue}, Types: []store.TypeKey{opts.TypeKey()},
		Owner: "auditor", Max: 1, LeaseTTL: time.Hour,
	})
	require.Len(t, claimed, 1)
	require.Equal(t, id, claimed[0].Task.ID)
	ct := claimed[0]
	_, err := tl.s.EventAppend(context.Background(), &store.EventAppendParams{
		TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt, At: tl.minute(m),
		Payloads: []history.Payload{history.StepCompletedData{Position: 0, Name: "step" + strconv.Itoa(m), Output: json.RawMessage(`{"m":` + strconv.Itoa(m) + `}`)}},
	})
	require.NoError(t, err)
	return id
}

func scan(t *testing.T, s *pgstore.Store, p store.EventScanParams) []store.AuditEvent {
	t.Helper()
	if p.Namespace == "" {
		p.Namespace = store.DefaultNamespace
	}
	page, err := s.EventScan(context.Background(), &p)
	require.NoError(t, err)
	return page
}

// stepTasks returns the task ids of the step_completed events of page, in
// order.
func stepTasks(page []store.AuditEvent) []uuid.UUID {
	var out []uuid.UUID
	for _, e := range page {
		if e.Event.Type() == history.StepCompleted {
			out = append(out, e.TaskID)
		}
	}
	return out
}

// requireScanOrder checks that page is strictly ordered by (at, task id,
// seq).
func requireScanOrder(t *testing.T, page []store.AuditEvent) {
	t.Helper()
	for i := 1; i < len(page); i++ {
		require.Negative(t, compareCursor(page[i-1].Cursor(), page[i].Cursor()), "event %d before event %d", i-1, i)
	}
}

func compareCursor(a, b store.EventCursor) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	if c := bytes.Compare(a.TaskID[:], b.TaskID[:]); c != 0 {
		return c
	}
	return int(a.Seq - b.Seq)
}

func TestEventScan(t *testing.T) {
	t.Parallel()

	t.Run("TimeRangeIsHalfOpen", func(t *testing.T) {
		t.Parallel()
		tl := newAuditTimeline(t)
		ids := make([]uuid.UUID, 4)
		for m := range ids {
			ids[m] = tl.task(t, nil, m)
		}
		require.Equal(t, ids[1:3], stepTasks(scan(t, tl.s, store.EventScanParams{Since: tl.minute(1), Until: tl.minute(3)})),
			"since is included, until is not")
		require.Empty(t, scan(t, tl.s, store.EventScanParams{Since: tl.minute(4), Until: tl.minute(60)}))

		all := scan(t, tl.s, store.EventScanParams{Until: tl.minute(60)})
		require.Len(t, all, 12, "task_scheduled, attempt_started and step_completed of each task, from the first event on")
		requireScanOrder(t, all)
		require.Equal(t, ids, stepTasks(all))

		before := scan(t, tl.s, store.EventScanParams{Until: tl.base})
		require.Len(t, before, 8)
		for _, e := range before {
			require.NotEqual(t, history.StepCompleted, e.Event.Type())
		}
	})

	t.Run("CarriesTheEventAndItsTask", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "ns", Scheduled: history.TaskScheduledData{
			TaskType: "invoice.extract", TypeVersion: 3, Queue: "docs", TraceID: "trace-9",
			Labels: map[string]string{"team": "ap"}, FairnessKey: "tenant-7", Input: json.RawMessage(`{"doc":1}`),
		}})
		require.NoError(t, err)
		page := scan(t, s, store.EventScanParams{Namespace: "ns", Until: plan.Now(nil).Add(time.Minute)})
		require.Len(t, page, 1)
		e := page[0]
		require.Equal(t, res.ID, e.TaskID)
		require.Equal(t, int64(1), e.Event.Seq)
		require.Equal(t, history.TaskScheduled, e.Event.Type())
		require.Equal(t, "invoice.extract", e.Event.Data.(history.TaskScheduledData).TaskType)
		require.Equal(t, time.UTC, e.Event.At.Location())
		stored := enginetest.Events(t, s, res.ID)[0]
		require.True(t, stored.At.Equal(e.Event.At))
		var data map[string]any
		require.NoError(t, json.Unmarshal(e.Data, &data), "%s", e.Data)
		require.Equal(t, "docs", data["queue"])
		require.Equal(t, float64(1), data["v"], "the stored payload, version included")
		require.Equal(t, store.AuditEvent{
			TaskID: res.ID, Event: e.Event, Data: e.Data,
			Namespace: "ns", TaskType: "invoice.extract", TypeVersion: 3, Queue: "docs", Status: history.StatusPending,
			TraceID: "trace-9", Labels: map[string]string{"team": "ap"}, FairnessKey: "tenant-7",
		}, e)
	})

	t.Run("FiltersByEventTypeTaskTypeAndQueue", func(t *testing.T) {
		t.Parallel()
		tl := newAuditTimeline(t)
		a := tl.task(t, &enginetest.TaskOpts{Type: "a", Queue: "q1"}, 0)
		b := tl.task(t, &enginetest.TaskOpts{Type: "b", Queue: "q1"}, 1)
		c := tl.task(t, &enginetest.TaskOpts{Type: "a", Queue: "q2"}, 2)
		until := tl.minute(10)
		typesOf := func(page []store.AuditEvent) map[history.Type]int {
			out := map[history.Type]int{}
			for _, e := range page {
				out[e.Event.Type()]++
			}
			return out
		}
		steps := scan(t, tl.s, store.EventScanParams{Until: until, EventTypes: []history.Type{history.StepCompleted}})
		require.Equal(t, []uuid.UUID{a, b, c}, stepTasks(steps))
		require.Len(t, steps, 3)
		two := scan(t, tl.s, store.EventScanParams{Until: until, EventTypes: []history.Type{history.TaskScheduled, history.StepCompleted}})
		require.Equal(t, map[history.Type]int{history.TaskScheduled: 3, history.StepCompleted: 3}, typesOf(two))

		require.Equal(t, []uuid.UUID{a, c}, stepTasks(scan(t, tl.s, store.EventScanParams{Until: until, TaskType: "a"})))
		require.Equal(t, []uuid.UUID{a, b}, stepTasks(scan(t, tl.s, store.EventScanParams{Until: until, Queue: "q1"})))
		both := scan(t, tl.s, store.EventScanParams{Until: until, TaskType: "a", Queue: "q2"})
		require.Len(t, both, 3)
		for _, e := range both {
			require.Equal(t, c, e.TaskID)
		}
		require.Empty(t, scan(t, tl.s, store.EventScanParams{Until: until, TaskType: "nope"}))
		require.Empty(t, scan(t, tl.s, store.EventScanParams{Until: until, EventTypes: []history.Type{history.TaskCompleted}}))
	})

	t.Run("PagesByCursor", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		tl := newAuditTimeline(t)
		// Ties on at: a batch start writes all its task_scheduled at one
		// time, so the order among them is the task id's.
		batch := make([]*store.TaskStartParams, 17)
		for i := range batch {
			batch[i] = (&enginetest.TaskOpts{Type: "batch"}).Params()
		}
		_, err := tl.s.TaskStartMany(ctx, batch)
		require.NoError(t, err)
		for m := range 5 {
			tl.task(t, nil, m%2) // steps share minutes too
		}
		until := tl.minute(10)
		want := scan(t, tl.s, store.EventScanParams{Until: until})
		require.Len(t, want, 17+3*5)
		requireScanOrder(t, want)

		for _, size := range []int{1, 4, 7, 32, 33} {
			var got []store.AuditEvent
			p := store.EventScanParams{Until: until, Limit: size}
			for {
				page := scan(t, tl.s, p)
				require.LessOrEqual(t, len(page), size)
				got = append(got, page...)
				if len(page) < size {
					break
				}
				cursor := page[len(page)-1].Cursor()
				p.After = &cursor
			}
			require.Equal(t, want, got, "pages of %d", size)
		}

		// A cursor before Since does not widen the range.
		first := want[0].Cursor()
		narrow := scan(t, tl.s, store.EventScanParams{Since: tl.minute(1), Until: until, After: &first})
		require.Len(t, narrow, 2, "the two steps at minute 1")
	})

	t.Run("KeepsNamespacesApart", func(t *testing.T) {
		t.Parallel()
		tl := newAuditTimeline(t)
		mine := tl.task(t, &enginetest.TaskOpts{Namespace: "mine"}, 0)
		theirs := tl.task(t, &enginetest.TaskOpts{Namespace: "theirs"}, 0)
		for ns, id := range map[string]uuid.UUID{"mine": mine, "theirs": theirs} {
			page := scan(t, tl.s, store.EventScanParams{Namespace: ns, Until: tl.minute(10)})
			require.Len(t, page, 3, "namespace %s", ns)
			for _, e := range page {
				require.Equal(t, id, e.TaskID, "namespace %s", ns)
				require.Equal(t, ns, e.Namespace)
			}
		}
		require.Empty(t, scan(t, tl.s, store.EventScanParams{Namespace: "nobody", Until: tl.minute(10)}))
	})

	t.Run("RefusesBadParams", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		until := time.Now()
		for name, p := range map[string]store.EventScanParams{
			"namespace is empty":       {Until: until},
			"Until is required":        {Namespace: "ns"},
			"limit 10001":              {Namespace: "ns", Until: until, Limit: store.MaxEventScanLimit + 1},
			"limit -1: use 1 to 10000": {Namespace: "ns", Until: until, Limit: -1},
		} {
			_, err := s.EventScan(context.Background(), &p)
			require.ErrorContains(t, err, name)
		}
	})

	t.Run("TimeRangeHasABRINIndex", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		var def string
		err := s.Pool().QueryRow(context.Background(),
			"SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'events' AND indexname = 'events_at_brin_idx'",
			s.Schema()).Scan(&def)
		require.NoError(t, err)
		require.Contains(t, def, "USING brin (at)")
	})
}
