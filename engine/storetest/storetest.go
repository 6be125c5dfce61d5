// Package storetest is the conformance suite of [store.Store]: the
// behaviours every store must share, whatever database is under it. Each
// test uses only the Store interface and the exported types of engine and
// history, so the same suite runs against PostgreSQL ([pgstore.Store]) and
// the embedded store of package engine/sqlitestore.
//
// A store's test hooks it up in one line:
//
//	func TestStoreConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return newTestStore(t) })
//	}
//
// Non-test code never imports this package.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// testTimeout bounds each conformance test's calls to the store.
const testTimeout = 60 * time.Second

// waitTimeout bounds every wait for a condition (a lease to expire, a
// schedule's tick); conditions normally hold within milliseconds.
const waitTimeout = 15 * time.Second

// pollInterval is how often waits ask the store again.
const pollInterval = 10 * time.Millisecond

// conformanceTest is one behaviour every store must have.
type conformanceTest struct {
	name string
	run  func(t *testing.T, s store.Store)
}

// tests lists the suite, grouped by area; each group lives in its own file.
// Under the payload codecs ([RunEncoded]) the groups of what the codecs
// own themselves (blob rows, data keys), which their tests write and read
// as the codecs would, are left out.
func tests(encoded bool) []conformanceTest {
	var all []conformanceTest
	for _, group := range [][]conformanceTest{
		taskTests, claimTests, appendTests, leaseTests, requestTests, queueTests, leaderTests, scheduleTests, taskTypeTests, readTests,
		listingTests, seriesTests, flowTests, signalTests, childTests, retentionTests, continueTests, strandedTests,
		selectTests, streamTests, inquiryTests, updateTests, usageTests, budgetTests, budgetComposites, modelLimitTests,
		remoteTests,
	} {
		all = append(all, group...)
	}
	if !encoded {
		// What the payload codecs own (blob rows, data keys), and the
		// transactions, whose statements the SDK's edge does not run yet.
		all = append(all, blobTests...)
		all = append(all, dataKeyTests...)
		all = append(all, transactionTests()...)
		all = append(all, forkTests...)
	}
	return all
}

// Run runs every conformance test against stores made by newStore; each
// call of newStore must return a fresh, empty, migrated store.
//
// Every test runs as a parallel subtest on a store of its own and ends by
// checking, for every task in the store, that the replay of its events
// agrees with its projection row.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	run(t, newStore, nil)
}

// run runs the suite; each test writes through wrap(s) when wrap is set,
// and ends by checking the store s itself.
func run(t *testing.T, newStore func(t *testing.T) store.Store, wrap func(t *testing.T, s store.Store) store.Store) {
	t.Helper()
	for _, tc := range tests(wrap != nil) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			require.NotNil(t, s, "newStore returned nil")
			through := s
			if wrap != nil {
				through = wrap(t, s)
			}
			tc.run(t, through)
			if !t.Failed() {
				requireReplayMatches(t, s)
			}
			if wrap != nil && !t.Failed() {
				requireEncoded(t, s)
			}
		})
	}
}

// testContext is the context of a test's calls: ended when the test ends,
// and bounded so a store that hangs fails the test rather than the binary.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// The defaults of [spec].
const (
	defaultQueue = "default"
	defaultType  = "test"
)

// defaultKey is the type key of tasks started with default specs.
var defaultKey = store.TypeKey{Type: defaultType, Version: 1}

// spec describes a task to start; zero fields take the defaults named.
type spec struct {
	Namespace      string // default store.DefaultNamespace
	Queue          string // default "default"
	Type           string // default "test"
	Version        int    // default 1
	Priority       int
	RunAt          time.Time // default now
	MaxAttempts    int       // 0: history.DefaultMaxAttempts
	IdempotencyKey string
	Input          json.RawMessage
	Labels         map[string]string
	StartDeadline  *time.Time
	FairnessKey    string
	FairnessWeight int
}

// params returns the start parameters the spec describes.
func (sp spec) params() *store.TaskStartParams {
	if sp.Namespace == "" {
		sp.Namespace = store.DefaultNamespace
	}
	if sp.Queue == "" {
		sp.Queue = defaultQueue
	}
	if sp.Type == "" {
		sp.Type = defaultType
	}
	if sp.Version == 0 {
		sp.Version = 1
	}
	return &store.TaskStartParams{Namespace: sp.Namespace, Scheduled: history.TaskScheduledData{
		TaskType: sp.Type, TypeVersion: sp.Version, Queue: sp.Queue, Priority: sp.Priority, RunAt: sp.RunAt,
		MaxAttempts: sp.MaxAttempts, IdempotencyKey: sp.IdempotencyKey, Input: sp.Input, Labels: sp.Labels,
		StartDeadline: sp.StartDeadline, FairnessKey: sp.FairnessKey, FairnessWeight: sp.FairnessWeight,
	}}
}

// start starts the task sp describes and returns its id.
func start(t *testing.T, s store.Executor, sp spec) uuid.UUID {
	t.Helper()
	res, err := s.TaskStart(testContext(t), sp.params())
	require.NoError(t, err)
	require.False(t, res.Existing)
	require.NotEqual(t, uuid.Nil, res.ID)
	return res.ID
}

// claimParams is a claim of default tasks (default namespace, queue and
// type) by owner.
func claimParams(owner string, max int, ttl time.Duration) *store.TaskClaimParams {
	return &store.TaskClaimParams{
		Namespace: store.DefaultNamespace, Queues: []string{defaultQueue}, Types: []store.TypeKey{defaultKey},
		Owner: owner, Max: max, LeaseTTL: ttl,
	}
}

func claim(t *testing.T, s store.Executor, p *store.TaskClaimParams) []*store.ClaimedTask {
	t.Helper()
	claimedRes, err := s.TaskClaim(testContext(t), p)
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	for _, ct := range claimed {
		require.NoError(t, ct.Err, "claimed task %s", ct.Task.ID)
	}
	return claimed
}

// claimOne claims exactly one default task for owner.
func claimOne(t *testing.T, s store.Executor, owner string, ttl time.Duration) *store.ClaimedTask {
	t.Helper()
	claimed := claim(t, s, claimParams(owner, 1, ttl))
	require.Len(t, claimed, 1)
	return claimed[0]
}

// claimWhenDue claims one task by p, waiting until one is due: for a task
// made due "now" by the writer's clock, which the store's may trail.
func claimWhenDue(t *testing.T, s store.Store, p *store.TaskClaimParams) *store.ClaimedTask {
	t.Helper()
	var claimed []*store.ClaimedTask
	waitFor(t, "a task to be due", func() bool {
		claimed = claim(t, s, p)
		return len(claimed) > 0
	})
	require.Len(t, claimed, 1)
	return claimed[0]
}

// claimedIDs returns the ids of claimed tasks, as a set.
func claimedIDs(claimed []*store.ClaimedTask) map[uuid.UUID]bool {
	out := make(map[uuid.UUID]bool, len(claimed))
	for _, ct := range claimed {
		out[ct.Task.ID] = true
	}
	return out
}

// appendFenced appends payloads for ct's attempt, fenced by its epoch, onto
// the state the claim returned.
func appendFenced(t *testing.T, s store.Executor, ct *store.ClaimedTask, payloads ...history.Payload) (history.State, error) {
	t.Helper()
	return s.EventAppend(testContext(t), &store.EventAppendParams{
		TaskID: ct.Task.ID, State: ct.State, Epoch: ct.State.Lease.Epoch,
		Attempt: ct.State.Attempt, Payloads: payloads,
	})
}

// completedOutput is what [complete] records as a task's output.
var completedOutput = json.RawMessage(`{"ok":true}`)

// complete completes ct's task in its attempt.
func complete(t *testing.T, s store.Executor, ct *store.ClaimedTask) history.State {
	t.Helper()
	st, err := appendFenced(t, s, ct, history.TaskCompletedData{Output: completedOutput})
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, st.Status)
	return st
}

// getTask returns task id of the default namespace.
func getTask(t *testing.T, s store.Executor, id uuid.UUID) *store.Task {
	t.Helper()
	task, err := s.TaskGet(testContext(t), &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
	require.NoError(t, err)
	require.Equal(t, id, task.ID)
	return task
}

func events(t *testing.T, s store.Executor, id uuid.UUID) []history.Event {
	t.Helper()
	evs, err := store.TaskEvents(testContext(t), s, "", id)
	require.NoError(t, err)
	return evs
}

func eventTypes(t *testing.T, s store.Executor, id uuid.UUID) []history.Type {
	t.Helper()
	evs := events(t, s, id)
	out := make([]history.Type, len(evs))
	for i, e := range evs {
		out[i] = e.Type()
	}
	return out
}

// stateOf replays task id's stored history.
func stateOf(t *testing.T, s store.Executor, id uuid.UUID) history.State {
	t.Helper()
	state, err := history.Replay(events(t, s, id))
	require.NoError(t, err, "replay task %s", id)
	return state
}

// allTaskIDs returns the id of every task in the store, in every
// namespace, in id order. The seam has no such listing: the test helpers
// read it under the store ([enginetest.TaskIDs]).
func allTaskIDs(t *testing.T, s store.Store) []uuid.UUID {
	t.Helper()
	return enginetest.TaskIDs(t, s)
}

// taskCount returns the number of tasks in the store, in every namespace.
func taskCount(t *testing.T, s store.Store) int {
	t.Helper()
	return len(allTaskIDs(t, s))
}

// requireIs fails unless err is marked target.
func requireIs(t *testing.T, err, target error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.True(t, errors.Is(err, target), "want an error marked %q, got: %v", target, err)
}

// waitFor polls cond on the test's goroutine (so cond may use require)
// until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// rescueOne runs RescueExpired until it has rescued a task (the lease it
// waits for expires by the store's clock) and checks it rescued exactly
// one.
func rescueOne(t *testing.T, s store.Store) {
	t.Helper()
	total := 0
	waitFor(t, "an expired lease to be rescued", func() bool {
		n, err := maintenance.RescueExpired(testContext(t), s, 100)
		require.NoError(t, err)
		total += n
		return total > 0
	})
	require.Equal(t, 1, total)
}

// requireReplayMatches checks, for every task in the store, that the
// replay of its events agrees with its projection row, reading them one
// task at a time and in bulk. It returns the number of tasks checked.
func requireReplayMatches(t *testing.T, s store.Store) int {
	t.Helper()
	ctx := testContext(t)
	ids := allTaskIDs(t, s)
	if len(ids) == 0 {
		return 0
	}
	tasks, err := s.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
	require.NoError(t, err)
	require.Len(t, tasks, len(ids), "TaskGetMany returns every task the store holds")
	byTask, err := s.EventList(ctx, store.EventListAll("", ids...))
	require.NoError(t, err)
	for _, row := range tasks {
		evs := byTask[row.ID]
		state, err := history.Replay(evs)
		require.NoError(t, err, "replay task %s", row.ID)
		for i, e := range evs {
			require.Equal(t, int64(i+1), e.Seq, "task %s: events are numbered 1..n", row.ID)
		}
		one, err := store.TaskEvents(ctx, s, "", row.ID)
		require.NoError(t, err)
		require.Len(t, one, len(evs), "task %s: EventList of the task alone and of all agree", row.ID)
		byID, err := s.TaskGet(ctx, &store.TaskGetParams{Namespace: row.Namespace, ID: row.ID})
		require.NoError(t, err)
		for _, task := range []*store.Task{row, byID} {
			requireRowMatchesState(t, task, state)
		}
	}
	return len(ids)
}

// requireRowMatchesState checks that a projection row agrees with the
// replay of its task's history.
func requireRowMatchesState(t *testing.T, task *store.Task, s history.State) {
	t.Helper()
	id := task.ID
	sc := s.Scheduled
	require.Equal(t, sc.Namespace, task.Namespace, "task %s: namespace", id)
	require.Equal(t, sc.Queue, task.Queue, "task %s: queue", id)
	require.Equal(t, sc.TaskType, task.Type, "task %s: type", id)
	require.Equal(t, sc.TypeVersion, task.TypeVersion, "task %s: type version", id)
	require.Equal(t, sc.Priority, task.Priority, "task %s: priority", id)
	require.Equal(t, sc.MaxAttempts, task.MaxAttempts, "task %s: max attempts", id)
	require.Equal(t, sc.IdempotencyKey, task.IdempotencyKey, "task %s: idempotency key", id)
	requireJSONEqual(t, sc.Input, task.Input, "task %s: input", id)
	require.Equal(t, s.Status, task.Status, "task %s: status", id)
	require.Equal(t, s.Attempt, task.Attempt, "task %s: attempt", id)
	require.Equal(t, s.LastSeq, task.LastSeq, "task %s: last seq", id)
	require.Equal(t, s.Lease.Owner, task.LeaseOwner, "task %s: lease owner", id)
	require.Equal(t, s.Lease.Epoch, task.LeaseEpoch, "task %s: lease epoch", id)
	require.Equal(t, s.Lease.Owner != "", task.LeaseExpiresAt != nil, "task %s: a lease expiry while, and only while, the lease is held", id)
	require.Equal(t, s.CancelRequested, task.CancelRequest, "task %s: cancel requested", id)
	require.Equal(t, s.LastError, task.LastError, "task %s: last error", id)
	requireJSONEqual(t, s.Output, task.Output, "task %s: output", id)
	require.WithinDuration(t, s.RunAt, task.RunAt, time.Microsecond, "task %s: run at", id)
	require.Equal(t, !s.FinishedAt.IsZero(), task.FinishedAt != nil, "task %s: finished at set once finished", id)
	require.Equal(t, !s.StartedAt.IsZero(), task.StartedAt != nil, "task %s: started at set once started", id)
}

// requireJSONEqual checks that two JSON documents are equal as values
// (stores may normalize spacing and key order), or both absent.
func requireJSONEqual(t *testing.T, want, got json.RawMessage, msgAndArgs ...any) {
	t.Helper()
	want, got = bytes.TrimSpace(want), bytes.TrimSpace(got)
	if len(want) == 0 || len(got) == 0 {
		require.Equal(t, string(want), string(got), msgAndArgs...)
		return
	}
	require.JSONEq(t, string(want), string(got), msgAndArgs...)
}
