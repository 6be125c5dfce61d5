package processor

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

var (
	// ErrReleased is returned by a [Handler] that gave its attempt up
	// because the worker is stopping; the processor appends task_released so
	// another worker takes the task at once.
	ErrReleased = errors.New("attempt released: worker stopping")
	// ErrLeaseLost is the cancellation cause of an attempt's context when
	// its lease could not be renewed or passed to another epoch.
	ErrLeaseLost = errors.New("lease lost")
	// ErrCancelRequested is the cancellation cause of an attempt's context
	// when the task's cancel was requested.
	ErrCancelRequested = errors.New("task cancel requested")
	// ErrEnded is returned by a [Handler] that wrote the end of its
	// attempt itself ([Attempt.ContinueAsNew]): the processor appends
	// nothing and frees the attempt's slot.
	ErrEnded = errors.New("attempt ended by its handler")
	// ErrSignalArrived is returned by [Attempt.ContinueAsNew] when a
	// signal reached the run before its continue was written: the handler
	// hands the attempt back (task_released), so that the workflow
	// replays with the signal.
	ErrSignalArrived = errors.New("a signal arrived before the run continued as new")
)

// Handler runs attempts of claimed tasks. The SDK's attempt executor
// (sdk/internal/executor) implements it; the engine knows nothing of
// workflows.
//
// HandleAttempt is called on its own goroutine for each claimed attempt,
// with a context cancelled when the lease is lost or a hard stop is
// requested. It may append events for the attempt (step_completed) through
// [Attempt.Append] while it runs, and returns the events that end the attempt
// (task_completed; attempt_failed with a next run time; attempt_failed and
// then task_failed or task_dead_lettered), which the processor appends fenced
// by the lease epoch. It returns [ErrReleased] to hand the task back; any
// other error appends nothing, and the task is rescued when its lease
// expires.
type Handler interface {
	HandleAttempt(ctx context.Context, a *Attempt) ([]history.Payload, error)
}

// Attempt is one claimed attempt of a task, handed to a [Handler]. Its
// methods are for the handler's goroutine only.
type Attempt struct {
	// Task is the projection row as claimed.
	Task *store.Task

	proc *Processor
	// mu serializes what writes state from the run's goroutines: Append
	// (a parallel step's record) and the budget calls.
	mu       sync.Mutex
	state    history.State   // replay up to now; written by Append on the handler goroutine
	ctx      context.Context // the attempt's context, handed to the handler: ends on a cancel request too
	leaseCtx context.Context // ends only when the lease is lost or the worker stops hard
}

// LeaseContext returns a context that, unlike the handler's, is not
// cancelled when the task's cancel is requested: for work that must run to
// completion once started (irreversible steps, compensators). It ends when
// the lease is lost or the worker stops hard.
func (a *Attempt) LeaseContext() context.Context { return a.leaseCtx }

// SyncCancel brings the attempt's state up to date with a cancel request
// appended since the attempt began (it may have learned of it from a
// notification or a heartbeat reply, before its own history showed it).
// Only cancel_requested (and signal_received and child_finished, which
// a running attempt takes in when it next looks) may have been appended
// meanwhile; anything else is an error marked ErrConflict.
func (a *Attempt) SyncCancel(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state.CancelRequested {
		return nil
	}
	return a.syncRequests(ctx)
}

// State returns the task's state as replayed from its history, including
// what this attempt has appended so far. Any of the run's goroutines may
// call it: a parallel step's budget calls write the state too.
func (a *Attempt) State() history.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// StateUpdates returns the updates of the task's state, as [Attempt.State]
// would, without copying the whole state: the interpreter asks at every
// call of the workflow API, on the attempt's goroutine, whose stack a copy
// of the state (some 900 bytes, twice over) made outgrow its first size.
func (a *Attempt) StateUpdates() []history.Update {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state.Updates
}

// LastSeq returns the seq of the last event of the task's state, as
// [Attempt.State] would, without copying the whole state.
func (a *Attempt) LastSeq() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state.LastSeq
}

// Store returns the store the attempt's processor works in, for what its
// handler keeps beside the task's history (the task's blobs).
func (a *Attempt) Store() store.Store { return a.proc.cfg.Store }

// WorkerID returns the id of the worker holding the lease.
func (a *Attempt) WorkerID() string { return a.proc.cfg.WorkerID }

// Stopping is closed when the worker begins a graceful stop: a handler
// should give the task back (return [ErrReleased]) at its next checkpoint
// instead of starting more work.
func (a *Attempt) Stopping() <-chan struct{} { return a.proc.stopping }

// DurableContext returns a context for recording what the attempt has
// done: it outlives a stop, so a step that finished during a graceful stop
// is still recorded, and ends only when the whole worker is abandoned (the
// context given to Start is cancelled), as nothing more is written after a
// crash.
func (a *Attempt) DurableContext() context.Context { return a.proc.baseCtx }

// Append appends events for this attempt, fenced by its lease epoch. It
// returns an error marked [store.ErrFenced] once the attempt's lease has passed to
// another epoch.
func (a *Attempt) Append(ctx context.Context, payloads ...history.Payload) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next, err := a.proc.appender.append(ctx, a.appendParams(payloads))
	if err != nil {
		return err
	}
	a.state = next
	if next.CancelRequested {
		// A cancel arrived since the attempt began (the append was
		// rebased onto it): stop at the next checkpoint.
		a.proc.requestCancel(a.Task.ID)
	}
	return nil
}

// appendParams fences payloads by the attempt's lease epoch, after what it
// has appended so far.
func (a *Attempt) appendParams(payloads []history.Payload) *store.EventAppendParams {
	return &store.EventAppendParams{
		TaskID: a.Task.ID, State: a.state, Epoch: a.state.Lease.Epoch,
		Attempt: a.state.Attempt, Payloads: payloads,
		AttemptStartedAt: a.Task.UpdatedAt, // the claim's time, which attempt_started records
	}
}

// StreamAppend writes entries to the task's streams for this attempt,
// fenced by its lease epoch ([store.Executor.StreamAppend]); an error
// marked [store.ErrFenced] once the lease has passed to another epoch or
// ended. It may be called from any goroutine (a step's stream flusher):
// it reads only what the claim fixed.
func (a *Attempt) StreamAppend(ctx context.Context, entries []store.StreamWrite) (int64, error) {
	return a.proc.cfg.Store.StreamAppend(ctx, &store.StreamAppendParams{
		Namespace: a.Task.Namespace, TaskID: a.Task.ID, Epoch: a.Task.LeaseEpoch, Entries: entries,
	})
}

// StreamOpenList lists what earlier attempts of the task left open in its
// streams ([store.Executor.StreamOpenList]): chunks of a lost attempt,
// which this attempt rewinds. Any goroutine, as StreamAppend.
func (a *Attempt) StreamOpenList(ctx context.Context) ([]store.StreamOpen, error) {
	return a.proc.cfg.Store.StreamOpenList(ctx, &store.StreamOpenListParams{
		Namespace: a.Task.Namespace, TaskID: a.Task.ID, Before: a.Task.Attempt,
	})
}
