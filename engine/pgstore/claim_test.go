package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestTaskClaimMany(t *testing.T) {
	t.Parallel()

	t.Run("ClaimsAtMostMax", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		enginetest.StartTasks(t, s, 5, nil)
		first := enginetest.Claim(t, s, enginetest.ClaimParams("w", 3, time.Minute))
		require.Len(t, first, 3)
		second := enginetest.Claim(t, s, enginetest.ClaimParams("w", 3, time.Minute))
		require.Len(t, second, 2)
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 3, time.Minute)))
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 0, time.Minute)))
		require.Equal(t, 5, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("MaxZeroClaimsNothing", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		enginetest.StartTask(t, s, nil)
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 0, time.Minute)))
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", -1, time.Minute)))
		require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, enginetest.StartTask(t, s, nil)).Status)
		require.Len(t, enginetest.Claim(t, s, enginetest.ClaimParams("w", 10, time.Minute)), 2)
		require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("OnlyMatchingQueueTypeVersionNamespace", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		want := enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "q1", Type: "doc", Version: 1})
		enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "q2", Type: "doc", Version: 1})
		v2 := enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "q1", Type: "doc", Version: 2})
		enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "q1", Type: "mail", Version: 1})
		enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "q1", Type: "doc", Version: 1, Namespace: "other"})
		// "doc@1" must not match a type named "doc@" at version 1 or similar.
		enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "q1", Type: "do", Version: 11})

		p := &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"q1"},
			Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 10, LeaseTTL: time.Minute}
		claimed := enginetest.Claim(t, s, p)
		require.Len(t, claimed, 1)
		require.Equal(t, want, claimed[0].Task.ID)
		require.Empty(t, enginetest.Claim(t, s, p))

		require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, v2).Status, "a v2 task is left to v2 workers")
		p.Types = []store.TypeKey{{Type: "doc", Version: 2}}
		claimed = enginetest.Claim(t, s, p)
		require.Len(t, claimed, 1)
		require.Equal(t, v2, claimed[0].Task.ID)

		p.Types, p.Queues = nil, []string{"q1", "q2"}
		require.Empty(t, enginetest.Claim(t, s, p), "no types, no claims")
		p.Types, p.Queues = []store.TypeKey{{Type: "doc", Version: 1}}, nil
		require.Empty(t, enginetest.Claim(t, s, p), "no queues, no claims")
		require.Equal(t, 6, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("FairnessKeysRoundRobin", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		startBatch := func(n int, opts *enginetest.TaskOpts) {
			ps := make([]*store.TaskStartParams, n)
			for i := range ps {
				ps[i] = opts.Params()
			}
			_, err := s.TaskStartMany(context.Background(), ps)
			require.NoError(t, err)
		}
		// Tenant a floods first, then b sends a few, then a task without a
		// key arrives.
		startBatch(40, &enginetest.TaskOpts{FairnessKey: "a"})
		startBatch(10, &enginetest.TaskOpts{FairnessKey: "b"})
		plain := enginetest.StartTask(t, s, nil)
		p := enginetest.ClaimParams("w", 1, time.Minute)
		p.StrictPriority = true // no aging slot: the order is the fair order alone
		var order []string
		for range 25 {
			ct := enginetest.Claim(t, s, p)
			require.Len(t, ct, 1)
			key := ct[0].Task.FairnessKey
			if ct[0].Task.ID == plain {
				key = "-"
			}
			order = append(order, key)
		}
		t.Logf("claim order: %v", order)
		require.Equal(t, []string{"a", "b", "-", "a", "b", "a", "b"}, order[:7],
			"the keys take turns; the task without a key goes by its run time")
		count := map[string]int{}
		for _, k := range order[:21] {
			count[k]++
		}
		require.Equal(t, map[string]int{"a": 10, "b": 10, "-": 1}, count, "all of b's tasks within the first 21 claims")
		require.Equal(t, 51, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("FairnessWeights", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		for _, o := range []*enginetest.TaskOpts{{FairnessKey: "gold", FairnessWeight: 3}, {FairnessKey: "free"}} {
			ps := make([]*store.TaskStartParams, 30)
			for i := range ps {
				ps[i] = o.Params()
			}
			_, err := s.TaskStartMany(context.Background(), ps)
			require.NoError(t, err)
		}
		p := enginetest.ClaimParams("w", 1, time.Minute)
		p.StrictPriority = true
		count := map[string]int{}
		for range 20 {
			ct := enginetest.Claim(t, s, p)
			require.Len(t, ct, 1)
			require.Empty(t, ct[0].Err)
			count[ct[0].Task.FairnessKey]++
			require.Equal(t, ct[0].Task.FairnessKey, ct[0].State.Scheduled.FairnessKey)
		}
		// gold's tasks are a third of a quantum apart, free's a whole one:
		// three turns to one.
		require.InDelta(t, 15, count["gold"], 1, "%v", count)
		require.InDelta(t, 5, count["free"], 1, "%v", count)
		require.Equal(t, 60, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("FairnessWeightNeedsKey", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		_, err := s.TaskStart(context.Background(), (&enginetest.TaskOpts{FairnessWeight: 2}).Params())
		require.ErrorContains(t, err, "fairness weight 2 without a fairness key")
		_, err = s.TaskStart(context.Background(), (&enginetest.TaskOpts{FairnessKey: "a", FairnessWeight: 5000}).Params())
		require.ErrorContains(t, err, "outside 0..1000")
		require.Zero(t, enginetest.CountRows(t, s, "tasks"))
	})

	// A claim commits without waiting for disk, so a database crash can
	// lose it while its worker already runs the task. The next claim must
	// not reuse the lost claim's epoch: the first worker's writes are then
	// refused.
	t.Run("LostClaimEpochIsNotReused", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		ctx := context.Background()
		id := enginetest.StartTask(t, s, nil)
		lost := enginetest.ClaimOne(t, s, "worker-a", time.Minute)
		// The crash: the row and the log go back to before the claim.
		tx, err := s.Pool().Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL cairn.retention = 'on'")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "DELETE FROM "+enginetest.TableName(s, "events")+" WHERE task_id = $1 AND seq = 2", id)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "UPDATE "+enginetest.TableName(s, "tasks")+` SET status = 'pending', attempt = 0, lease_owner = NULL,
			lease_epoch = 0, lease_expires_at = NULL, last_seq = 1, updated_at = created_at, started_at = NULL WHERE id = $1`, id)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		again := enginetest.ClaimOne(t, s, "worker-b", time.Minute)
		require.Equal(t, id, again.Task.ID)
		require.NotEqual(t, lost.Task.LeaseEpoch, again.Task.LeaseEpoch, "the lost claim's epoch is not handed out again")
		_, err = enginetest.AppendFenced(ctx, s, lost, history.TaskCompletedData{})
		require.Error(t, err, "the first worker's write is refused")
		held, err := s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: id, Epoch: lost.Task.LeaseEpoch}}, TTL: time.Minute})
		require.NoError(t, err)
		require.Empty(t, held, "and its heartbeat learns the lease is gone")
		enginetest.Complete(t, s, again)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("NotBeforeRunAt", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		later := enginetest.StartTask(t, s, &enginetest.TaskOpts{RunAt: time.Now().Add(time.Hour)})
		now := enginetest.StartTask(t, s, nil)
		past := enginetest.StartTask(t, s, &enginetest.TaskOpts{RunAt: time.Now().Add(-time.Hour)})
		claimed := enginetest.Claim(t, s, enginetest.ClaimParams("w", 10, time.Minute))
		got := map[uuid.UUID]bool{}
		for _, ct := range claimed {
			got[ct.Task.ID] = true
		}
		require.Equal(t, map[uuid.UUID]bool{now: true, past: true}, got)
		require.Equal(t, history.StatusPending, enginetest.GetTask(t, s, later).Status)
		require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("AgingGivesTheOldestAShareOfEachBatch", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		base := time.Now().Add(-time.Hour)
		old := enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: -5, RunAt: base})
		for range 20 {
			enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: 10})
		}
		// A batch of 8 reserves one slot for the longest-waiting task.
		batch := enginetest.Claim(t, s, enginetest.ClaimParams("w", 8, time.Minute))
		require.Len(t, batch, 8)
		var ids []uuid.UUID
		for _, ct := range batch {
			ids = append(ids, ct.Task.ID)
		}
		require.Contains(t, ids, old, "the low-priority task waiting longest gets the aging slot")
		require.Equal(t, 21, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("PriorityThenRunAtOrder", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		base := time.Now().Add(-time.Hour)
		low := enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: 1, RunAt: base})
		highLate := enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: 5, RunAt: base.Add(2 * time.Minute)})
		mid := enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: 3, RunAt: base})
		highEarly := enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: 5, RunAt: base.Add(time.Minute)})
		negative := enginetest.StartTask(t, s, &enginetest.TaskOpts{Priority: -2, RunAt: base.Add(-time.Hour)})
		var order []uuid.UUID
		strict := enginetest.ClaimParams("w", 1, time.Minute)
		strict.StrictPriority = true
		for range 5 {
			order = append(order, enginetest.Claim(t, s, strict)[0].Task.ID)
		}
		require.Equal(t, []uuid.UUID{highEarly, highLate, mid, low, negative}, order)

		// A batch takes the best tasks first too.
		s2 := enginetest.Store(t)
		for i := range 6 {
			enginetest.StartTask(t, s2, &enginetest.TaskOpts{Priority: i})
		}
		strict = enginetest.ClaimParams("w", 3, time.Minute)
		strict.StrictPriority = true
		batch := enginetest.Claim(t, s2, strict)
		prios := map[int]bool{}
		for _, ct := range batch {
			prios[ct.Task.Priority] = true
		}
		require.Equal(t, map[int]bool{5: true, 4: true, 3: true}, prios)
		require.Equal(t, 5, enginetest.RequireProjectionsMatch(t, s))
		require.Equal(t, 6, enginetest.RequireProjectionsMatch(t, s2))
	})

	t.Run("RecordsAttemptStarted", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := enginetest.Store(t)
		id := enginetest.StartTask(t, s, nil)
		before := enginetest.GetTask(t, s, id)
		require.Zero(t, before.LeaseEpoch)

		ct := enginetest.ClaimOne(t, s, "worker-7", time.Minute)
		task := ct.Task
		require.Equal(t, history.StatusRunning, task.Status)
		require.Equal(t, 1, task.Attempt)
		require.Equal(t, "worker-7", task.LeaseOwner)
		require.Greater(t, task.LeaseEpoch, before.LeaseEpoch, "a new epoch")
		require.Equal(t, int64(2), task.LastSeq)
		require.NotNil(t, task.LeaseExpiresAt)
		require.NotNil(t, task.StartedAt)
		require.WithinDuration(t, task.StartedAt.Add(time.Minute), *task.LeaseExpiresAt, time.Millisecond,
			"lease expires LeaseTTL after the claim, by the database clock")

		require.Len(t, ct.Events, 2)
		ev := ct.Events[1]
		require.Equal(t, int64(2), ev.Seq)
		require.Equal(t, 1, ev.Attempt)
		started, ok := ev.Data.(history.AttemptStartedData)
		require.True(t, ok, "second event is %T", ev.Data)
		require.Equal(t, "worker-7", started.WorkerID)
		require.Equal(t, task.LeaseEpoch, started.LeaseEpoch)
		require.True(t, started.LeaseExpiresAt.Equal(*task.LeaseExpiresAt), "event lease expiry %s, row %s", started.LeaseExpiresAt, task.LeaseExpiresAt)
		require.True(t, ev.At.Equal(*task.StartedAt))

		require.Equal(t, history.StatusRunning, ct.State.Status)
		require.Equal(t, enginetest.ProjectionDiff(task, ct.State), []string(nil))
		require.Equal(t, enginetest.Events(t, s, id), ct.Events)

		// Release it, claim again: a new attempt under a higher epoch, and
		// started_at keeps the first attempt's time.
		_, err := enginetest.AppendFenced(ctx, s, ct, history.TaskReleasedData{WorkerID: "worker-7", LeaseEpoch: task.LeaseEpoch})
		require.NoError(t, err)
		again := enginetest.ClaimOne(t, s, "worker-8", time.Minute)
		require.Equal(t, id, again.Task.ID)
		require.Equal(t, 2, again.Task.Attempt)
		require.Greater(t, again.Task.LeaseEpoch, task.LeaseEpoch, "each claim a greater epoch")
		require.Equal(t, "worker-8", again.Task.LeaseOwner)
		require.True(t, again.Task.StartedAt.Equal(*task.StartedAt))
		last := again.Events[len(again.Events)-1]
		require.Equal(t, 2, last.Attempt)
		lastStarted, ok := last.Data.(history.AttemptStartedData)
		require.True(t, ok, "last event is %T", last.Data)
		require.Equal(t, "worker-8", lastStarted.WorkerID)
		require.Equal(t, again.Task.LeaseEpoch, lastStarted.LeaseEpoch)
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("RunningAndFinishedAreNotClaimed", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		enginetest.StartTasks(t, s, 2, nil)
		a := enginetest.ClaimOne(t, s, "w", time.Minute)
		b := enginetest.ClaimOne(t, s, "w", time.Minute)
		enginetest.Complete(t, s, b)
		require.Empty(t, enginetest.Claim(t, s, enginetest.ClaimParams("w2", 10, time.Minute)))
		require.Equal(t, history.StatusRunning, enginetest.GetTask(t, s, a.Task.ID).Status)
		require.Equal(t, 2, enginetest.RequireProjectionsMatch(t, s))
	})

	t.Run("ConcurrentClaimersNeverShareATask", func(t *testing.T) {
		t.Parallel()
		s := enginetest.Store(t)
		const tasks, claimers = 200, 4
		ids := enginetest.StartTasks(t, s, tasks, nil)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			byOwner = map[uuid.UUID]string{}
			dups    []string
			errs    []error
			start   = make(chan struct{})
		)
		for c := range claimers {
			owner := fmt.Sprintf("claimer-%d", c)
			wg.Go(func() {
				<-start
				for {
					claimedRes, err := s.TaskClaim(context.Background(), enginetest.ClaimParams(owner, 7, time.Minute))
					claimed := claimedRes.Tasks
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					}
					for _, ct := range claimed {
						if prev, ok := byOwner[ct.Task.ID]; ok {
							dups = append(dups, fmt.Sprintf("%s claimed by %s and %s", ct.Task.ID, prev, owner))
						}
						byOwner[ct.Task.ID] = owner
					}
					mu.Unlock()
					if err != nil || len(claimed) == 0 {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs)
		require.Empty(t, dups)
		require.Len(t, byOwner, tasks)
		for _, id := range ids {
			require.Contains(t, byOwner, id)
			task := enginetest.GetTask(t, s, id)
			require.Equal(t, 1, task.Attempt)
			require.Positive(t, task.LeaseEpoch)
			require.Equal(t, byOwner[id], task.LeaseOwner)
		}
		require.Equal(t, 2*tasks, enginetest.CountRows(t, s, "events"), "one attempt_started per task")
		require.Equal(t, tasks, enginetest.RequireProjectionsMatch(t, s))
	})
}

func TestLeaseExtendMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	enginetest.StartTasks(t, s, 3, nil)
	a := enginetest.ClaimOne(t, s, "w", time.Minute)
	b := enginetest.ClaimOne(t, s, "w", time.Minute)
	c := enginetest.ClaimOne(t, s, "w", time.Minute)
	enginetest.Complete(t, s, c)

	held, err := s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{
		{TaskID: a.Task.ID, Epoch: a.State.Lease.Epoch},
		{TaskID: b.Task.ID, Epoch: b.State.Lease.Epoch + 1}, // not the task's epoch
		{TaskID: c.Task.ID, Epoch: c.State.Lease.Epoch},     // finished
		{TaskID: uuid.New(), Epoch: 1},                      // no such task
	}, TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]store.LeaseRenewal{a.Task.ID: {}}, held)

	aNow, bNow, cNow := enginetest.GetTask(t, s, a.Task.ID), enginetest.GetTask(t, s, b.Task.ID), enginetest.GetTask(t, s, c.Task.ID)
	require.True(t, aNow.LeaseExpiresAt.After(a.Task.LeaseExpiresAt.Add(30*time.Minute)),
		"extended to an hour from now: %s, claimed with %s", aNow.LeaseExpiresAt, a.Task.LeaseExpiresAt)
	require.True(t, bNow.LeaseExpiresAt.Equal(*b.Task.LeaseExpiresAt), "a stale epoch must not extend the lease")
	require.Nil(t, cNow.LeaseExpiresAt)
	require.Equal(t, a.Task.LastSeq, aNow.LastSeq, "a heartbeat appends no event")

	held, err = s.LeaseExtendMany(ctx, &store.LeaseExtendParams{TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, held)

	// The reply carries a cancel request.
	_, err = requests.Cancel(ctx, s, &requests.Params{Namespace: "default", ID: a.Task.ID, By: "api"})
	require.NoError(t, err)
	held, err = s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: a.Task.ID, Epoch: a.State.Lease.Epoch}}, TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]store.LeaseRenewal{a.Task.ID: {CancelRequested: true}}, held)

	require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, s))
}

// TestLeaseExtendManyDoesNotWaitForRowLocks: a heartbeat meeting a row
// another transaction has locked (an append under the lease, say) does not
// wait for it, so it cannot be part of a deadlock: it renews the others,
// and reports the locked one held but busy (not extended, not lost).
func TestLeaseExtendManyDoesNotWaitForRowLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := enginetest.Store(t)
	enginetest.StartTasks(t, s, 2, nil)
	claimed := enginetest.Claim(t, s, enginetest.ClaimParams("w", 2, time.Minute))
	require.Len(t, claimed, 2)
	locked, free := claimed[0], claimed[1]

	holder, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "SELECT 1 FROM "+s.Schema()+".tasks WHERE id = $1 FOR UPDATE", locked.Task.ID)
	require.NoError(t, err)

	hbCtx, cancel := context.WithTimeout(ctx, 10*time.Second) // a heartbeat that waits fails here
	defer cancel()
	held, err := s.LeaseExtendMany(hbCtx, &store.LeaseExtendParams{Leases: []store.LeaseRef{
		{TaskID: locked.Task.ID, Epoch: locked.State.Lease.Epoch}, {TaskID: free.Task.ID, Epoch: free.State.Lease.Epoch},
	}, TTL: time.Hour})
	require.NoError(t, err, "the heartbeat waited for the locked row")
	require.Equal(t, map[uuid.UUID]store.LeaseRenewal{locked.Task.ID: {Busy: true}, free.Task.ID: {}}, held)
	require.NoError(t, holder.Rollback(ctx))
	require.True(t, enginetest.GetTask(t, s, free.Task.ID).LeaseExpiresAt.After(time.Now().Add(30*time.Minute)), "the free row is renewed")
	require.True(t, enginetest.GetTask(t, s, locked.Task.ID).LeaseExpiresAt.Before(time.Now().Add(2*time.Minute)), "the busy row is not")

	// Once the row is free again, the next heartbeat renews it.
	held, err = s.LeaseExtendMany(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{{TaskID: locked.Task.ID, Epoch: locked.State.Lease.Epoch}}, TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]store.LeaseRenewal{locked.Task.ID: {}}, held)
}

// TestClaimDoesNotWalkTasksNotYetDue: a claim reads as much with 100 tasks
// not yet due as with 5,000 (delayed starts here; waits for a signal or a
// child, and timers, are the same to the claim: pending, run_at ahead),
// whether nothing is due (an idle worker's poll) or a little is. The plan
// is steered to the walk of tasks_claim_idx (no sort), the plan a due
// backlog's statistics give the claim's generic plan, which used to walk on
// through every task not yet due after the due ones. Counted in buffers,
// which include the index entries a scan skips without returning; rows
// would not see them.
func TestClaimDoesNotWalkTasksNotYetDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	claimBuffers := func(s *pgstore.Store, conn *pgxpool.Conn, wantClaimed int) int {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off; SET LOCAL plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		var out []byte
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.SQL("TaskClaimMany"), pgx.NamedArgs{
			"namespace": store.DefaultNamespace, "queues": []string{"default"}, "types": []string{enginetest.TestKey.Type},
			"versions": []int32{int32(enginetest.TestKey.Version)}, "max": 100, "aging": 12, // one slot in eight, as plan.AgingSlots
			"owner": "w", "lease_seconds": 60.0,
		}).Scan(&out)
		require.NoError(t, err)
		var explained []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
				Rows int `json:"Actual Rows"`
			} `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal(out, &explained))
		require.Len(t, explained, 1)
		if wantClaimed == 0 {
			wantClaimed = 1 // the outlook's row
		}
		require.Equal(t, wantClaimed, explained[0].Plan.Rows, "the claim takes the due tasks, and only them")
		return explained[0].Plan.Hit + explained[0].Plan.Read
	}
	// measure returns the buffers of a claim that finds nothing due and of
	// one that finds two due tasks, among notYetDue tasks not yet due.
	measure := func(notYetDue int) (idle, little int) {
		s := enginetest.Store(t)
		future := &enginetest.TaskOpts{RunAt: time.Now().Add(30 * 24 * time.Hour)}
		ps := make([]*store.TaskStartParams, notYetDue)
		for i := range ps {
			ps[i] = future.Params()
		}
		_, err := s.TaskStartMany(ctx, ps)
		require.NoError(t, err)
		_, err = s.Pool().Exec(ctx, "VACUUM (ANALYZE) "+enginetest.TableName(s, "tasks"))
		require.NoError(t, err)
		// Every claim is rolled back and made a few times on one
		// connection; the least is its cost, without the catalog reads of
		// a connection's first use of the relations.
		conn, err := s.Pool().Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		least := func(claimed int) int {
			n := claimBuffers(s, conn, claimed)
			for range 3 {
				n = min(n, claimBuffers(s, conn, claimed))
			}
			return n
		}
		idle = least(0)
		enginetest.StartTasks(t, s, 2, nil)
		return idle, least(2)
	}
	fewIdle, fewLittle := measure(100)
	manyIdle, manyLittle := measure(5_000)
	t.Logf("buffers read by a claim with 100 / 5,000 tasks not yet due: nothing due %d / %d, two due %d / %d",
		fewIdle, manyIdle, fewLittle, manyLittle)
	// Slack for the indexes' depth: one level more with 5,000 entries, on
	// each probe and, for the tasks claimed, each index entry written.
	require.LessOrEqual(t, manyIdle, fewIdle+5, "an idle claim's reads grow with the tasks not yet due")
	require.LessOrEqual(t, manyLittle, fewLittle+30, "a claim's reads grow with the tasks not yet due")
}
