package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// builtEvent is one event of a hand-built history, ago before the
// database's now.
type builtEvent struct {
	typ     string
	ago     float64 // seconds
	attempt int
	data    string // JSON fields after "v"
}

// builtTask is a task of a hand-built history: a projection row and its
// events, with times relative to the database's now.
type builtTask struct {
	queue, typ, status string
	runAgo             float64 // seconds; negative: in the future
	attempt            int
	owner, key         string
	events             []builtEvent
}

// insertHistory writes tasks straight into the tables, in one transaction
// (one now()), so a test knows every time exactly. The projections are not
// meant to match a replay: the diagnosis reads events and a few columns.
func insertHistory(t *testing.T, s *engine.PGStore, tasks ...builtTask) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		for _, task := range tasks {
			if err := insertBuiltTask(ctx, tx, s, task); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func insertBuiltTask(ctx context.Context, tx pgx.Tx, s *engine.PGStore, task builtTask) error {
	id := uuid.Must(uuid.NewV7())
	var lease any
	if task.owner != "" {
		lease = 30.0 // seconds from now
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+tableName(s, "tasks")+` (id, namespace, queue, type, type_version, status,
		    run_at, attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at, last_seq, created_at, updated_at,
		    fair_at, fairness_key)
		VALUES (@id, 'default', @queue, @type, 1, @status, now() - make_interval(secs => @run_ago), @attempt, 0,
		    nullif(@owner, ''), @epoch, now() + make_interval(secs => @lease), @last_seq,
		    now() - make_interval(secs => @created_ago), now(), now() - make_interval(secs => @run_ago), nullif(@key, ''))`,
		pgx.NamedArgs{"id": id, "queue": task.queue, "type": task.typ, "status": task.status, "run_ago": task.runAgo,
			"attempt": task.attempt, "epoch": task.attempt, "owner": task.owner, "lease": lease, "last_seq": len(task.events),
			"created_ago": task.events[0].ago, "key": task.key})
	if err != nil {
		return err
	}
	for i, e := range task.events {
		data := `{"v":1` + map[bool]string{true: "," + e.data, false: ""}[e.data != ""] + `}`
		_, err := tx.Exec(ctx, `INSERT INTO `+tableName(s, "events")+` (task_id, seq, type, at, attempt, data)
			VALUES (@id, @seq, @type, now() - make_interval(secs => @ago), @attempt, @data::jsonb)`,
			pgx.NamedArgs{"id": id, "seq": i + 1, "type": e.typ, "ago": e.ago, "attempt": e.attempt, "data": data})
		if err != nil {
			return err
		}
	}
	return nil
}

func started(ago float64, attempt int, worker string) builtEvent {
	return builtEvent{"attempt_started", ago, attempt, fmt.Sprintf(`"worker_id":%q,"lease_epoch":%d`, worker, attempt)}
}

func scheduled(ago float64) builtEvent { return builtEvent{typ: "task_scheduled", ago: ago} }

// The numbers of a diagnosis over a history built by hand, with a window of
// 20s: "then" is 20s to 10s ago, "now" the last 10s.
func TestQueueDiagnoseMeasuresHandBuiltHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	require.NoError(t, s.QueueSet(ctx, engine.QueueConfig{Namespace: "default", Name: "docs", Concurrency: 4}))
	require.NoError(t, s.RateLimitSet(ctx, "default", "ocr", 10, time.Second))
	require.NoError(t, s.RateLimitSet(ctx, "default", "unrelated", 1, time.Second))
	timeout := `"error":{"class":"transient","kind":"timeout","status":504,"step":"read","message":"ocr timed out"},"next_run_at":"2030-01-01T00:00:00Z"`
	insertHistory(t, s,
		// Completed then: one attempt of 500ms with a step of 200ms.
		builtTask{queue: "docs", typ: "ocr", status: "completed", runAgo: 18, attempt: 1, events: []builtEvent{
			scheduled(18), started(17.5, 1, "w1"), {"step_completed", 17.3, 1, `"position":0,"name":"read"`},
			{"task_completed", 17.0, 1, ""}}},
		// Failed (100ms) then, retried then, completed now after 6s.
		builtTask{queue: "docs", typ: "ocr", status: "completed", runAgo: 15, attempt: 2, events: []builtEvent{
			scheduled(15), started(15, 1, "w2"), {"attempt_failed", 14.9, 1, timeout},
			started(12, 2, "w1"), {"step_completed", 6, 2, `"position":0,"name":"read"`}, {"task_completed", 6, 2, ""}}},
		// A durable sleep: the second attempt is no retry.
		builtTask{queue: "docs", typ: "remind", status: "completed", runAgo: 18, attempt: 2, events: []builtEvent{
			scheduled(18), started(18, 1, "w1"), {"timer_started", 17.9, 1, `"position":0,"fire_at":"2030-01-01T00:00:00Z"`},
			started(4, 2, "w1"), {"task_completed", 3.9, 2, ""}}},
		// Dead-lettered now: attempt_failed and task_dead_lettered end one attempt.
		builtTask{queue: "docs", typ: "ocr", status: "dead_lettered", runAgo: 9.5, attempt: 1, events: []builtEvent{
			scheduled(9.5), started(9, 1, "w3"),
			{"attempt_failed", 8.5, 1, `"error":{"class":"permanent","kind":"bad_document","message":"not a PDF"}`},
			{"task_dead_lettered", 8.5, 1, `"reason":"permanent error"`}}},
		// Waiting: two due, one not yet due.
		builtTask{queue: "docs", typ: "ocr", status: "pending", runAgo: 8, key: "tenant-a", events: []builtEvent{scheduled(8)}},
		builtTask{queue: "docs", typ: "ocr", status: "pending", runAgo: 5, key: "tenant-a", events: []builtEvent{scheduled(5)}},
		builtTask{queue: "docs", typ: "mail", status: "pending", runAgo: -60, key: "tenant-b", events: []builtEvent{scheduled(2)}},
		// Running, by w3.
		builtTask{queue: "docs", typ: "ocr", status: "running", runAgo: 9, attempt: 1, owner: "w3", events: []builtEvent{
			scheduled(9), started(1, 1, "w3")}},
		// Out of the window, and out of the queue: not counted.
		builtTask{queue: "docs", typ: "ocr", status: "completed", runAgo: 100, attempt: 1, events: []builtEvent{
			scheduled(100), started(100, 1, "w9"), {"task_completed", 99, 1, ""}}},
		builtTask{queue: "other", typ: "ocr", status: "completed", runAgo: 5, attempt: 1, events: []builtEvent{
			scheduled(5), started(5, 1, "w8"), {"task_completed", 4, 1, ""}}},
	)

	d, err := s.QueueDiagnose(ctx, &engine.QueueDiagnoseParams{Namespace: "default", Queue: "docs", Window: 20 * time.Second})
	require.NoError(t, err)
	require.Equal(t, engine.Millis(20000), d.Window)
	require.Equal(t, 10*time.Second, d.Now.To.Sub(d.Now.From))
	require.Equal(t, d.Then.To, d.Now.From)

	then := d.Then
	require.Equal(t, []int{3, 1, 1, 4, 1, 1, 0}, []int{then.Inflow, then.Outflow, then.Completed, then.AttemptsStarted,
		then.Retries, then.AttemptsFailed, then.LeasesExpired}, "inflow, outflow, completed, started, retries, failed, expired then")
	require.Equal(t, []string{"w1", "w2"}, then.WorkerIDs)
	require.Equal(t, 2, then.Workers)
	require.InDelta(t, 0.25, then.RetryShare, 1e-9)
	requireDurations(t, engine.DurationStats{Count: 3, Mean: 700.0 / 3, P50: 100, P95: 460}, then.Attempts, "attempts then: 500, 100, 100 ms")
	require.Len(t, then.Types, 2)
	ocr := then.Types[0]
	require.Equal(t, "ocr", ocr.Type)
	require.Equal(t, []int{2, 1, 3, 1, 1}, []int{ocr.Inflow, ocr.Outflow, ocr.AttemptsStarted, ocr.Retries, ocr.AttemptsFailed})
	requireDurations(t, engine.DurationStats{Count: 2, Mean: 300, P50: 300, P95: 480}, ocr.Attempts, "ocr attempts then")
	require.Equal(t, "remind", then.Types[1].Type)
	require.Len(t, then.Steps, 1)
	require.Equal(t, "read", then.Steps[0].Step)
	requireDurations(t, engine.DurationStats{Count: 1, Mean: 200, P50: 200, P95: 200}, then.Steps[0].Duration, "step read then")
	require.Equal(t, []engine.ErrorStats{{Type: "ocr", Class: "transient", Kind: "timeout", Status: 504, Step: "read", Count: 1,
		Message: "ocr timed out"}}, then.Errors)

	now := d.Now
	require.Equal(t, []int{5, 3, 2, 3, 0, 1, 0}, []int{now.Inflow, now.Outflow, now.Completed, now.AttemptsStarted,
		now.Retries, now.AttemptsFailed, now.LeasesExpired}, "inflow, outflow, completed, started, retries, failed, expired now")
	require.Equal(t, []string{"w1", "w3"}, now.WorkerIDs)
	requireDurations(t, engine.DurationStats{Count: 3, Mean: 6600.0 / 3, P50: 500, P95: 5450}, now.Attempts, "attempts now: 6000, 100, 500 ms")
	require.Len(t, now.Steps, 1)
	requireDurations(t, engine.DurationStats{Count: 1, Mean: 6000, P50: 6000, P95: 6000}, now.Steps[0].Duration,
		"step read now: from its attempt's start")
	require.Equal(t, []engine.ErrorStats{{Type: "ocr", Class: "permanent", Kind: "bad_document", Count: 1, Message: "not a PDF"}}, now.Errors)

	require.Equal(t, engine.QueueDepth{Pending: 3, Running: 1, Due: 2, OldestWait: d.Depth.OldestWait,
		SinceLastStart: d.Depth.SinceLastStart}, d.Depth)
	require.InDelta(t, 8000, float64(d.Depth.OldestWait), 1000, "the oldest due task was due 8s before the diagnosis")
	require.InDelta(t, 1000, float64(d.Depth.SinceLastStart), 1000, "the last attempt started 1s before the diagnosis")
	require.Equal(t, engine.QueueLimits{Concurrency: 4, RateLimits: []engine.RateLimit{{Type: "ocr", MaxStarts: 10, Per: 1000}}}, d.Limits)
	require.Len(t, d.WaitingByType, 2)
	require.Equal(t, []any{"ocr", 2, 2, true}, []any{d.WaitingByType[0].Type, d.WaitingByType[0].Waiting, d.WaitingByType[0].Due, d.WaitingByType[0].Served})
	require.Equal(t, []any{"mail", 1, 0, false}, []any{d.WaitingByType[1].Type, d.WaitingByType[1].Waiting, d.WaitingByType[1].Due, d.WaitingByType[1].Served})
	require.InDelta(t, 2.0/3, d.WaitingByType[0].Share, 1e-9)
	require.Equal(t, []engine.WaitingKey{{Key: "tenant-a", Waiting: 2, Share: 2.0 / 3}, {Key: "tenant-b", Waiting: 1, Share: 1.0 / 3}}, d.WaitingByKey)
	require.Equal(t, 2, d.FairnessKeys)

	// A due task has waited 8s of a 20s window, but nothing explains it.
	require.Empty(t, d.Causes)
	require.False(t, d.Healthy)
	require.Contains(t, d.Summary, "backing up")
}

func requireDurations(t *testing.T, want, got engine.DurationStats, what string) {
	t.Helper()
	require.Equal(t, want.Count, got.Count, what)
	for _, v := range [][2]engine.Millis{{want.Mean, got.Mean}, {want.P50, got.P50}, {want.P95, got.P95}} {
		require.InDelta(t, float64(v[0]), float64(v[1]), 0.01, "%s: want %+v, got %+v", what, want, got)
	}
}

// A queue with no history at all: a healthy diagnosis whose lists are
// empty, never null, in JSON.
func TestQueueDiagnoseOfAnEmptyQueue(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	d, err := s.QueueDiagnose(context.Background(), &engine.QueueDiagnoseParams{Namespace: "default", Queue: "idle", Window: time.Minute})
	require.NoError(t, err)
	require.True(t, d.Healthy)
	require.Empty(t, d.Causes)
	require.True(t, strings.HasPrefix(d.Summary, "healthy"), d.Summary)
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	for _, key := range []string{`"causes":[]`, `"worker_ids":[]`, `"waiting_by_type":[]`, `"waiting_by_fairness_key":[]`,
		`"rate_limits":[]`, `"window_ms":60000`, `"oldest_wait_ms":0`, `"retry_share":0`, `"since_last_start_ms":60000`} {
		require.Contains(t, string(raw), key)
	}
	require.NotContains(t, string(raw), "null")
}

func TestQueueDiagnoseRefusesBadParams(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	ctx := context.Background()
	for _, p := range []*engine.QueueDiagnoseParams{
		nil,
		{Namespace: "default", Window: time.Minute},
		{Namespace: "default", Queue: "q", Window: time.Second},
		{Namespace: "default", Queue: "q", Window: 25 * time.Hour},
	} {
		_, err := s.QueueDiagnose(ctx, p)
		require.Error(t, err, "%+v", p)
	}
	_, err := s.QueueDiagnose(ctx, &engine.QueueDiagnoseParams{Namespace: "default", Queue: "q", Window: time.Second})
	require.ErrorContains(t, err, "window 1s must be between 2s and 24h0m0s")
}

// measured returns a diagnosis of a 2-minute window whose halves and depth
// are set by the caller, as if read from the database.
func measured(edit func(d *engine.QueueDiagnosis)) *engine.QueueDiagnosis {
	d := &engine.QueueDiagnosis{Namespace: "default", Queue: "q", Window: 120_000}
	edit(d)
	for _, h := range []*engine.DiagnosisHalf{&d.Then, &d.Now} {
		h.Workers = len(h.WorkerIDs)
		if h.AttemptsStarted > 0 {
			h.RetryShare = float64(h.Retries) / float64(h.AttemptsStarted)
		}
	}
	return d
}

func steadyHalf(workers ...string) engine.DiagnosisHalf {
	return engine.DiagnosisHalf{Inflow: 100, Outflow: 100, Completed: 100, AttemptsStarted: 100, WorkerIDs: workers,
		Types: []engine.TypeStats{{Type: "ocr", Inflow: 100, Outflow: 100, AttemptsStarted: 100,
			Attempts: engine.DurationStats{Count: 100, Mean: 100, P50: 100, P95: 150}}}}
}

// The heuristics on made-up measurements: each picture names its cause
// first, with the numbers in the evidence.
func TestFindCausesRanksTheLikelyCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		d        *engine.QueueDiagnosis
		code     string
		evidence string // a line of the top cause's evidence contains it
	}{
		{"every worker gone", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1", "w2", "w3"), engine.DiagnosisHalf{Inflow: 100}
			d.Depth = engine.QueueDepth{Pending: 100, Due: 100, OldestWait: 60_000}
		}), engine.CauseLostConsumers, "live workers: 3 then, 0 now"},
		{"the last worker stopped late in the window", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.WaitingByType = []engine.WaitingType{{Type: "ocr", Version: 1, Waiting: 30, Due: 30, OldestWait: 9_000, Served: true}}
			d.Depth = engine.QueueDepth{Pending: 30, Due: 30, OldestWait: 9_000, SinceLastStart: 10_000}
		}), engine.CauseLostConsumers, "last attempt started 10s ago; running now: 0"},
		{"some workers gone", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1", "w2", "w3"), steadyHalf("w1")
			d.Now.Outflow = 40
			d.Depth = engine.QueueDepth{Pending: 60, Due: 60, OldestWait: 20_000}
		}), engine.CauseLostConsumers, "workers seen then but not now: w2, w3"},
		{"a poison type", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.AttemptsStarted, d.Now.Retries = 300, 200
			d.Now.Types = append(d.Now.Types, engine.TypeStats{Type: "pdf.parse", AttemptsStarted: 200, Retries: 200, AttemptsFailed: 200})
			d.Now.Errors = []engine.ErrorStats{{Type: "pdf.parse", Class: "transient", Kind: "upstream", Status: 503, Count: 200, Message: "503"}}
		}), engine.CausePoisonRetries, "most common failure of pdf.parse: transient kind upstream status 503, 200 times"},
		{"slower attempts", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Outflow, d.Now.Types[0].Attempts = 30, engine.DurationStats{Count: 30, Mean: 900, P50: 900, P95: 1200}
			d.Then.Steps = []engine.StepStats{{Type: "ocr", Step: "read", Duration: engine.DurationStats{Count: 100, P50: 80}}}
			d.Now.Steps = []engine.StepStats{{Type: "ocr", Step: "read", Duration: engine.DurationStats{Count: 30, P50: 850}}}
			d.Depth = engine.QueueDepth{Pending: 70, Due: 70, OldestWait: 40_000}
		}), engine.CauseSlowerAttempts, "step read of ocr: median 80ms then, 850ms now"},
		{"an inflow spike", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Inflow, d.Now.Types[0].Inflow = 400, 400
			d.Depth = engine.QueueDepth{Pending: 300, Due: 300, OldestWait: 30_000}
		}), engine.CauseInflowSpike, "inflow: 100 then, 400 now (4.0×)"},
		{"the concurrency limit", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1", "w2"), steadyHalf("w1", "w2")
			d.Now.Outflow = 60
			d.Limits.Concurrency = 4
			d.Depth = engine.QueueDepth{Pending: 40, Running: 4, Due: 40, OldestWait: 50_000}
		}), engine.CauseConcurrencyCapped, "running: 4, concurrency limit: 4"},
		{"a rate limit", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Outflow = 60
			d.Limits.RateLimits = []engine.RateLimit{{Type: "ocr", MaxStarts: 100, Per: 60_000}}
			d.WaitingByType = []engine.WaitingType{{Type: "ocr", Version: 1, Waiting: 40, Due: 40, Served: true}}
			d.Depth = engine.QueueDepth{Pending: 40, Due: 40, OldestWait: 50_000}
		}), engine.CauseRateLimited, "attempts of ocr started in the last 1m0s: 100"},
		{"one tenant", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Inflow = 150
			d.WaitingByKey = []engine.WaitingKey{{Key: "tenant-a", Waiting: 45, Share: 0.9}, {Key: "tenant-b", Waiting: 5, Share: 0.1}}
			d.Depth = engine.QueueDepth{Pending: 50, Due: 50, OldestWait: 10_000}
		}), engine.CauseHotKey, "fairness key tenant-a: 45 of 50 waiting tasks (90%)"},
		{"a version no worker runs", measured(func(d *engine.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.WaitingByType = []engine.WaitingType{{Type: "ocr", Version: 2, Waiting: 20, Due: 20, OldestWait: 90_000}}
			d.Depth = engine.QueueDepth{Pending: 20, Due: 20, OldestWait: 90_000}
		}), engine.CauseUnservedType, "attempts of ocr v2 started in the window: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.FindCauses()
			require.NotEmpty(t, tc.d.Causes, tc.d.Summary)
			top := tc.d.Causes[0]
			require.Equal(t, tc.code, top.Code, "causes: %+v", tc.d.Causes)
			require.Contains(t, strings.Join(top.Evidence, "\n"), tc.evidence)
			require.Equal(t, "most likely: "+top.Summary, tc.d.Summary)
			require.False(t, tc.d.Healthy)
			for i := 1; i < len(tc.d.Causes); i++ {
				require.LessOrEqual(t, tc.d.Causes[i].Score, tc.d.Causes[i-1].Score, "ranked by score")
			}
		})
	}
}

// A steady queue, and one that slows down but keeps up, have no serious
// cause.
func TestFindCausesOfASteadyQueue(t *testing.T) {
	t.Parallel()
	steady := measured(func(d *engine.QueueDiagnosis) {
		d.Then, d.Now = steadyHalf("w1", "w2"), steadyHalf("w1", "w2")
		d.Now.Inflow, d.Now.Outflow = 102, 100 // in flight
		d.Depth = engine.QueueDepth{Pending: 2, Running: 3, Due: 1, OldestWait: 5}
	})
	steady.FindCauses()
	require.Empty(t, steady.Causes)
	// Nothing claimed for a while, but nothing due: idle, not lost.
	idle := measured(func(d *engine.QueueDiagnosis) {
		d.Then, d.Now = steadyHalf("w1"), engine.DiagnosisHalf{}
		d.Depth = engine.QueueDepth{Pending: 5, SinceLastStart: 60_000}
	})
	idle.FindCauses()
	require.Empty(t, idle.Causes)
	require.True(t, idle.Healthy)
	require.True(t, steady.Healthy)
	require.Equal(t, "healthy: inflow 102, outflow 100 in the last 1m0s; 2 waiting (1 due); live workers: 2", steady.Summary)

	keepingUp := measured(func(d *engine.QueueDiagnosis) {
		d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
		d.Now.Types[0].Attempts = engine.DurationStats{Count: 100, P50: 300}
	})
	keepingUp.FindCauses()
	require.Len(t, keepingUp.Causes, 1)
	require.Equal(t, engine.CauseSlowerAttempts, keepingUp.Causes[0].Code)
	require.Less(t, keepingUp.Causes[0].Score, 0.5, "slower but keeping up is not serious")
}
