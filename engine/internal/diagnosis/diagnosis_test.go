package diagnosis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/diagnosis"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/engine/storetest"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The numbers of a diagnosis over a history built by hand (the scenario
// and its figures live in storetest, for every store).
func TestQueueDiagnoseMeasuresHandBuiltHistory(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	storetest.DiagnoseHandBuiltHistory(t, s, func(tasks []storetest.BuiltTask) { insertHistory(t, s, tasks...) })
}

// The series of a history built by hand (the scenario and its figures
// live in storetest, for every store).
func TestQueueSeriesOfHandBuiltHistory(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	storetest.SeriesHandBuiltHistory(t, s, func(tasks []storetest.BuiltTask) { insertHistory(t, s, tasks...) })
}

// insertHistory writes tasks straight into the tables, in one transaction
// (one now()), so a test knows every time exactly. The projections are not
// meant to match a replay: the diagnosis reads events and a few columns
// (updated_at is the last event's time, which the series read).
func insertHistory(t *testing.T, s *pgstore.Store, tasks ...storetest.BuiltTask) {
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

func insertBuiltTask(ctx context.Context, tx pgx.Tx, s *pgstore.Store, task storetest.BuiltTask) error {
	id := uuid.Must(uuid.NewV7())
	var lease any
	if task.Owner != "" {
		lease = 30.0 // seconds from now
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+enginetest.TableName(s, "tasks")+` (id, namespace, queue, type, type_version, status,
		    run_at, attempt, max_attempts, lease_owner, lease_epoch, lease_expires_at, last_seq, created_at, updated_at,
		    fair_at, fairness_key)
		VALUES (@id, 'default', @queue, @type, 1, @status, now() - make_interval(secs => @run_ago), @attempt, 0,
		    nullif(@owner, ''), @epoch, now() + make_interval(secs => @lease), @last_seq,
		    now() - make_interval(secs => @created_ago), now() - make_interval(secs => @updated_ago), now() - make_interval(secs => @run_ago), nullif(@key, ''))`,
		pgx.NamedArgs{"id": id, "queue": task.Queue, "type": task.Type, "status": task.Status, "run_ago": task.RunAgo,
			"attempt": task.Attempt, "epoch": task.Attempt, "owner": task.Owner, "lease": lease, "last_seq": len(task.Events),
			"created_ago": task.Events[0].Ago, "updated_ago": task.Events[len(task.Events)-1].Ago, "key": task.Key})
	if err != nil {
		return err
	}
	for i, e := range task.Events {
		_, err := tx.Exec(ctx, `INSERT INTO `+enginetest.TableName(s, "events")+` (task_id, seq, type, at, attempt, data)
			VALUES (@id, @seq, @type, now() - make_interval(secs => @ago), @attempt, @data::jsonb)`,
			pgx.NamedArgs{"id": id, "seq": i + 1, "type": e.Type, "ago": e.Ago, "attempt": e.Attempt, "data": e.JSON()})
		if err != nil {
			return err
		}
	}
	return nil
}

// measured returns a diagnosis of a 2-minute window whose halves and depth
// are set by the caller, as if read from the database.
func measured(edit func(d *store.QueueDiagnosis)) *store.QueueDiagnosis {
	d := &store.QueueDiagnosis{Namespace: "default", Queue: "q", Window: 120_000}
	edit(d)
	for _, h := range []*store.DiagnosisHalf{&d.Then, &d.Now} {
		h.Workers = len(h.WorkerIDs)
		if h.AttemptsStarted > 0 {
			h.RetryShare = float64(h.Retries) / float64(h.AttemptsStarted)
		}
	}
	return d
}

func steadyHalf(workers ...string) store.DiagnosisHalf {
	return store.DiagnosisHalf{Inflow: 100, Outflow: 100, Completed: 100, AttemptsStarted: 100, WorkerIDs: workers,
		Types: []store.TypeStats{{Type: "ocr", Inflow: 100, Outflow: 100, AttemptsStarted: 100,
			Attempts: store.DurationStats{Count: 100, Mean: 100, P50: 100, P95: 150}}}}
}

// The heuristics on made-up measurements: each picture names its cause
// first, with the numbers in the evidence.
func TestFindCausesRanksTheLikelyCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		d        *store.QueueDiagnosis
		code     string
		evidence string // a line of the top cause's evidence contains it
	}{
		{"every worker gone", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1", "w2", "w3"), store.DiagnosisHalf{Inflow: 100}
			d.Depth = store.QueueDepth{Pending: 100, Due: 100, OldestWait: 60_000}
		}), store.CauseLostConsumers, "live workers: 3 then, 0 now"},
		{"the last worker stopped late in the window", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.WaitingByType = []store.WaitingType{{Type: "ocr", Version: 1, Waiting: 30, Due: 30, OldestWait: 9_000, Served: true}}
			d.Depth = store.QueueDepth{Pending: 30, Due: 30, OldestWait: 9_000, SinceLastStart: 10_000}
		}), store.CauseLostConsumers, "last attempt started 10s ago; running now: 0"},
		{"some workers gone", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1", "w2", "w3"), steadyHalf("w1")
			d.Now.Outflow = 40
			d.Depth = store.QueueDepth{Pending: 60, Due: 60, OldestWait: 20_000}
		}), store.CauseLostConsumers, "workers seen then but not now: w2, w3"},
		{"a poison type", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.AttemptsStarted, d.Now.Retries = 300, 200
			d.Now.Types = append(d.Now.Types, store.TypeStats{Type: "pdf.parse", AttemptsStarted: 200, Retries: 200, AttemptsFailed: 200})
			d.Now.Errors = []store.ErrorStats{{Type: "pdf.parse", Class: "transient", Kind: "upstream", Status: 503, Count: 200, Message: "503"}}
		}), store.CausePoisonRetries, "most common failure of pdf.parse: transient kind upstream status 503, 200 times"},
		{"slower attempts", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Outflow, d.Now.Types[0].Attempts = 30, store.DurationStats{Count: 30, Mean: 900, P50: 900, P95: 1200}
			d.Then.Steps = []store.StepStats{{Type: "ocr", Step: "read", Duration: store.DurationStats{Count: 100, P50: 80}}}
			d.Now.Steps = []store.StepStats{{Type: "ocr", Step: "read", Duration: store.DurationStats{Count: 30, P50: 850}}}
			d.Depth = store.QueueDepth{Pending: 70, Due: 70, OldestWait: 40_000}
		}), store.CauseSlowerAttempts, "step read of ocr: median 80ms then, 850ms now"},
		{"an inflow spike", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Inflow, d.Now.Types[0].Inflow = 400, 400
			d.Depth = store.QueueDepth{Pending: 300, Due: 300, OldestWait: 30_000}
		}), store.CauseInflowSpike, "inflow: 100 then, 400 now (4.0×)"},
		{"the concurrency limit", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1", "w2"), steadyHalf("w1", "w2")
			d.Now.Outflow = 60
			d.Limits.Concurrency = 4
			d.Depth = store.QueueDepth{Pending: 40, Running: 4, Due: 40, OldestWait: 50_000}
		}), store.CauseConcurrencyCapped, "running: 4, concurrency limit: 4"},
		{"a rate limit", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Outflow = 60
			d.Limits.RateLimits = []store.RateLimit{{Type: "ocr", MaxStarts: 100, Per: 60_000}}
			d.WaitingByType = []store.WaitingType{{Type: "ocr", Version: 1, Waiting: 40, Due: 40, Served: true}}
			d.Depth = store.QueueDepth{Pending: 40, Due: 40, OldestWait: 50_000}
		}), store.CauseRateLimited, "attempts of ocr started in the last 1m0s: 100"},
		{"one tenant", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.Now.Inflow = 150
			d.WaitingByKey = []store.WaitingKey{{Key: "tenant-a", Waiting: 45, Share: 0.9}, {Key: "tenant-b", Waiting: 5, Share: 0.1}}
			d.Depth = store.QueueDepth{Pending: 50, Due: 50, OldestWait: 10_000}
		}), store.CauseHotKey, "fairness key tenant-a: 45 of 50 waiting tasks (90%)"},
		{"a version no worker runs", measured(func(d *store.QueueDiagnosis) {
			d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
			d.WaitingByType = []store.WaitingType{{Type: "ocr", Version: 2, Waiting: 20, Due: 20, OldestWait: 90_000}}
			d.Depth = store.QueueDepth{Pending: 20, Due: 20, OldestWait: 90_000}
		}), store.CauseUnservedType, "attempts of ocr v2 started in the window: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			diagnosis.FindCauses(tc.d)
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
	steady := measured(func(d *store.QueueDiagnosis) {
		d.Then, d.Now = steadyHalf("w1", "w2"), steadyHalf("w1", "w2")
		d.Now.Inflow, d.Now.Outflow = 102, 100 // in flight
		d.Depth = store.QueueDepth{Pending: 2, Running: 3, Due: 1, OldestWait: 5}
	})
	diagnosis.FindCauses(steady)
	require.Empty(t, steady.Causes)
	// Nothing claimed for a while, but nothing due: idle, not lost.
	idle := measured(func(d *store.QueueDiagnosis) {
		d.Then, d.Now = steadyHalf("w1"), store.DiagnosisHalf{}
		d.Depth = store.QueueDepth{Pending: 5, SinceLastStart: 60_000}
	})
	diagnosis.FindCauses(idle)
	require.Empty(t, idle.Causes)
	require.True(t, idle.Healthy)
	require.True(t, steady.Healthy)
	require.Equal(t, "healthy: inflow 102, outflow 100 in the last 1m0s; 2 waiting (1 due); live workers: 2", steady.Summary)

	keepingUp := measured(func(d *store.QueueDiagnosis) {
		d.Then, d.Now = steadyHalf("w1"), steadyHalf("w1")
		d.Now.Types[0].Attempts = store.DurationStats{Count: 100, P50: 300}
	})
	diagnosis.FindCauses(keepingUp)
	require.Len(t, keepingUp.Causes, 1)
	require.Equal(t, store.CauseSlowerAttempts, keepingUp.Causes[0].Code)
	require.Less(t, keepingUp.Causes[0].Score, 0.5, "slower but keeping up is not serious")
}
