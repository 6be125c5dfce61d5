package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCompileEventFilterSaysWhereItFails(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		expr         string
		line, column int
		message      string
	}{
		{`event.type = "attempt_failed"`, 1, 12, "Syntax error"},
		{`event.type == "attempt_failed" &&` + "\n" + `  event.dta.error.status == 429`, 2, 8, "undefined field 'dta'"},
		{`task.queue == "docs" && nope`, 1, 25, "undeclared reference to 'nope'"},
		{`event.seq + 1`, 1, 11, "returns int; it must return a bool"},
		{`event.type == 429`, 1, 12, "no matching overload"},
	} {
		_, err := sdk.CompileEventFilter(tt.expr)
		require.True(t, errors.Is(err, sdk.ErrBadFilter), "%q: %v", tt.expr, err)
		var syntax *sdk.FilterSyntaxError
		require.True(t, errors.As(err, &syntax), "%q: %v", tt.expr, err)
		require.Equal(t, tt.expr, syntax.Expr)
		require.Equal(t, [2]int{tt.line, tt.column}, [2]int{syntax.Line, syntax.Column}, "%q: %v", tt.expr, err)
		require.Contains(t, syntax.Message, tt.message, tt.expr)
		require.ErrorContains(t, err, fmt.Sprintf("%d:%d", tt.line, tt.column))
	}
}

func TestCompileTaskFilterReturnsAFilterSyntaxError(t *testing.T) {
	t.Parallel()
	_, err := sdk.CompileTaskFilter("task.type == \"a\" &&\n error.stat == 503")
	var syntax *sdk.FilterSyntaxError
	require.True(t, errors.As(err, &syntax), "%v", err)
	require.True(t, errors.Is(err, sdk.ErrBadFilter))
	require.Equal(t, [2]int{2, 7}, [2]int{syntax.Line, syntax.Column}, "%v", err)
	require.Contains(t, syntax.Message, "undefined field 'stat'")
	require.ErrorContains(t, err, "2:7")
}

func TestEventFilterPrefilter(t *testing.T) {
	t.Parallel()
	failed := []history.Type{history.AttemptFailed}
	for _, tt := range []struct {
		expr string
		want sdk.EventPrefilter
	}{
		{`event.type == "attempt_failed" && event.data.error.status == 429`, sdk.EventPrefilter{EventTypes: failed}},
		{`"attempt_failed" == event.type`, sdk.EventPrefilter{EventTypes: failed}},
		{`event.type in ["task_failed", "attempt_failed", "task_failed"] && (task.type == "crm.sync" && task.queue == "q")`,
			sdk.EventPrefilter{EventTypes: []history.Type{history.AttemptFailed, history.TaskFailed}, TaskType: "crm.sync", Queue: "q"}},
		{`event.type in ["task_failed", "attempt_failed"] && event.type == "attempt_failed"`, sdk.EventPrefilter{EventTypes: failed}},
		{`event.type == "attempt_failed" && event.type == "task_failed"`, sdk.EventPrefilter{EventTypes: []history.Type{}, MatchesNothing: true}},
		{`task.type == "a" && event.attempt > 1 && task.type == "b"`, sdk.EventPrefilter{TaskType: "b", MatchesNothing: true}},
		{`event.type in []`, sdk.EventPrefilter{EventTypes: []history.Type{}, MatchesNothing: true}},
		// Not conjuncts of the whole expression, or not literals: nothing.
		{`event.type == "attempt_failed" || task.type == "a"`, sdk.EventPrefilter{}},
		{`!(event.type == "attempt_failed")`, sdk.EventPrefilter{}},
		{`event.type == task.type`, sdk.EventPrefilter{}},
		{`event.type in ["a", task.type]`, sdk.EventPrefilter{}},
		{`event.data.name == "ocr" && task.namespace == "x"`, sdk.EventPrefilter{}},
		{`true`, sdk.EventPrefilter{}},
	} {
		f, err := sdk.CompileEventFilter(tt.expr)
		require.NoError(t, err, tt.expr)
		require.Equal(t, tt.want, f.Prefilter(), tt.expr)
	}
}

// auditWorld is a schema with a few tasks whose histories an audit reads,
// built through the engine with event times in the past (base is two hours
// ago), a minute apart.
type auditWorld struct {
	store  store.Store
	client *sdk.Client
	base   time.Time
	ids    map[string]uuid.UUID
}

func newAuditWorld(t *testing.T) *auditWorld {
	t.Helper()
	pool, schema := enginetest.Pool(t), enginetest.Schema(t)
	client, err := sdk.NewClient(sdk.ClientConfig{Pool: pool, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return &auditWorld{store: sdk.ClientStore(client), client: client, base: time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second), ids: map[string]uuid.UUID{}}
}

func (w *auditWorld) minute(m int) time.Time { return w.base.Add(time.Duration(m) * time.Minute) }

// attempts starts a task and runs one attempt per entry of attempts,
// appending that entry's payloads at the given minute.
func (w *auditWorld) attempts(t *testing.T, name string, opts *enginetest.TaskOpts, attempts map[int][]history.Payload) {
	t.Helper()
	ctx := context.Background()
	id := enginetest.StartTask(t, w.store, opts)
	w.ids[name] = id
	p := opts.Params()
	for m := range 60 {
		payloads, ok := attempts[m]
		if !ok {
			continue
		}
		claimedRes, err := w.store.TaskClaim(ctx, &store.TaskClaimParams{
			Namespace: p.Namespace, Queues: []string{p.Scheduled.Queue}, Types: []store.TypeKey{opts.TypeKey()},
			Owner: "auditor", Max: 1, LeaseTTL: time.Hour,
		})
		claimed := claimedRes.Tasks
		require.NoError(t, err)
		require.Len(t, claimed, 1, "task %s at minute %d", name, m)
		ct := claimed[0]
		require.Equal(t, id, ct.Task.ID)
		_, err = w.store.EventAppend(ctx, &store.EventAppendParams{
			TaskID: id, State: ct.State, Epoch: ct.State.Lease.Epoch, Attempt: ct.State.Attempt, At: w.minute(m), Payloads: payloads,
		})
		require.NoError(t, err, "task %s at minute %d", name, m)
	}
}

func httpError(status int) history.ErrorInfo {
	return history.ErrorInfo{Class: history.Transient, Message: fmt.Sprintf("HTTP %d", status), Kind: "http", Status: status}
}

func retry(e history.ErrorInfo) history.Payload {
	past := time.Now().Add(-3 * time.Hour)
	return history.AttemptFailedData{Error: e, NextRunAt: &past}
}

// build writes the world the audit tests read:
//
//	sync1   crm.sync         429 (m0), 503 (m1), then a step and done (m2)
//	extract invoice.extract  queue docs, 429 and dead-lettered (m3)
//	other   crm.sync         namespace other: 429 (m4), done (m5)
//	ocr     invoice.extract  queue docs, step ocr with {"pages": 3}, done (m6)
//	timeout crm.sync         a failure without a status (m7), done (m8)
func (w *auditWorld) build(t *testing.T) {
	t.Helper()
	done := history.TaskCompletedData{Output: json.RawMessage(`{"ok":true}`)}
	w.attempts(t, "sync1", &enginetest.TaskOpts{Type: "crm.sync"}, map[int][]history.Payload{
		0: {retry(httpError(429))},
		1: {retry(httpError(503))},
		2: {history.StepCompletedData{Position: 0, Name: "push", Output: json.RawMessage(`{"pushed":12}`)}, done},
	})
	w.attempts(t, "extract", &enginetest.TaskOpts{Type: "invoice.extract", Queue: "docs"}, map[int][]history.Payload{
		3: {history.AttemptFailedData{Error: httpError(429)}, history.TaskDeadLetteredData{Reason: "retry budget used up", Error: httpError(429)}},
	})
	w.attempts(t, "other", &enginetest.TaskOpts{Type: "crm.sync", Namespace: "other"}, map[int][]history.Payload{
		4: {retry(httpError(429))},
		5: {done},
	})
	w.attempts(t, "ocr", &enginetest.TaskOpts{Type: "invoice.extract", Queue: "docs"}, map[int][]history.Payload{
		6: {history.StepCompletedData{Position: 0, Name: "ocr", Output: json.RawMessage(`{"pages":3,"lang":"de","scores":[0.5,1]}`)}, done},
	})
	w.attempts(t, "timeout", &enginetest.TaskOpts{Type: "crm.sync"}, map[int][]history.Payload{
		7: {retry(history.ErrorInfo{Class: history.Transient, Message: "step took too long", Kind: "start_to_close_timeout"})},
		8: {done},
	})
}

// eventKey names an event in assertions: task name and seq.
type eventKey struct {
	task string
	seq  int64
}

func (w *auditWorld) key(r sdk.AuditRecord) eventKey {
	for name, id := range w.ids {
		if id == r.Task.ID {
			return eventKey{name, r.Event.Seq}
		}
	}
	return eventKey{r.Task.ID.String(), r.Event.Seq}
}

// audit runs an audit over the whole world and returns what it handed out.
func (w *auditWorld) audit(t *testing.T, p sdk.AuditParams) ([]sdk.AuditRecord, error) {
	t.Helper()
	if p.Until.IsZero() {
		p.Until = time.Now().Add(time.Minute)
	}
	var out []sdk.AuditRecord
	err := w.client.Audit(context.Background(), p, func(r sdk.AuditRecord) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// keys returns the keys of records, nil for none.
func (w *auditWorld) keys(records []sdk.AuditRecord) []eventKey {
	var out []eventKey
	for _, r := range records {
		out = append(out, w.key(r))
	}
	return out
}

func mustEventFilter(t *testing.T, expr string) *sdk.EventFilter {
	t.Helper()
	f, err := sdk.CompileEventFilter(expr)
	require.NoError(t, err)
	return f
}

func TestAuditFiltersOnPayloadFields(t *testing.T) {
	t.Parallel()
	w := newAuditWorld(t)
	w.build(t)
	for _, tt := range []struct {
		expr string
		want []eventKey
	}{
		// seq: 1 scheduled, 2 started, 3 failed, 4 started, 5 failed, 6 started, 7 step, 8 completed.
		{`event.type == "attempt_failed" && event.data.error.status == 429`, []eventKey{{"sync1", 3}, {"extract", 3}}},
		{`event.type == "attempt_failed" && event.data.error.status >= 500`, []eventKey{{"sync1", 5}}},
		// A status left out of the stored JSON (omitempty) reads as 0.
		{`event.type == "attempt_failed" && event.data.error.status == 0`, []eventKey{{"timeout", 3}}},
		{`event.type == "attempt_failed" && event.data.error.kind == "start_to_close_timeout" && event.data.next_run_at != null`, []eventKey{{"timeout", 3}}},
		{`event.type == "attempt_failed" && event.data.next_run_at == null`, []eventKey{{"extract", 3}}},
		{`event.type == "step_completed" && event.data.name == "ocr" && event.data.output.pages == 3 && event.data.output.scores[0] == 0.5`, []eventKey{{"ocr", 3}}},
		{`event.type == "step_completed" && event.data.name.startsWith("pu")`, []eventKey{{"sync1", 7}}},
		{`task.type == "invoice.extract" && event.type in ["task_dead_lettered", "task_completed"]`, []eventKey{{"extract", 4}, {"ocr", 4}}},
		{`event.type == "task_dead_lettered" && event.data.reason.contains("budget") && task.status == "dead_lettered" && task.queue == "docs"`, []eventKey{{"extract", 4}}},
		{`event.attempt == 3 && event.type == "task_completed"`, []eventKey{{"sync1", 8}}},
		{fmt.Sprintf(`event.type == "task_completed" && event.at < timestamp(%q)`, w.minute(5).Format(time.RFC3339)), []eventKey{{"sync1", 8}}},
		{`event.type == "attempt_failed" && event.type == "task_failed"`, nil},
	} {
		records, err := w.audit(t, sdk.AuditParams{Filter: mustEventFilter(t, tt.expr)})
		require.NoError(t, err, tt.expr)
		require.Equal(t, tt.want, w.keys(records), tt.expr)
	}
}

func TestAuditRecords(t *testing.T) {
	t.Parallel()
	w := newAuditWorld(t)
	w.build(t)
	records, err := w.audit(t, sdk.AuditParams{Filter: mustEventFilter(t, `event.type == "task_dead_lettered"`)})
	require.NoError(t, err)
	require.Len(t, records, 1)
	r := records[0]
	require.Equal(t, sdk.AuditTask{ID: w.ids["extract"], Namespace: "default", Type: "invoice.extract", Version: 1, Queue: "docs", Status: history.StatusDeadLettered}, r.Task)
	require.Equal(t, history.TaskDeadLettered, r.Event.Type)
	require.True(t, w.minute(3).Equal(r.Event.At), "at %s", r.Event.At)
	require.Equal(t, 1, r.Event.Attempt)
	require.Equal(t, "retry budget used up", r.Event.Payload.(history.TaskDeadLetteredData).Reason)

	line, err := json.Marshal(r)
	require.NoError(t, err)
	var decoded map[string]map[string]any
	require.NoError(t, json.Unmarshal(line, &decoded), "%s", line)
	require.Equal(t, "task_dead_lettered", decoded["event"]["type"])
	require.Equal(t, float64(429), decoded["event"]["data"].(map[string]any)["error"].(map[string]any)["status"], "%s", line)
	require.Equal(t, w.ids["extract"].String(), decoded["task"]["id"])
	require.Equal(t, "invoice.extract", decoded["task"]["type"])
	require.NotContains(t, decoded["task"], "trace_id", "empty optional fields are left out")
}

// TestAuditPrefilterOnlyNarrows: an audit with a filter hands out exactly
// the events that an audit of everything hands out and the filter matches;
// the database's share of the filtering changes nothing.
func TestAuditPrefilterOnlyNarrows(t *testing.T) {
	t.Parallel()
	w := newAuditWorld(t)
	w.build(t)
	all, err := w.audit(t, sdk.AuditParams{})
	require.NoError(t, err)
	require.Len(t, all, 8+4+4+5, "the events of the default namespace")
	for _, expr := range []string{
		`event.type == "attempt_failed" && event.data.error.status == 429`,
		`event.type in ["attempt_failed", "task_dead_lettered"] && event.data.error.status == 429`,
		`task.type == "crm.sync" && event.type == "attempt_failed"`,
		`task.queue == "docs" && event.attempt >= 1`,
		`task.queue == "docs" && task.type == "invoice.extract" && event.type in ["step_completed", "task_completed"]`,
		`event.type == "attempt_failed" && task.type == "nope"`,
		`event.type == "task_completed" || event.data.error.status == 503`,
		// Errors where the payload has no error: the same events fail
		// either way, as false && error is false in CEL.
		`event.data.error.status == 429`,
		`event.type == "attempt_failed" && event.data.error.status == 429 && event.data.error.attrs["region"] == "eu"`,
	} {
		f := mustEventFilter(t, expr)
		var want []eventKey
		var wantErr bool
		for _, r := range all {
			ok, err := f.Match(&r)
			wantErr = wantErr || err != nil
			if ok {
				want = append(want, w.key(r))
			}
		}
		got, err := w.audit(t, sdk.AuditParams{Filter: f})
		require.Equal(t, want, w.keys(got), expr)
		require.Equal(t, wantErr, err != nil, "%s: %v", expr, err)
	}
}

func TestAuditReportsEventsTheFilterFailsOn(t *testing.T) {
	t.Parallel()
	w := newAuditWorld(t)
	w.build(t)
	records, err := w.audit(t, sdk.AuditParams{Filter: mustEventFilter(t, `event.data.error.status == 429`)})
	require.Equal(t, []eventKey{{"sync1", 3}, {"extract", 3}, {"extract", 4}}, w.keys(records), "the events it could decide on")
	require.ErrorContains(t, err, "the filter failed on 16 event(s)")
	require.ErrorContains(t, err, "no such key: error")
	require.Contains(t, errors.FlattenHints(err), `has(event.data.error)`)
}

func TestAuditTimeRangeLimitAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newAuditWorld(t)
	w.build(t)
	failures := mustEventFilter(t, `event.type == "attempt_failed"`)

	records, err := w.audit(t, sdk.AuditParams{Filter: failures, Since: w.minute(1), Until: w.minute(7)})
	require.NoError(t, err)
	require.Equal(t, []eventKey{{"sync1", 5}, {"extract", 3}}, w.keys(records), "since included, until not")

	records, err = w.audit(t, sdk.AuditParams{Filter: failures, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []eventKey{{"sync1", 3}, {"sync1", 5}}, w.keys(records))

	calls := 0
	stop := errors.New("enough")
	err = w.client.Audit(ctx, sdk.AuditParams{Until: time.Now()}, func(sdk.AuditRecord) error {
		if calls++; calls == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 3, calls)

	err = w.client.Audit(ctx, sdk.AuditParams{Since: w.minute(2), Until: w.minute(1)}, func(sdk.AuditRecord) error { return nil })
	require.ErrorContains(t, err, "is not before until")

	other, err := sdk.NewClient(sdk.ClientConfig{Store: w.store, Namespace: "other"})
	require.NoError(t, err)
	defer other.Close()
	var theirs []sdk.AuditRecord
	require.NoError(t, other.Audit(ctx, sdk.AuditParams{Filter: failures}, func(r sdk.AuditRecord) error {
		theirs = append(theirs, r)
		return nil
	}))
	require.Equal(t, []eventKey{{"other", 3}}, w.keys(theirs), "an audit sees its client's namespace only")
}

// TestAuditPagesThroughDenseAndSparseTime: thousands of events at one
// instant (more than a page) and events hours apart come out complete and
// in order, the same as one big scan returns them.
func TestAuditPagesThroughDenseAndSparseTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newAuditWorld(t)
	batch := make([]*store.TaskStartParams, 2300)
	for i := range batch {
		batch[i] = (&enginetest.TaskOpts{Type: "batch"}).Params()
	}
	_, err := w.store.TaskStartMany(ctx, batch)
	require.NoError(t, err)
	for i := range 40 {
		w.attempts(t, fmt.Sprint("sparse", i), nil, map[int][]history.Payload{
			i: {history.StepCompletedData{Position: 0, Name: "s"}},
		})
	}
	until := time.Now().Add(time.Minute)
	want, err := w.store.EventScan(ctx, &store.EventScanParams{Namespace: "default", Until: until, Limit: store.MaxEventScanLimit})
	require.NoError(t, err)
	require.Len(t, want, 2300+40*3)

	got, err := w.audit(t, sdk.AuditParams{Until: until})
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, [2]any{want[i].TaskID, want[i].Event.Seq}, [2]any{got[i].Task.ID, got[i].Event.Seq}, "record %d", i)
	}

	limited, err := w.audit(t, sdk.AuditParams{Until: until, Limit: 2050})
	require.NoError(t, err)
	require.Equal(t, got[:2050], limited)
}
