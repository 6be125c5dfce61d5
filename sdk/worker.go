package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
)

// WorkerConfig configures a [Worker]. Zero values take the defaults named
// on each field.
type WorkerConfig struct {
	// Pool is the PostgreSQL connection pool. Required unless Store is
	// set.
	Pool *pgxpool.Pool
	// Store, when set, is the store to use in place of a PostgreSQL store
	// over Pool (the embedded store of engine/sqlitestore, say). Schema
	// and Metrics are then the store's own business.
	Store engine.Store
	// Schema holding cairn's tables. Default "cairn".
	Schema string
	// Namespace whose tasks this worker runs. Default "default".
	Namespace string
	// Queues this worker serves. Default ["default"].
	Queues []string
	// Concurrency is how many tasks run at once. Default 10.
	Concurrency int
	// LeaseTTL is how long a claimed task stays leased without a
	// heartbeat; a crashed worker's tasks are picked up again after it.
	// Default 30s.
	LeaseTTL time.Duration
	// HeartbeatInterval between lease renewals. Default LeaseTTL/3.
	HeartbeatInterval time.Duration
	// PollInterval between claims when no notification arrives. Default 1s.
	PollInterval time.Duration
	// RescueInterval between passes of the rescuer, which reschedules
	// tasks whose lease expired. Default 5s. Negative disables this
	// worker's rescuer (another process must run one).
	RescueInterval time.Duration
	// WorkerID names this worker in leases and history. Default
	// host-pid-random.
	WorkerID string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts what this worker records (see [engine.NewMetrics]).
	// Default nil: no metrics.
	Metrics *engine.Metrics
	// TracerProvider, when set, makes each attempt an OpenTelemetry span
	// (and each step a child span) under the trace the task was started
	// with (StartOpts.TraceID: a W3C traceparent or a trace id). Default
	// nil: no spans.
	TracerProvider trace.TracerProvider
}

// Worker runs registered workflow types. Register workflows, then Start;
// Stop shuts down gracefully.
type Worker struct {
	cfg   WorkerConfig
	store engine.Store

	mu        sync.Mutex
	types     map[engine.TypeKey]registered // written by Register before Start; read by attempts
	processor *engine.Processor
	notifier  *engine.Notifier
	rescuer   *engine.Rescuer
}

type registered struct {
	fn       interpreter.Func
	defaults workflowDefaults
}

// retryFor returns the retry policy for a failure under override (a step's
// policy), else the type's. An override without a classifier keeps the
// type's.
func (r registered) retryFor(override *activities.RetryPolicy) activities.RetryPolicy {
	if override == nil {
		return r.defaults.retry
	}
	policy := *override
	if policy.Classifier == nil {
		policy.Classifier = r.defaults.retry.Classifier
	}
	return policy
}

// NewWorker returns a worker; it does nothing until started.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	store, err := configuredStore(cfg.Store, cfg.Pool, cfg.Schema, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	if err := validateWorkerConfig(&cfg); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = engine.NewWorkerID()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = engine.DefaultNamespace
	}
	return &Worker{cfg: cfg, store: store, types: map[engine.TypeKey]registered{}}, nil
}

// validateWorkerConfig reports a bad setting when the worker is made, not
// when it starts.
func validateWorkerConfig(cfg *WorkerConfig) error {
	if cfg.Concurrency < 0 {
		return errors.Newf("worker: Concurrency %d is negative", cfg.Concurrency)
	}
	if cfg.LeaseTTL < 0 || cfg.HeartbeatInterval < 0 || cfg.PollInterval < 0 {
		return errors.New("worker: LeaseTTL, HeartbeatInterval and PollInterval must not be negative")
	}
	ttl := cfg.LeaseTTL
	if ttl == 0 {
		ttl = 30 * time.Second
	}
	if cfg.HeartbeatInterval >= ttl {
		return errors.Newf("worker: HeartbeatInterval %s must be shorter than LeaseTTL %s", cfg.HeartbeatInterval, ttl)
	}
	for _, q := range cfg.Queues {
		if err := validateName("queue", q); err != nil {
			return errors.Wrap(err, "worker")
		}
	}
	return nil
}

// Register adds a workflow type to w. It panics if the type and version are
// already registered or w has started; see [RegisterSafely].
func Register[In, Out any](w *Worker, wf *Workflow[In, Out]) {
	if err := RegisterSafely(w, wf); err != nil {
		panic(err)
	}
}

// RegisterSafely is [Register] returning an error instead of panicking.
// A worker claims only the types and versions registered with it, so a new
// version can roll out while old tasks finish on workers running old code.
func RegisterSafely[In, Out any](w *Worker, wf *Workflow[In, Out]) error {
	if wf == nil {
		return errors.New("register: workflow is nil")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.processor != nil {
		return errors.Newf("register %s@%d: worker already started", wf.name, wf.version)
	}
	key := engine.TypeKey{Type: wf.name, Version: wf.version}
	if _, dup := w.types[key]; dup {
		return errors.Newf("register %s: already registered", key)
	}
	w.types[key] = registered{fn: interpreter.Typed(wf.fn), defaults: wf.defaults}
	return nil
}

// Start begins running tasks. It returns at once.
//
// Cancelling ctx abandons in-flight work as a crash would (their tasks are
// picked up elsewhere once their leases expire); use [Worker.Stop] to shut
// down gracefully.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.processor != nil {
		return errors.New("worker already started")
	}
	keys := make([]engine.TypeKey, 0, len(w.types))
	for k := range w.types {
		keys = append(keys, k)
	}
	// Record the types so producers without this code (the HTTP API) can
	// start them with the definition's defaults.
	if err := w.registerTypes(ctx); err != nil {
		return err
	}
	w.notifier = engine.NewNotifier(w.store, w.cfg.Logger)
	processor, err := engine.NewProcessor(engine.ProcessorConfig{
		Store: w.store, Notifier: w.notifier, Namespace: w.cfg.Namespace, Queues: w.cfg.Queues,
		Types: keys, Handler: w, Concurrency: w.cfg.Concurrency, LeaseTTL: w.cfg.LeaseTTL,
		HeartbeatInterval: w.cfg.HeartbeatInterval, PollInterval: w.cfg.PollInterval,
		WorkerID: w.cfg.WorkerID, Logger: w.cfg.Logger,
	})
	if err != nil {
		return err
	}
	if w.cfg.RescueInterval >= 0 {
		w.rescuer, err = engine.NewRescuer(engine.RescuerConfig{
			Store: w.store, Owner: w.cfg.WorkerID, Interval: w.cfg.RescueInterval, Logger: w.cfg.Logger,
		})
		if err != nil {
			return err
		}
		if err := w.rescuer.Start(ctx); err != nil {
			return err
		}
	}
	if err := w.notifier.Start(ctx); err != nil {
		return err
	}
	w.processor = processor
	return processor.Start(ctx)
}

// Stop shuts the worker down gracefully: it stops claiming, lets running
// steps finish, and hands back tasks at their next step boundary
// (task_released) so another worker resumes them at once. When ctx is done
// first, it cancels running steps, releases their tasks, and returns
// ctx.Err().
func (w *Worker) Stop(ctx context.Context) error { return w.stop(ctx, false) }

// StopAndCancel shuts down at once: running steps are cancelled and their
// tasks released.
func (w *Worker) StopAndCancel(ctx context.Context) error { return w.stop(ctx, true) }

func (w *Worker) stop(ctx context.Context, cancel bool) error {
	w.mu.Lock()
	processor, notifier, rescuer := w.processor, w.notifier, w.rescuer
	w.mu.Unlock()
	if processor == nil {
		return nil
	}
	var err error
	if cancel {
		err = processor.StopAndCancel(ctx)
	} else {
		err = processor.Stop(ctx)
	}
	notifier.Stop()
	if rescuer != nil {
		rescuer.Stop()
	}
	return err
}

// WorkerID returns the id this worker records as lease owner.
func (w *Worker) WorkerID() string { return w.cfg.WorkerID }

// HandleAttempt implements engine.Handler: it runs the workflow against the
// task's history and turns the run's result into the events that end the
// attempt. It is called by the engine, not by users.
func (w *Worker) HandleAttempt(ctx context.Context, a *engine.Attempt) (payloads []history.Payload, err error) {
	ctx, tr := w.startAttemptTrace(ctx, a, a.State().Attempt)
	defer func() { tr.end(err, payloads) }()
	return w.handleAttempt(ctx, a, tr)
}

func (w *Worker) handleAttempt(ctx context.Context, a *engine.Attempt, tr *attemptTrace) ([]history.Payload, error) {
	key := engine.TypeKey{Type: a.Task.Type, Version: a.Task.TypeVersion}
	w.mu.Lock()
	reg, ok := w.types[key]
	w.mu.Unlock()
	state := a.State()
	if !ok {
		// Claims filter by registered types, so this is a wiring bug.
		return nil, errors.AssertionFailedf("claimed task %s of unregistered type %s", a.Task.ID, key)
	}
	if state.Compensation != nil || state.CancelRequested {
		// A cancel or compensation request, or compensation cut short by
		// a failed attempt: this attempt goes straight to compensation.
		var cause *history.ErrorInfo
		if state.Compensation != nil {
			cause = state.Compensation.Cause
		}
		return w.compensate(a, reg, compensationReason(state), cause, nil)
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
				return w.compensate(a, reg, history.CompensateFailed, &info, nil)
			}
			return w.giveUp(reg, state, info, "deadline passed"), nil
		}
		var cancel, cancelIrreversible context.CancelFunc
		runCtx, cancel = context.WithDeadlineCause(ctx, *dl, errDeadline)
		defer cancel()
		irreversibleCtx, cancelIrreversible = context.WithDeadlineCause(irreversibleCtx, *dl, errDeadline)
		defer cancelIrreversible()
	}
	res := interpreter.Run(interpreter.RunParams{
		TaskID: taskID, Attempt: state.Attempt, Steps: state.Steps,
		Context: runCtx, Stopping: a.Stopping(),
		StepContext: func(s interpreter.StepInfo) context.Context {
			base := runCtx
			if s.Irreversible {
				base = irreversibleCtx // a cancel request does not stop it
			}
			return activities.WithInfo(tr.stepContext(base, s), activities.Info{
				TaskID: taskID, TaskType: a.Task.Type, Attempt: state.Attempt, WorkerID: a.WorkerID(),
				Step: s.Name, Position: s.Position,
				IdempotencyKey: activities.IdempotencyKey(taskID, s.Position, s.Name),
				TraceID:        a.Task.TraceID,
			})
		},
		StepDone: tr.stepDone,
		Timer:    state.Timer, Now: engine.Now,
		Record: func(step history.Payload) error {
			// Record even if the attempt context was cancelled by a stop
			// while the step ran: the step did finish. The lease fence
			// still refuses a stale attempt.
			return a.Append(a.DurableContext(), step)
		},
	}, reg.fn, a.Task.Input)
	if res.Err != nil && errors.Is(context.Cause(runCtx), errDeadline) {
		res.Err = errors.Mark(res.Err, errDeadline)
	}
	if res.Err != nil && !errors.Is(res.Err, interpreter.ErrStopping) &&
		errors.Is(context.Cause(ctx), engine.ErrCancelRequested) && a.LeaseContext().Err() == nil {
		// Cancelled while running: it stopped at a checkpoint (or its step
		// was cancelled); undo what it completed.
		return w.compensate(a, reg, history.CompensateCancelled, nil, res.Pending)
	}
	payloads, err := w.outcome(ctx, a, reg, res)
	payloads = withStepUsage(payloads, res.StepUsage)
	var ec *errCompensate
	if errors.As(err, &ec) {
		return w.compensate(a, reg, history.CompensateFailed, &ec.cause, res.Pending)
	}
	if res.Pending == nil {
		return payloads, err
	}
	if err != nil {
		// No outcome to write it with (the task is released, or the
		// attempt interrupted): record the finished step on its own, so it
		// does not run again.
		if recErr := a.Append(a.DurableContext(), res.Pending); recErr != nil {
			w.cfg.Logger.Warn("worker: record last step", "task_id", a.Task.ID, "err", recErr.Error())
		}
		return payloads, err
	}
	// The last step's completion goes in the same append as the outcome:
	// one round trip and one row update fewer per task.
	return append([]history.Payload{res.Pending}, payloads...), nil
}

// kindDeadline is the error kind of an attempt cut off by its task's
// schedule-to-close deadline. It is always permanent.
const kindDeadline = "schedule_to_close_timeout"

var errDeadline = errors.New("task deadline passed")

// outcome maps a run's result to the events that end the attempt.
func (w *Worker) outcome(ctx context.Context, a *engine.Attempt, reg registered, res interpreter.Result) ([]history.Payload, error) {
	if res.Err == nil {
		return []history.Payload{history.TaskCompletedData{Output: res.Output}}, nil
	}
	var sleep *interpreter.SleepRequest
	if errors.As(res.Err, &sleep) {
		// The attempt ends here; the task is due again when the timer fires.
		return []history.Payload{history.TimerStartedData{Position: sleep.Position, FireAt: sleep.FireAt}}, nil
	}
	if errors.Is(res.Err, interpreter.ErrStopping) {
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
	info := w.classify(a, reg, res, state.Budget.Attempts, elapsed)
	policy := reg.defaults.retry
	if max := state.Scheduled.MaxAttempts; max > 0 {
		policy.MaxAttempts = max // as started: StartOpts.MaxAttempts may override the type's
	}
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
		return w.giveUp(reg, state, info, decision.Reason), nil
	}
	next := now.Add(decision.Delay)
	return []history.Payload{history.AttemptFailedData{Error: info, NextRunAt: &next}}, nil
}

// giveUp ends the task after a failed attempt: dead-lettered for an
// operator, or failed where the type says so.
func (w *Worker) giveUp(reg registered, state history.State, info history.ErrorInfo, reason string) []history.Payload {
	failed := history.AttemptFailedData{Error: info}
	if reg.defaults.skipDeadLetter {
		return []history.Payload{failed, history.TaskFailedData{Error: info}}
	}
	return []history.Payload{failed, history.TaskDeadLetteredData{
		Reason: fmt.Sprintf("%s (attempt %d)", reason, state.Attempt), Error: info,
	}}
}

// classify turns a run's error into evidence, in this order: errors that
// are always permanent (non-determinism, bad input or step options, an
// unstorable output, the task's deadline); marks set in Go code; the CEL
// policy of the failed step, else of the workflow type; the default, which
// is transient for a step's errors and permanent for the workflow body's
// own (re-running the same code on the same history gives the same error).
func (w *Worker) classify(a *engine.Attempt, reg registered, res interpreter.Result, attempts int, elapsed time.Duration) history.ErrorInfo {
	f := activities.Failure{
		Err: res.Err, Default: history.Permanent, DefaultBy: "default:workflow",
		Attempt: attempts, Elapsed: elapsed,
		Task: activities.PolicyTask{Type: a.Task.Type, Queue: a.Task.Queue},
	}
	if res.Step != nil {
		f.Default, f.DefaultBy, f.Step.Name = history.Transient, "default:step", res.Step.Name
	}
	var override *activities.RetryPolicy
	if res.StepOptions != nil {
		override = res.StepOptions.Retry
	}
	policy := reg.retryFor(override).Classifier
	var info history.ErrorInfo
	if kind := alwaysPermanent(res.Err); kind != "" {
		info = activities.Describe(res.Err, history.Permanent)
		info.Class, info.Kind, info.ClassifiedBy = history.Permanent, kind, "rule:"+kind
	} else {
		info = activities.Classify(f, policy)
	}
	if errors.Is(res.Err, interpreter.ErrRecordFailed) && !activities.Marked(info) {
		// The step finished but its result was not saved: run it again.
		info.Class, info.Kind, info.ClassifiedBy = history.Transient, "record_failed", "rule:record_failed"
	}
	if res.Step != nil {
		info.Step, info.Position = res.Step.Name, res.Step.Position
	}
	return info
}

// alwaysPermanent returns the kind of an error no mark or policy may
// retry, or "".
func alwaysPermanent(err error) string {
	switch {
	case errors.Is(err, interpreter.ErrNondeterministic):
		return "nondeterminism"
	case errors.Is(err, interpreter.ErrBadInput):
		return "bad_input"
	case errors.Is(err, interpreter.ErrBadStepOpts):
		return "bad_step_options"
	case errors.Is(err, interpreter.ErrUnstorable):
		return "unstorable_output"
	case errors.Is(err, errDeadline):
		return kindDeadline
	}
	return ""
}

var _ engine.Handler = (*Worker)(nil)
