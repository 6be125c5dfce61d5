package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// runCounter counts the runs of each step position, and keeps what step 3
// saw of step 2's output.
type runCounter struct {
	mu   sync.Mutex
	runs map[int]int
	saw  []int
}

func (r *runCounter) ran(pos int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[int]int{}
	}
	r.runs[pos]++
}

func (r *runCounter) counts() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]int{}
	for k, v := range r.runs {
		out[k] = v
	}
	return out
}

type price struct {
	Cents int `json:"cents"`
}

// fiveSteps is a workflow of five steps at positions 0 to 4, position 1 a
// sleep: reserve, sleep, price, charge (which charges what price
// returned), ship.
func fiveSteps(name string, r *runCounter, e *effects) *sdk.Workflow[string, string] {
	return sdk.NewWorkflow(name, 1, func(ctx workflow.Context, order string) (string, error) {
		undoOf := func(step string) *workflow.StepOpts {
			if e == nil {
				return nil
			}
			return &workflow.StepOpts{Compensate: undo(e, step)}
		}
		if _, err := workflow.Step(ctx, "reserve", func(context.Context) (string, error) {
			r.ran(0)
			return "reserved " + order, nil
		}, undoOf("reserve")); err != nil {
			return "", err
		}
		if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
			return "", err
		}
		p, err := workflow.Step(ctx, "price", func(context.Context) (price, error) {
			r.ran(2)
			return price{Cents: 1200}, nil
		}, nil)
		if err != nil {
			return "", err
		}
		var undoCharge *workflow.StepOpts
		if e != nil {
			undoCharge = &workflow.StepOpts{Compensate: workflow.Compensate(func(context.Context, int) error {
				e.add("undo charge")
				return nil
			})}
		}
		charged, err := workflow.Step(ctx, "charge", func(context.Context) (int, error) {
			r.ran(3)
			r.mu.Lock()
			r.saw = append(r.saw, p.Cents)
			r.mu.Unlock()
			return p.Cents, nil
		}, undoCharge)
		if err != nil {
			return "", err
		}
		shipped, err := workflow.Step(ctx, "ship", func(context.Context) (string, error) {
			r.ran(4)
			return fmt.Sprintf("shipped %s for %d", order, charged), nil
		}, nil)
		return shipped, err
	}, nil)
}

// A finished five-step task forked at position 2 with an edited output:
// positions 0 to 2 never run again (the sleep neither), 3 and 4 run once
// more, step 3 sees the edited output, and the two histories name each
// other.
func TestForkRerunsFromAStepWithAnEditedOutput(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var r runCounter
		wf := fiveSteps("order.fork", &r, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "o-1", &sdk.StartOpts{Labels: map[string]string{"team": "shop"}, FairnessKey: "tenant-a", Priority: 3})
		require.NoError(t, err)
		orig := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, orig.Status)
		require.Equal(t, map[int]int{0: 1, 2: 1, 3: 1, 4: 1}, r.counts())

		forkID, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 2, Output: json.RawMessage(`{"cents":999}`)})
		require.NoError(t, err)
		require.NotEqual(t, res.ID, forkID)
		fork := waitTask(t, b.client, forkID)
		require.Equal(t, history.StatusCompleted, fork.Status, "%+v", fork.LastError)
		require.Equal(t, map[int]int{0: 1, 2: 1, 3: 2, 4: 2}, r.counts(), "positions 0-2 ran once, 3-4 twice")
		require.Equal(t, []int{1200, 999}, r.saw, "step 3 saw the edited output in the fork")
		out, err := sdk.Output[string](fork)
		require.NoError(t, err)
		require.Equal(t, "shipped o-1 for 999", out)

		// The fork is the original's type, queue, labels and fairness.
		require.Equal(t, orig.Type, fork.Type)
		require.Equal(t, orig.Queue, fork.Queue)
		require.Equal(t, orig.Priority, fork.Priority)
		require.Equal(t, orig.Labels, fork.Labels)
		require.Equal(t, orig.FairnessKey, fork.FairnessKey)
		require.JSONEq(t, string(orig.Input), string(fork.Input))
		require.Equal(t, &history.ForkOrigin{TaskID: res.ID.String(), Position: 2}, fork.ForkedFrom)
		require.Nil(t, orig.ForkedFrom)

		// The original names the fork, and stays completed.
		origEvents := taskHistory(t, b.client, res.ID)
		forked := eventsOf[history.TaskForkedData](origEvents)
		require.Len(t, forked, 1)
		require.Equal(t, forkID.String(), forked[0].ForkTaskID)
		require.Equal(t, 2, forked[0].Position)
		require.Equal(t, history.TaskForked, origEvents[len(origEvents)-1].Type())
		again, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, again.Status)
		forks, err := b.client.Forks(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, []history.Fork{{TaskID: forkID.String(), Position: 2}}, forks)

		// The fork: task_scheduled, three copies (the sleep a step named
		// sleep), then its own attempt running steps 3 and 4.
		events := taskHistory(t, b.client, forkID)
		require.Equal(t, []history.Type{history.TaskScheduled, history.StepCompleted, history.StepCompleted, history.StepCompleted,
			history.AttemptStarted, history.StepCompleted, history.StepCompleted, history.TaskCompleted}, eventTypes(events))
		steps := eventsOf[history.StepCompletedData](events)
		origSeq := map[int]int64{}
		for _, e := range origEvents {
			switch d := e.Data.(type) {
			case history.StepCompletedData:
				origSeq[d.Position] = e.Seq
			case history.TimerFiredData:
				origSeq[d.Position] = e.Seq
			}
		}
		for pos := 0; pos <= 2; pos++ {
			require.Equal(t, pos, steps[pos].Position)
			require.Equal(t, origSeq[pos], steps[pos].CopiedFromSeq, "copy of position %d", pos)
			require.Zero(t, events[pos+1].Attempt)
		}
		require.Equal(t, history.SleepStepName, steps[1].Name)
		require.JSONEq(t, `{"cents":999}`, string(steps[2].Output))
		require.JSONEq(t, `"reserved o-1"`, string(steps[0].Output))
		require.Zero(t, steps[3].CopiedFromSeq)

		// A fork of the fork, at its last copied step: the copies' outputs
		// carry on.
		second, err := b.client.Fork(ctx, forkID, sdk.ForkOpts{At: 3})
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, second).Status)
		require.Equal(t, map[int]int{0: 1, 2: 1, 3: 2, 4: 3}, r.counts())

		// The audit finds every fork of a task: its task_forked events, or
		// the forks' task_scheduled naming it.
		for _, expr := range []string{
			fmt.Sprintf(`event.type == "task_forked" && task.id == %q`, res.ID),
			fmt.Sprintf(`event.type == "task_scheduled" && event.data.forked_from != null && event.data.forked_from.task_id == %q`, res.ID),
		} {
			filter, err := sdk.CompileEventFilter(expr)
			require.NoError(t, err)
			var found []string
			require.NoError(t, b.client.Audit(ctx, sdk.AuditParams{Filter: filter}, func(r sdk.AuditRecord) error {
				switch d := r.Event.Payload.(type) {
				case history.TaskForkedData:
					found = append(found, d.ForkTaskID)
				case history.TaskScheduledData:
					found = append(found, r.Task.ID.String())
				}
				return nil
			}))
			require.Equal(t, []string{forkID.String()}, found, expr)
		}

		stopWorker(t, b.worker)
		require.Equal(t, 3, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)))
	})
}

// The same fork twice with one idempotency key is one fork.
func TestForkIdempotencyKey(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var r runCounter
		wf := fiveSteps("order.forkkey", &r, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "o-2", nil)
		require.NoError(t, err)
		waitTask(t, b.client, res.ID)
		first, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 0, IdempotencyKey: "fix-o-2"})
		require.NoError(t, err)
		again, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 0, IdempotencyKey: "fix-o-2"})
		require.NoError(t, err)
		require.Equal(t, first, again)
		waitTask(t, b.client, first)
		forks, err := b.client.Forks(ctx, res.ID)
		require.NoError(t, err)
		require.Len(t, forks, 1, "the second fork wrote nothing")

		// The key names one fork: of this task, at this position, with
		// this output there. Another position, another output, or a key
		// held by an ordinary start is refused, not answered with it.
		_, err = b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 2, IdempotencyKey: "fix-o-2"})
		require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused)
		require.ErrorContains(t, err, "not a fork of task "+res.ID.String()+" at position 2")
		_, err = b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 2, Output: json.RawMessage(`{"cents": 7}`), IdempotencyKey: "fix-o-2b"})
		require.NoError(t, err)
		_, err = b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 2, Output: json.RawMessage(`{"cents":7}`), IdempotencyKey: "fix-o-2b"})
		require.NoError(t, err, "the same output, spaced otherwise")
		_, err = b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 2, Output: json.RawMessage(`{"cents":8}`), IdempotencyKey: "fix-o-2b"})
		require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused)
		require.ErrorContains(t, err, "whose output at position 2 is not this fork's")
		_, err = b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 2, IdempotencyKey: "fix-o-2b"})
		require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused, "no output: the original's, which is not the fork's")
		plain, err := sdk.Start(ctx, b.client, wf, "o-2", &sdk.StartOpts{IdempotencyKey: "plain-o-2"})
		require.NoError(t, err)
		_, err = b.client.Reset(ctx, res.ID, sdk.ResetOpts{ForkOpts: sdk.ForkOpts{At: 0, IdempotencyKey: "plain-o-2"}})
		require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused)
		require.ErrorContains(t, err, "a task that is no fork")
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, plain.ID).Status)
		forks, err = b.client.Forks(ctx, res.ID)
		require.NoError(t, err)
		require.Len(t, forks, 2)
		for _, f := range forks {
			waitTask(t, b.client, uuid.MustParse(f.TaskID))
		}
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Reset forks and ends the original: a completed one is compensated when
// asked (it ends cancelled), one still retrying is cancelled, and the
// fork runs.
func TestResetCancelsOrCompensatesTheOriginal(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var r runCounter
		var e effects
		wf := fiveSteps("order.reset", &r, &e)
		sdk.Register(b.worker, wf)
		// Retries step 3 until its price is positive, with a long backoff.
		var failing runCounter
		stuck := sdk.NewWorkflow("order.stuck", 1, func(ctx workflow.Context, _ string) (int, error) {
			p, err := workflow.Step(ctx, "price", func(context.Context) (price, error) {
				failing.ran(0)
				return price{Cents: -1}, nil
			}, nil)
			if err != nil {
				return 0, err
			}
			return workflow.Step(ctx, "charge", func(context.Context) (int, error) {
				failing.ran(1)
				if p.Cents < 0 {
					return 0, errors.New("negative price")
				}
				return p.Cents, nil
			}, &workflow.StepOpts{Retry: fastRetryWithBackoff(time.Hour)})
		}, nil)
		sdk.Register(b.worker, stuck)
		startWorker(t, b.worker)
		ctx := context.Background()

		// Completed, compensated on reset.
		res, err := sdk.Start(ctx, b.client, wf, "o-3", nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)
		forkID, err := b.client.Reset(ctx, res.ID, sdk.ResetOpts{ForkOpts: sdk.ForkOpts{At: 2}, Compensate: true})
		require.NoError(t, err)
		require.Equal(t, history.StatusCancelled, waitTask(t, b.client, res.ID).Status)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, forkID).Status)
		require.ElementsMatch(t, []string{"undo charge", "undo reserve"}, e.all())
		events := taskHistory(t, b.client, res.ID)
		require.Equal(t, "reset: forked as "+forkID.String(), eventsOf[history.CompensationRequestedData](events)[0].Reason)

		// Retrying (its step 1 fails, the next try an hour away): reset
		// at position 0 with a good price, the original is cancelled.
		stuckRes, err := sdk.Start(ctx, b.client, stuck, "", nil)
		require.NoError(t, err)
		enginetest.WaitFor(t, "the task retries", func() bool {
			info, err := b.client.Get(ctx, stuckRes.ID)
			return err == nil && info.Status == history.StatusRetrying
		})
		fixed, err := b.client.Reset(ctx, stuckRes.ID, sdk.ResetOpts{ForkOpts: sdk.ForkOpts{At: 0, Output: json.RawMessage(`{"cents":5}`)}, Reason: "price fixed"})
		require.NoError(t, err)
		require.Equal(t, history.StatusCancelled, waitTask(t, b.client, stuckRes.ID).Status)
		fixedInfo := waitTask(t, b.client, fixed)
		require.Equal(t, history.StatusCompleted, fixedInfo.Status)
		out, err := sdk.Output[int](fixedInfo)
		require.NoError(t, err)
		require.Equal(t, 5, out)
		require.Equal(t, 1, failing.counts()[0], "the price step ran once, in the original")
		stuckEvents := taskHistory(t, b.client, stuckRes.ID)
		require.Equal(t, "price fixed", eventsOf[history.CancelRequestedData](stuckEvents)[0].Reason)
		require.Len(t, eventsOf[history.TaskForkedData](stuckEvents), 1)

		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

func fastRetryWithBackoff(d time.Duration) *activities.RetryPolicy {
	return &activities.RetryPolicy{MaxAttempts: 5, InitialInterval: d, Multiplier: 1, MaxInterval: d}
}

// What cannot be forked is refused on both stores alike, nothing
// written.
func TestForkRefusals(t *testing.T) {
	t.Parallel()
	messages := map[string][]string{}
	var mu sync.Mutex
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var r runCounter
		wf := fiveSteps("order.refuse", &r, nil)
		sdk.Register(b.worker, wf)
		child := sdk.NewWorkflow("order.child", 1, func(ctx workflow.Context, _ string) (string, error) { return "c", nil }, nil)
		sdk.Register(b.worker, child)
		parent := sdk.NewWorkflow("order.parent", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "first", func(context.Context) (string, error) { return "1", nil }, nil); err != nil {
				return "", err
			}
			if _, err := workflow.StartChild(ctx, child, "x", nil).Result(ctx); err != nil {
				return "", err
			}
			return workflow.Step(ctx, "after", func(context.Context) (string, error) { return "2", nil }, nil)
		}, nil)
		sdk.Register(b.worker, parent)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "o-4", nil)
		require.NoError(t, err)
		waitTask(t, b.client, res.ID)
		par, err := sdk.Start(ctx, b.client, parent, "", nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, par.ID).Status)

		var got []string
		refuse := func(id uuid.UUID, opts sdk.ForkOpts, is error, contains string) {
			t.Helper()
			_, err := b.client.Fork(ctx, id, opts)
			require.Error(t, err)
			require.True(t, errors.Is(err, is), "%v is not %v", err, is)
			require.ErrorContains(t, err, contains)
			got = append(got, strings.ReplaceAll(strings.ReplaceAll(err.Error(), id.String(), "ID"), par.ID.String(), "ID"))
		}
		refuse(res.ID, sdk.ForkOpts{At: 5}, sdk.ErrTaskState, "it has 5 steps on record (positions 0 to 4)")
		refuse(res.ID, sdk.ForkOpts{At: -1}, sdk.ErrInvalid, "position -1 is negative")
		refuse(res.ID, sdk.ForkOpts{At: 2, Output: json.RawMessage(`{"cents":`)}, sdk.ErrInvalid, "the output is not valid JSON")
		refuse(res.ID, sdk.ForkOpts{At: 2, Output: json.RawMessage(`"` + strings.Repeat("x", sdk.DefaultMaxPayloadBytes) + `"`)}, sdk.ErrInvalid, "over the limit")
		refuse(res.ID, sdk.ForkOpts{At: 1, Output: json.RawMessage(`1`)}, sdk.ErrInvalid, "the step there is a sleep")
		refuse(res.ID, sdk.ForkOpts{At: 2, Input: json.RawMessage(`{"cairn_blob":1}`)}, sdk.ErrInvalid, "reserves for payloads kept by reference")
		refuse(par.ID, sdk.ForkOpts{At: 1}, cairntype.ErrUnsupported, "child_started")
		_, err = b.client.Fork(ctx, uuid.Must(uuid.NewV7()), sdk.ForkOpts{})
		require.ErrorIs(t, err, sdk.ErrNotFound)
		// Before the child, the parent forks.
		ok, err := b.client.Fork(ctx, par.ID, sdk.ForkOpts{At: 0})
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, ok).Status)

		forks, err := b.client.Forks(ctx, res.ID)
		require.NoError(t, err)
		require.Empty(t, forks, "a refused fork writes nothing")
		mu.Lock()
		messages[t.Name()] = got
		mu.Unlock()
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		pg, lite := messages[t.Name()+"/PostgreSQL"], messages[t.Name()+"/SQLite"]
		require.Len(t, pg, 7)
		require.Equal(t, pg, lite, "both stores refuse with the same errors")
	})
}

// A fork of an encrypted task holds its copies sealed with its own data
// key: the database's bytes hold the secret nowhere, a client with the
// keys reads the copies in clear (an output the original kept as a
// sealed blob copied in place), one without them reads them sealed and
// cannot fork.
func TestForkOfAnEncryptedTask(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		env := newEncryptedEnv(t, embedded, oneKey(t))
		id, info := runKYC(t, env, "kyc-fork")
		require.Equal(t, history.StatusCompleted, info.Status, "%+v", info.LastError)

		_, err := env.blind.Fork(ctx, id, sdk.ForkOpts{At: 1})
		require.ErrorIs(t, err, payload.ErrSealed)
		require.ErrorContains(t, err, "is encrypted and this client has no key for it")

		forkID, err := env.client.Fork(ctx, id, sdk.ForkOpts{At: 1})
		require.NoError(t, err)
		waitForReview(t, env, forkID)
		_, err = env.client.Signal(ctx, forkID, "review", "fork approved for "+secret, nil)
		require.NoError(t, err)
		fork := waitTask(t, env.client, forkID)
		require.Equal(t, history.StatusCompleted, fork.Status, "%+v", fork.LastError)
		out, err := sdk.Output[string](fork)
		require.NoError(t, err)
		require.Contains(t, out, "fork approved for "+secret)
		require.Empty(t, env.rawScan(t, secret), "the secret is stored in clear")

		steps := eventsOf[history.StepCompletedData](taskHistory(t, env.client, forkID))
		require.Contains(t, string(steps[1].Output), secret, "the copy reads back in clear")
		require.NotZero(t, steps[1].CopiedFromSeq)
		blind, err := env.blind.RawHistory(ctx, forkID)
		require.NoError(t, err)
		for _, st := range eventsOf[history.StepCompletedData](blind)[:2] {
			sealed, ok := history.ParseSealed(st.Output)
			require.True(t, ok, "a copy is stored sealed: %s", st.Output)
			require.Equal(t, forkID.String(), sealed.Task, "sealed with the fork's own key")
		}

		// Erasing the original leaves the fork readable; an erased task
		// is not forked.
		require.NoError(t, env.client.Erase(ctx, id, "customer asked"))
		_, err = env.client.Fork(ctx, id, sdk.ForkOpts{At: 0})
		require.ErrorIs(t, err, sdk.ErrTaskState)
		require.ErrorContains(t, err, "its data was erased")
		steps = eventsOf[history.StepCompletedData](taskHistory(t, env.client, forkID))
		require.Contains(t, string(steps[1].Output), secret, "the fork's copies are its own")
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(env.client))
	})
}

// A fork of a task still running: task_forked lands between its worker's
// appends, which catch up and finish; the fork runs on its own. Reset of
// a running task cancels it at its next checkpoint.
func TestForkOfARunningTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		blocked, release := newSignal(), make(chan struct{})
		var mu sync.Mutex
		blocks := 1
		wf := sdk.NewWorkflow("order.running", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "first", func(context.Context) (string, error) { return "1", nil }, nil); err != nil {
				return "", err
			}
			second, err := workflow.Step(ctx, "second", func(context.Context) (string, error) {
				mu.Lock()
				block := blocks > 0
				blocks--
				mu.Unlock()
				if block {
					blocked.fire()
					<-release
				}
				return "2", nil
			}, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "third", func(context.Context) (string, error) { return second + "3", nil }, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		waitSignal(t, blocked.ch, "the second step runs")

		forkID, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 0})
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, forkID).Status)
		close(release)
		orig := waitTask(t, b.client, res.ID)
		require.Equal(t, history.StatusCompleted, orig.Status, "%+v", orig.LastError)
		types := eventTypesOf(t, b.client, res.ID)
		require.Contains(t, types, history.TaskForked)
		require.Equal(t, history.TaskCompleted, types[len(types)-1])
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// A fork of a patched task copies the patch markers recorded at the
// positions it copies, so its replay takes the branch the original took
// (without them, the copied step on the new branch would be
// non-deterministic); a marker past the fork's position is not copied,
// and the fork decides it afresh.
func TestForkOfAPatchedTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var r runCounter
		wf := sdk.NewWorkflow("order.patched", 1, func(ctx workflow.Context, _ string) (string, error) {
			if _, err := workflow.Step(ctx, "a", func(context.Context) (string, error) { r.ran(0); return "a", nil }, nil); err != nil {
				return "", err
			}
			name := "b-old"
			if workflow.Patched(ctx, "new-b") {
				name = "b-new"
			}
			b, err := workflow.Step(ctx, name, func(context.Context) (string, error) { r.ran(1); return name, nil }, nil)
			if err != nil {
				return "", err
			}
			return workflow.Step(ctx, "c", func(context.Context) (string, error) { r.ran(2); return b + "+c", nil }, nil)
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "", nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)

		at1, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 1})
		require.NoError(t, err)
		fork := waitTask(t, b.client, at1)
		require.Equal(t, history.StatusCompleted, fork.Status, "%+v", fork.LastError)
		out, err := sdk.Output[string](fork)
		require.NoError(t, err)
		require.Equal(t, "b-new+c", out)
		events := taskHistory(t, b.client, at1)
		require.Equal(t, []history.Type{history.TaskScheduled, history.StepCompleted, history.PatchRecorded, history.StepCompleted,
			history.AttemptStarted, history.StepCompleted, history.TaskCompleted}, eventTypes(events))
		marker := eventsOf[history.PatchRecordedData](events)[0]
		require.Equal(t, "new-b", marker.PatchID)
		require.NotZero(t, marker.CopiedFromSeq)

		at0, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 0})
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, at0).Status)
		markers := eventsOf[history.PatchRecordedData](taskHistory(t, b.client, at0))
		require.Len(t, markers, 1)
		require.Zero(t, markers[0].CopiedFromSeq, "decided afresh by the fork's own run")
		require.Equal(t, map[int]int{0: 1, 1: 2, 2: 3}, r.counts())
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Reset of a run that continued as new cancels its chain's current run
// (waiting in its second run), and the fork starts the first run's work
// again from the copied step.
func TestResetOfAContinuedRunCancelsItsChain(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		wf := sdk.NewWorkflow("order.chain", 1, func(ctx workflow.Context, round int) (int, error) {
			if _, err := workflow.Step(ctx, "work", func(context.Context) (int, error) { return round, nil }, nil); err != nil {
				return 0, err
			}
			if round == 0 {
				return 0, workflow.ContinueAsNew(ctx, round+1)
			}
			_, _, err := workflow.Receive[string](ctx, "go", time.Hour)
			return round, err
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, 0, nil)
		require.NoError(t, err)
		var next *uuid.UUID
		enginetest.WaitFor(t, "the first run continued as new and the next one waits", func() bool {
			info, err := b.client.Get(ctx, res.ID)
			if err != nil || info.Status != history.StatusContinued || info.ContinuedAs == nil {
				return false
			}
			next = info.ContinuedAs
			cur, err := b.client.Get(ctx, *next)
			return err == nil && cur.Waiting != nil
		})
		forkID, err := b.client.Reset(ctx, res.ID, sdk.ResetOpts{ForkOpts: sdk.ForkOpts{At: 0}})
		require.NoError(t, err)
		require.Equal(t, history.StatusCancelled, waitTask(t, b.client, *next).Status, "the chain's current run is cancelled")
		orig, err := b.client.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, history.StatusContinued, orig.Status, "the run reset stays continued")
		// The fork replays the first run's step and continues as new
		// itself, into a run that waits.
		enginetest.WaitFor(t, "the fork continued as new", func() bool {
			info, err := b.client.Get(ctx, forkID)
			return err == nil && info.Status == history.StatusContinued
		})
		stopWorker(t, b.worker)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// Forks lists at most MaxForksListed forks, the first made. Not parallel:
// it lowers the bound for the package while it runs (its subtests, on
// each store, run before any parallel test is let go).
func TestForksListsAtMostTheBound(t *testing.T) {
	t.Cleanup(sdk.SetMaxForksListed(2))
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		var r runCounter
		wf := fiveSteps("order.forkbound", &r, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()
		res, err := sdk.Start(ctx, b.client, wf, "o-9", nil)
		require.NoError(t, err)
		waitTask(t, b.client, res.ID)
		stopWorker(t, b.worker)
		var made []string
		for range 3 {
			id, err := b.client.Fork(ctx, res.ID, sdk.ForkOpts{At: 0})
			require.NoError(t, err)
			made = append(made, id.String())
		}
		forks, err := b.client.Forks(ctx, res.ID)
		require.NoError(t, err)
		require.Len(t, forks, 2)
		require.Equal(t, made[:2], []string{forks[0].TaskID, forks[1].TaskID})
	})
}
