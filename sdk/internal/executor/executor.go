package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// Type is a registered workflow type as the executor runs it.
type Type struct {
	// Func is the workflow (see [interpreter.Typed]). Required.
	Func interpreter.Func
	// Retry is the type's retry policy: budget, backoff and classifier.
	// Steps may override it (their StepOptions.Retry).
	Retry activities.RetryPolicy
	// SkipDeadLetter ends tasks that give up as failed (task_failed)
	// instead of dead-lettered.
	SkipDeadLetter bool
	// MaxRunningChildren caps how many of a task's children run at once;
	// 0 is interpreter.DefaultMaxRunningChildren.
	MaxRunningChildren int
}

// HandlerConfig configures a [Handler].
type HandlerConfig struct {
	// Types are the workflow types the handler runs, by type and version:
	// the ones the processor claims. The handler keeps the map and never
	// writes it; the caller must not write it either once it is handed over.
	Types map[store.TypeKey]Type
	// WorkerID names the worker in the attempt spans.
	WorkerID string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, makes each attempt a span (and each step a
	// child span) under the trace the task was started with. Default nil:
	// no spans.
	TracerProvider trace.TracerProvider
	// MaxPayloadBytes bounds the JSON of each step's output and of the
	// workflow's output: an attempt with one over it fails permanently
	// (kind payload_too_large) and the output is not recorded. 0: no
	// bound.
	MaxPayloadBytes int
	// BlobThreshold is the blob threshold of the worker's payload stage: a
	// step's output, or a workflow's, of more bytes is kept in the task's
	// blobs when it is encoded, so MaxPayloadBytes does not bound it. 0:
	// no output is moved.
	BlobThreshold int
	// MaxHistoryEvents bounds a task's history: an attempt that finds it
	// at the bound, or would write past it, fails the task permanently
	// (kind history_too_large). 0: no bound.
	MaxHistoryEvents int
	// HeldBackLinger bounds how long a parent whose starts the cap on
	// running children holds back waits for them within its attempt
	// before it records the wait. 0: DefaultHeldBackLinger; negative:
	// it records the wait at once.
	HeldBackLinger time.Duration
	// HeldBackLingerFrom is the history length (events) from which such
	// a parent waits within its attempt: a shorter history replays
	// cheaply, and a waiting parent holds its slot. 0:
	// DefaultHeldBackLingerFrom; negative: any length.
	HeldBackLingerFrom int
	// Strand, when set, is asked about a task whose run is
	// non-deterministic (with the time its first attempt started): true
	// releases the task (task_released) instead of failing it, for a
	// worker with compatible code (the deploy check's skip policy, which
	// then no longer claims it).
	Strand func(taskID uuid.UUID, key store.TypeKey, firstStarted time.Time, err error) bool
	// ModelLimiter, when set, returns the model rate limiter of a
	// namespace's store (nil: none): steps whose Spend names a model
	// with a limit wait their turn before they run (modellimit.go).
	ModelLimiter func(namespace string) *engine.ModelLimiter
}

// Handler runs the attempts the engine's processor claims, behind the
// SDK's edge: a worker hands the engine's processors the [engine.Handler]
// that sdk/internal/edge makes of it, which decodes what the attempt
// reads and takes only encoded events back. It holds no mutable state
// but the notes of its running attempts' waits under model limits:
// each call works on its own attempt, so calls may run concurrently.
type Handler struct {
	types          map[store.TypeKey]Type // read-only after NewHandler
	workerID       string
	logger         *slog.Logger
	tracerProvider trace.TracerProvider // nil: no spans
	maxPayload     int                  // 0: outputs are not bounded
	blobThreshold  int                  // 0: outputs stay in the history
	maxHistory     int64                // 0: histories are not bounded
	linger         time.Duration        // HandlerConfig.HeldBackLinger; <= 0: none
	lingerFrom     int64                // HandlerConfig.HeldBackLingerFrom
	strand         func(uuid.UUID, store.TypeKey, time.Time, error) bool
	gates          []gate // what a new step passes before it runs, in order
	modelLimiter   func(namespace string) *engine.ModelLimiter
	waits          sync.Map // *edge.Attempt -> *waitNotes, while the attempt runs with gates
}

// NewHandler returns a handler for cfg.
func NewHandler(cfg HandlerConfig) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeldBackLinger == 0 {
		cfg.HeldBackLinger = DefaultHeldBackLinger
	}
	if cfg.HeldBackLingerFrom == 0 {
		cfg.HeldBackLingerFrom = DefaultHeldBackLingerFrom
	}
	h := &Handler{types: cfg.Types, workerID: cfg.WorkerID, logger: cfg.Logger, tracerProvider: cfg.TracerProvider,
		maxPayload: cfg.MaxPayloadBytes, blobThreshold: cfg.BlobThreshold, maxHistory: int64(cfg.MaxHistoryEvents),
		linger: cfg.HeldBackLinger, lingerFrom: int64(cfg.HeldBackLingerFrom), strand: cfg.Strand}
	// Budgets first, then model rate limits (issue 38): a step a budget
	// refuses waits for no rate limit.
	h.gates = append(h.gates, (&budgets{scopes: map[string]scopeEntry{}}).gate)
	if cfg.ModelLimiter != nil {
		h.modelLimiter = cfg.ModelLimiter
		h.gates = append(h.gates, h.modelLimitGate) // after the budgets' gate
	}
	return h
}

// HandleAttempt implements [edge.Handler]: it runs the workflow against
// the task's history and turns the run's result into the events that end
// the attempt. The engine's processor calls it, on the attempt's goroutine.
func (h *Handler) HandleAttempt(ctx context.Context, a *edge.Attempt) (events edge.Events, err error) {
	ctx, tr := h.startAttemptTrace(ctx, a, a.State().Attempt)
	defer func() {
		if errors.Is(err, engine.ErrEnded) {
			tr.end(nil, nil) // ended well: continued as new
			return
		}
		tr.end(err, events.Payloads())
	}()
	events, err = h.handleAttempt(ctx, a, tr)
	if err == nil {
		err = settleLeftovers(a)
	}
	if err == nil {
		err = closeChildren(a, events.Payloads())
	}
	return events, err
}

// closeChildren applies the parent close policy of the task's unfinished
// children when payloads end it other than completed, before they are
// appended: a crash between the two runs the attempt again, which closes
// them again (harmlessly) before it ends the task.
func closeChildren(a *edge.Attempt, payloads []history.Payload) error {
	if len(payloads) == 0 || len(a.State().Children) == 0 {
		return nil
	}
	var reason string
	switch payloads[len(payloads)-1].(type) {
	case history.TaskCancelledData:
		reason = "was cancelled"
	case history.TaskFailedData:
		reason = "failed"
	case history.TaskDeadLetteredData:
		reason = "was dead-lettered"
	default:
		return nil
	}
	if err := a.CloseChildren(a.DurableContext(), reason); err != nil {
		return errors.Wrap(err, "close the task's children")
	}
	return nil
}

// startChildren writes a run's child starts for attempt a.
func startChildren(a *edge.Attempt, reqs []interpreter.ChildRequest) error {
	children := make([]store.ChildStart, len(reqs))
	now := engine.Now()
	inherited, err := inheritedBudgets(a)
	if err != nil {
		return err
	}
	for i, r := range reqs {
		sched := history.TaskScheduledData{
			TaskType: r.TaskType, TypeVersion: r.TypeVersion, Queue: r.Options.Queue, Priority: r.Options.Priority,
			Input: r.Input, MaxAttempts: history.AttemptBudget(r.Options.MaxAttempts), Labels: r.Options.Labels, FairnessKey: r.Options.FairnessKey,
			TraceID: a.Task.TraceID, Budget: r.Options.Budget, Budgets: inherited,
		}
		if sched.FairnessKey == "" {
			// The child's work is for the parent's tenant: it shares the
			// tenant's turns, counts against its budgets and in its usage.
			sched.FairnessKey, sched.FairnessWeight = a.Task.FairnessKey, a.Task.FairnessWeight
		}
		if sched.Queue == "" {
			sched.Queue = "default"
		}
		if d := r.Options.ScheduleToClose; d > 0 {
			dl := now.Add(d)
			sched.Deadline = &dl
		}
		children[i] = store.ChildStart{
			Task: store.TaskStartParams{Namespace: a.Task.Namespace, Scheduled: sched}, OnParentClose: r.Options.OnParentClose,
		}
	}
	_, err = a.StartChildren(a.DurableContext(), children)
	if errors.Is(err, store.ErrIdempotencyKeyReused) {
		// A child's key held by a task that is not this parent's child
		// (squatted): starting again would find it again.
		err = activities.WithKind(activities.Permanent(err), KindChildKeyTaken)
	}
	return err
}

// KindChildKeyTaken is the error kind of a parent whose child's
// idempotency key is held by a task that is not its child.
const KindChildKeyTaken = "child_key_taken"

func (h *Handler) handleAttempt(ctx context.Context, a *edge.Attempt, tr *attemptTrace) (edge.Events, error) {
	key := store.TypeKey{Type: a.Task.Type, Version: a.Task.TypeVersion}
	typ, ok := h.types[key]
	state := a.State()
	if !ok {
		// Claims filter by registered types, so this is a wiring bug.
		return edge.Events{}, errors.AssertionFailedf("claimed task %s of unregistered type %s", a.Task.ID, key)
	}
	if state.Compensation != nil || state.CancelRequested {
		// A cancel or compensation request, or compensation cut short by
		// a failed attempt: this attempt goes straight to compensation.
		var cause *history.ErrorInfo
		if state.Compensation != nil {
			cause = state.Compensation.Cause
		}
		return h.compensate(a, typ, compensationReason(state), cause, edge.Events{})
	}
	if h.maxHistory > 0 && state.LastSeq >= h.maxHistory {
		info := history.ErrorInfo{Class: history.Permanent, Kind: KindHistoryTooLarge, ClassifiedBy: "rule:" + KindHistoryTooLarge,
			Message: h.historyTooLarge(state.LastSeq).Error()}
		if len(compensablePositions(state)) > 0 {
			return h.compensate(a, typ, history.CompensateFailed, &info, edge.Events{})
		}
		return a.Encode(ctx, h.giveUp(typ, state, info, "history too large")...)
	}
	state, err := resolveOutputs(ctx, a, state)
	if err != nil {
		return h.unreadableOutput(ctx, a, typ, state, err)
	}
	input, err := a.Input(ctx)
	if err != nil {
		return h.unreadableOutput(ctx, a, typ, state, err)
	}
	taskID := a.Task.ID.String()
	runCtx, irreversibleCtx := ctx, a.LeaseContext()
	if dl := state.Scheduled.Deadline; dl != nil {
		if !engine.Now().Before(*dl) {
			info := history.ErrorInfo{
				Class: history.Permanent, Kind: kindDeadline, ClassifiedBy: "rule:" + kindDeadline,
				Message: fmt.Sprintf("deadline %s passed before attempt %d began", dl.Format(time.RFC3339), state.Attempt),
			}
			if len(compensablePositions(state)) > 0 {
				return h.compensate(a, typ, history.CompensateFailed, &info, edge.Events{})
			}
			return a.Encode(ctx, h.giveUp(typ, state, info, "deadline passed")...)
		}
		var cancel, cancelIrreversible context.CancelFunc
		runCtx, cancel = context.WithDeadlineCause(ctx, *dl, errDeadline)
		defer cancel()
		irreversibleCtx, cancelIrreversible = context.WithDeadlineCause(irreversibleCtx, *dl, errDeadline)
		defer cancelIrreversible()
	}
	var refused *history.StepCompletedData // the step whose output Record refused as too large
	children := &childrenView{}
	streams := newStreamWriter(a, state.Attempt, h.logger)
	defer streams.stop()
	if len(h.gates) > 0 {
		h.waits.Store(a, &waitNotes{})
		defer h.waits.Delete(a)
	}
	res := interpreter.Run(interpreter.RunParams{
		TaskID: taskID, Attempt: state.Attempt, Steps: state.Steps, Ahead: state.Ahead, Patches: state.Patches,
		Context: runCtx, Stopping: a.Stopping(),
		StepContext: func(s interpreter.StepInfo) context.Context {
			base := runCtx
			if s.Irreversible {
				base = irreversibleCtx // a cancel request does not stop it
			}
			base = activity.WithStream(base, streams.step(s.Position))
			return activity.WithInfo(activity.WithBlobs(tr.stepContext(base, s), stepBlobs{a.Blobs(), s.Name, s.Position}), activities.Info{
				TaskID: taskID, TaskType: a.Task.Type, Attempt: state.Attempt, WorkerID: a.WorkerID(),
				Step: s.Name, Position: s.Position,
				IdempotencyKey: activity.IdempotencyKey(taskID, s.Position, s.Name),
				TraceID:        a.Task.TraceID,
			})
		},
		StepDone: func(s interpreter.StepInfo, err error) {
			if err != nil {
				streams.rewindStep(s.Position) // readers learn at once
			}
			tr.stepDone(s, err)
		},
		Gate:   stepGate(a, h.gates),
		Stream: func(name string, data json.RawMessage) error { return streams.write(name, -1, data) },
		Timer:  state.Timer, Mailbox: func() interpreter.Mailbox {
			state := a.State()
			state.Signals = a.Signals(a.DurableContext(), state.Signals)
			return interpreter.MailboxOf(state)
		}, Now: engine.Now,
		Children:      func() []history.Child { return children.get(a.DurableContext(), a) },
		Updates:       func() []history.Update { return a.Updates(a.DurableContext(), a.StateUpdates()) },
		StartChildren: func(reqs []interpreter.ChildRequest) error { return startChildren(a, reqs) },
		Remote:        state.Remote,
		DispatchRemote: func(ds []history.RemoteStepDispatchedData) error {
			return a.DispatchRemote(a.DurableContext(), ds)
		},
		MaxRunningChildren: typ.MaxRunningChildren,
		AwaitChildEnds: func(positions []int, count int) bool {
			// At the history's bound the wait is recorded, and the next
			// attempt ends the task as any at the bound.
			n := a.LastSeq()
			atBound := h.maxHistory > 0 && n >= h.maxHistory
			return h.linger > 0 && n >= h.lingerFrom && !atBound && a.AwaitChildEnds(runCtx, positions, count, h.linger)
		},
		Record: func(step history.Payload) error {
			// Record even if the attempt context was cancelled by a stop
			// while the step ran: the step did finish. The lease fence
			// still refuses a stale attempt.
			step = h.limitUpdate(step)
			if err := h.oversizedStep(step); err != nil {
				done := step.(history.StepCompletedData)
				refused = &done
				return err
			}
			ev, err := h.encodeStep(a, step)
			if err != nil {
				return err
			}
			if ev, err = h.withClosedStreams(ctx, a, streams, step, ev); err != nil {
				return err
			}
			if ev, err = h.withWaited(ctx, a, step, ev); err != nil {
				return err
			}
			if err := a.Append(a.DurableContext(), ev); err != nil {
				return err
			}
			// The step ran and is recorded (so compensated if it must be);
			// past the bound the run ends here.
			if n := a.LastSeq(); h.maxHistory > 0 && n >= h.maxHistory {
				return activities.WithKind(activities.Permanent(h.historyTooLarge(n)), KindHistoryTooLarge)
			}
			return nil
		},
	}, typ.Func, input)
	// The outputs are checked as they are before they pass through the
	// stage (one kept by reference is not over the limit), then encoded
	// (kept as blobs, sealed): a failure there fails the run.
	res = h.limitOutputs(res, refused)
	var pending edge.Events // res.Pending, encoded
	if res.Pending != nil {
		if pending, err = h.encodeStep(a, res.Pending); err == nil {
			pending, err = h.withClosedStreams(ctx, a, streams, res.Pending, pending)
		}
		if err == nil {
			pending, err = h.withWaited(ctx, a, res.Pending, pending)
		}
		if err != nil {
			if res.Err == nil {
				res.Err = err
			}
			res.Pending = nil
		}
	}
	if res.Err == nil && res.Continue != nil {
		res.Err = h.checkContinue(res.Continue)
	}
	var completed edge.Events // task_completed with res.Output, encoded
	if res.Err == nil && res.Continue == nil {
		if completed, err = h.encodeOutput(a, res.Output); err != nil {
			res.Err = err
		}
	}
	if res.Err != nil && errors.Is(context.Cause(runCtx), errDeadline) {
		res.Err = errmark.Mark(res.Err, errDeadline)
	}
	if !errors.Is(res.Err, interpreter.ErrStopping) && cancelRequested(ctx, a) && a.LeaseContext().Err() == nil {
		// Cancelled while running: it stopped at a checkpoint (or its step
		// was cancelled), or it finished with a step the cancel did not stop
		// (an irreversible one): a cancel recorded before the task's end
		// wins, so undo what it completed rather than complete.
		return h.compensate(a, typ, history.CompensateCancelled, nil, pending)
	}
	if res.Err == nil && res.Continue != nil {
		events, done, err := h.continueAsNew(a, typ, res.Continue, pending)
		if done {
			return events, err
		}
		// Not written (a full queue, a database error, ...): the attempt
		// fails, to try again, its last step recorded with the failure.
		res.Err, res.Continue = err, nil
	}
	events := completed
	if res.Err != nil {
		payloads, err := h.outcome(ctx, a, typ, res)
		payloads = withStepUsage(payloads, res.StepUsage)
		var ec *errCompensate
		if errors.As(err, &ec) {
			return h.compensate(a, typ, history.CompensateFailed, &ec.cause, pending)
		}
		if err != nil {
			if res.Pending != nil {
				// No outcome to write it with (the task is released, or the
				// attempt interrupted): record the finished step on its own,
				// so it does not run again.
				if recErr := a.Append(a.DurableContext(), pending); recErr != nil {
					h.logger.Warn("worker: record last step", "task_id", a.Task.ID, "err", recErr.Error())
				}
			}
			return edge.Events{}, err
		}
		if events, err = a.Encode(ctx, payloads...); err != nil {
			return edge.Events{}, err
		}
	}
	if closed := streams.finish(); len(closed) > 0 {
		// The streams the attempt leaves (rewound, the body's ended),
		// recorded before the outcome ends its lease.
		if ev, err := a.Encode(ctx, closed...); err == nil {
			events = ev.Then(events)
		}
	}
	if res.Pending == nil {
		return events, nil
	}
	// The last step's completion goes in the same append as the outcome:
	// one round trip and one row update fewer per task.
	return pending.Then(events), nil
}

// cancelRequested says whether the task's cancel reached the attempt: its
// context was cancelled for it, or an append of the attempt's brought the
// cancel_requested into its state.
func cancelRequested(ctx context.Context, a *edge.Attempt) bool {
	return errors.Is(context.Cause(ctx), engine.ErrCancelRequested) || a.State().CancelRequested
}

// DefaultHeldBackLinger bounds how long a parent whose starts the cap on
// running children holds back waits within its attempt for some of them
// to end (a tenth, to start more) before it records the wait and gives
// its slot back: children quicker than that are started in the same
// attempt, not by a wake that reads and replays the whole history again.
const DefaultHeldBackLinger = time.Second

// DefaultHeldBackLingerFrom is the history length from which a held-back
// parent waits within its attempt: some 2,000 children. Below it a wake
// costs little, and a parent waiting holds a worker slot (a tree's
// chunks, 1,000 children each, would hold a slot each).
const DefaultHeldBackLingerFrom = 4_000

// kindDeadline is the error kind of an attempt cut off by its task's
// schedule-to-close deadline. It is always permanent.
const kindDeadline = "schedule_to_close_timeout"

var errDeadline = errors.New("task deadline passed")

// outcome maps the result of a run that did not complete (res.Err) to
// the events that end the attempt.
func (h *Handler) outcome(ctx context.Context, a *edge.Attempt, typ Type, res interpreter.Result) ([]history.Payload, error) {
	var sleep *interpreter.SleepRequest
	if errors.As(res.Err, &sleep) {
		// The attempt ends here; the task is due again when the timer fires.
		return []history.Payload{history.TimerStartedData{Position: sleep.Position, FireAt: sleep.FireAt}}, nil
	}
	var childWait *interpreter.ChildWaitRequest
	if errors.As(res.Err, &childWait) {
		// The attempt ends here; the task is due again when one of the
		// children finishes.
		return []history.Payload{history.ChildWaitStartedData{Positions: childWait.Positions, Count: childWait.Count}}, nil
	}
	var remoteWait *interpreter.RemoteWaitRequest
	if errors.As(res.Err, &remoteWait) {
		if remoteEnded(a.State(), remoteWait.Positions) {
			// An outcome came while the attempt ran (an append rebased
			// onto it): the task is handed back, due at once, and its next
			// attempt takes the outcome in.
			return nil, engine.ErrReleased
		}
		// The attempt ends here; the task is due again when the remote
		// steps complete, or one fails.
		return []history.Payload{history.RemoteWaitStartedData{Positions: remoteWait.Positions, Count: remoteWait.Count}}, nil
	}
	var wait *interpreter.WaitRequest
	if errors.As(res.Err, &wait) {
		// The attempt ends here; the task is due again when a signal of
		// the name arrives or at the deadline.
		return []history.Payload{history.WaitStartedData{Name: wait.Name, Position: wait.Position, Deadline: wait.Deadline, Select: wait.Select}}, nil
	}
	if errors.Is(res.Err, interpreter.ErrStopping) {
		return nil, engine.ErrReleased
	}
	if errors.Is(res.Err, errBudgetWaiting) {
		// The refusal ended the attempt: the task waits for a raise.
		return nil, engine.ErrEnded
	}
	var deferred *deferredBudgetWait
	if errors.As(res.Err, &deferred) {
		// A future's refusal stopped the run: written now, it ends the
		// attempt waiting; else the attempt fails as the refusal says.
		ended, runErr, err := endDeferredWait(a, deferred)
		switch {
		case err != nil:
			return nil, err
		case ended:
			return nil, engine.ErrEnded
		}
		res.Err = runErr
	}
	if h.strand != nil && errors.Is(res.Err, interpreter.ErrNondeterministic) &&
		h.strand(a.Task.ID, store.TypeKey{Type: a.Task.Type, Version: a.Task.TypeVersion}, a.State().StartedAt, res.Err) {
		// Stranded: left to a worker whose code replays it.
		return nil, engine.ErrReleased
	}
	if ctx.Err() != nil {
		// The attempt was interrupted, not failed: by a stop (hand the task
		// back) or by a lost lease (another worker owns it; write nothing).
		select {
		case <-a.Stopping():
			if !errors.Is(context.Cause(ctx), engine.ErrLeaseLost) {
				return nil, engine.ErrReleased
			}
		default:
		}
		return nil, errors.Wrapf(context.Cause(ctx), "attempt of task %s interrupted", a.Task.ID)
	}
	state := a.State()
	now := engine.Now()
	if res.Pending != nil {
		// The last step finished in this attempt but is not on record
		// yet; the budget in use is the one after it.
		if next, err := history.Apply(state, history.Event{Seq: state.LastSeq + 1, At: now, Attempt: state.Attempt, Data: res.Pending}); err == nil {
			state = next
		}
	}
	elapsed := now.Sub(state.Budget.Since)
	info := h.classify(a.Task, typ, res, state.Budget.Attempts, elapsed)
	policy := typ.Retry
	// As started (StartOpts.MaxAttempts, ChildOpts.MaxAttempts may override
	// the type's), read as the rescuer reads it: 0 is the default budget.
	policy.MaxAttempts = history.AttemptBudget(state.Scheduled.MaxAttempts)
	if res.StepOptions != nil && res.StepOptions.Retry != nil {
		policy = *res.StepOptions.Retry
	}
	decision := policy.Decide(info, state.Budget.Attempts, elapsed, rand.Float64)
	final := info.Class == history.Permanent // no requeue can help either
	if dl := state.Scheduled.Deadline; decision.Retry && dl != nil && now.Add(decision.Delay).After(*dl) {
		decision = activities.Decision{Reason: fmt.Sprintf("deadline %s comes before the next attempt would", dl.Format(time.RFC3339))}
		final = true
	}
	if !decision.Retry {
		if final && len(compensablePositions(state)) > 0 {
			return nil, &errCompensate{cause: info}
		}
		return h.giveUp(typ, state, info, decision.Reason), nil
	}
	next := now.Add(decision.Delay)
	return []history.Payload{history.AttemptFailedData{Error: info, NextRunAt: &next}}, nil
}

// remoteEnded reports whether a remote step at one of positions is no
// longer in flight in state: its outcome was appended while the attempt
// ran, and a wait for it could not be recorded.
func remoteEnded(state history.State, positions []int) bool {
	for _, pos := range positions {
		if r, ok := state.RemoteAt(pos); !ok || !r.InFlight() {
			return true
		}
	}
	return false
}

// giveUp ends the task after a failed attempt: dead-lettered for an
// operator, or failed where the type says so.
func (h *Handler) giveUp(typ Type, state history.State, info history.ErrorInfo, reason string) []history.Payload {
	failed := history.AttemptFailedData{Error: info}
	if typ.SkipDeadLetter {
		return []history.Payload{failed, history.TaskFailedData{Error: info}}
	}
	return []history.Payload{failed, history.TaskDeadLetteredData{
		Reason: fmt.Sprintf("%s (attempt %d)", reason, state.Attempt), Error: info,
	}}
}

// withStepUsage puts the AI usage of the step whose failure ended the run
// on the attempt_failed among payloads: a failed model call is paid for
// too, and the history and metrics should say so.
func withStepUsage(payloads []history.Payload, usage []history.Usage) []history.Payload {
	if len(usage) == 0 {
		return payloads
	}
	for i, p := range payloads {
		if failed, ok := p.(history.AttemptFailedData); ok {
			failed.Usage = usage
			payloads[i] = failed
		}
	}
	return payloads
}

var _ edge.Handler = (*Handler)(nil)

// KindHistoryTooLarge is the error kind of a task whose history reached
// the worker's MaxHistoryEvents.
const KindHistoryTooLarge = "history_too_large"

func (h *Handler) historyTooLarge(events int64) error {
	return errors.Newf("the history holds %d events, at the limit of %d (MaxHistoryEvents): a workflow this long should continue as a new task, or hand work to children", events, h.maxHistory)
}
