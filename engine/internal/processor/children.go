package processor

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// maxChildStartTries bounds the retries of a child start that raced an
// append to the parent without its lease (a signal, a cancel request, a
// child's end).
const maxChildStartTries = 5

// StartChildren starts children of the attempt's task, fenced by its
// lease (see [requests.StartChildren]), and returns their task ids in
// order. A signal, cancel request or child's end appended to the
// task meanwhile is taken into the attempt's state and the start tried
// again, as the attempt's appends are rebased onto them.
func (a *Attempt) StartChildren(ctx context.Context, children []store.ChildStart) ([]uuid.UUID, error) {
	a.mu.Lock() // parallel steps' budget calls append too
	defer a.mu.Unlock()
	for try := 0; ; try++ {
		res, err := requests.StartChildren(ctx, a.proc.cfg.Store, &store.ChildStartParams{
			Parent: *a.appendParams(nil), Children: children,
		})
		if errors.Is(err, store.ErrConflict) && try+1 < maxChildStartTries {
			if err := a.syncRequests(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		a.state = res.State
		return res.IDs, nil
	}
}

// syncRequests brings the attempt's state up to date with what others
// appended to the task since; its caller holds a.mu. (See
// [rebaseOntoRequests].) Anything else is
// an error marked ErrConflict. It reads only the events after the state:
// a parent's children end into its log all the while it starts more.
func (a *Attempt) syncRequests(ctx context.Context) error {
	since, err := a.proc.cfg.Store.EventList(ctx, &store.EventListParams{After: map[uuid.UUID]int64{a.Task.ID: a.state.LastSeq}})
	if err != nil {
		return err
	}
	rebased, ok := rebaseOntoRequests(&store.EventAppendParams{TaskID: a.Task.ID, State: a.state}, since[a.Task.ID])
	if !ok {
		return errmark.Mark(errors.Newf("task %s: its history moved on other than by a cancel request, a signal, a child's end or a fork", a.Task.ID), store.ErrConflict)
	}
	a.state = rebased.State
	if a.state.CancelRequested {
		a.proc.requestCancel(a.Task.ID)
	}
	return nil
}

// Polls of [Attempt.AwaitChildEnds]: from the first to the last interval,
// doubling.
const (
	childPollFirst = 5 * time.Millisecond
	childPollLast  = 50 * time.Millisecond
)

// AwaitChildEnds waits within the attempt, up to within, until count of
// the task's children at positions have finished, reading what was
// appended to the task since its state (children's ends, and signals and
// cancel requests, which join the state as a rebase would take them). It
// reports whether they did. It is what a parent whose starts the cap on
// running children holds back does before it ends its attempt to wait: a
// wake reads and replays the whole history, so a flat fan-out that
// started its next children in the same attempt wakes its parent far
// less often. false leaves the attempt to record its wait: within passed,
// ctx ended, the worker is stopping, a cancel was requested, or the read
// failed or met a history moved other than by those appends. Only the
// attempt's goroutine that appends may call it, with nothing of its own
// unwritten.
func (a *Attempt) AwaitChildEnds(ctx context.Context, positions []int, count int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	poll := childPollFirst
	for {
		state := a.State()
		if finishedAmong(state.Children, positions) >= count {
			return true
		}
		if state.CancelRequested || !time.Now().Add(poll).Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-a.proc.stopping:
			return false
		case <-time.After(poll):
		}
		poll = min(2*poll, childPollLast)
		a.mu.Lock()
		err := a.syncRequests(ctx)
		a.mu.Unlock()
		if err != nil {
			return false // the recorded wait meets what this read met
		}
	}
}

// finishedAmong counts the children at positions that have finished.
func finishedAmong(children []history.Child, positions []int) int {
	n := 0
	for _, pos := range positions {
		if pos < len(children) && children[pos].Finished {
			n++
		}
	}
	return n
}

// CloseChildren applies the parent close policy of the task's unfinished
// children, as a parent ending other than by completing must before its
// terminal event: a cancel is requested of each child whose policy is
// cancel (the default); abandoned ones run on. It is idempotent (a child
// already cancelling is left be), so an attempt that crashed after it and
// before its terminal append does it again harmlessly. A child that has
// finished meanwhile is skipped.
func (a *Attempt) CloseChildren(ctx context.Context, reason string) error {
	return requests.CloseChildren(ctx, a.proc.cfg.Store, a.Task.Namespace, a.Task.ID, a.State(), reason)
}

// ContinueAsNew ends the attempt's task continued as new, fenced by its
// lease (see [requests.ContinueAsNew]): payloads (the last step's
// completion, if not on record) and task_continued, with next's start, in
// one transaction. It returns the next run's id. A signal or child's end
// appended meanwhile is taken into the attempt's state and the continue
// tried again; a cancel request appended meanwhile wins: nothing is
// written, and the error is marked [ErrCancelRequested]. A signal
// appended meanwhile stops the continue too: the run decided to continue
// without it, and the next run would never see it. Nothing is written,
// and the error is marked [ErrSignalArrived]: the handler hands the
// attempt back (payloads, then task_released), so the next attempt
// replays with the signal in the history. The handler then ends the
// attempt as a cancelled one, or returns [ErrEnded] once this succeeded.
func (a *Attempt) ContinueAsNew(ctx context.Context, payloads []history.Payload, next store.TaskStartParams) (uuid.UUID, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for try := 0; ; try++ {
		if a.state.CancelRequested {
			return uuid.Nil, errmark.Mark(errors.Newf("continue task %s as new: its cancel was requested", a.Task.ID), ErrCancelRequested)
		}
		res, err := requests.ContinueAsNew(ctx, a.proc.cfg.Store, &store.ContinueParams{
			Run: *a.appendParams(payloads), Next: next,
		})
		if errors.Is(err, store.ErrConflict) && try+1 < maxChildStartTries {
			signals := len(a.state.Signals)
			if err := a.syncRequests(ctx); err != nil {
				return uuid.Nil, err
			}
			if len(a.state.Signals) > signals && !a.state.CancelRequested {
				return uuid.Nil, errmark.Mark(errors.Newf("continue task %s as new: a signal arrived first", a.Task.ID), ErrSignalArrived)
			}
			continue
		}
		if err != nil {
			return uuid.Nil, err
		}
		a.state = res.State
		return res.NextID, nil
	}
}

// DispatchRemote writes remote steps the attempt's workflow dispatched
// (remote_step_dispatched payloads, their inputs encoded), fenced by its
// lease, with their rows, in one transaction (see
// [requests.DispatchRemote]). A signal, cancel request, child's end or
// remote step's outcome appended to the task meanwhile is taken into the
// attempt's state and the dispatch tried again.
func (a *Attempt) DispatchRemote(ctx context.Context, payloads []history.Payload) error {
	a.mu.Lock() // parallel steps' budget calls append too
	defer a.mu.Unlock()
	for try := 0; ; try++ {
		next, err := requests.DispatchRemote(ctx, a.proc.cfg.Store, a.Task.Namespace, a.appendParams(payloads))
		if errors.Is(err, store.ErrConflict) && try+1 < maxChildStartTries {
			if err := a.syncRequests(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		a.state = next
		return nil
	}
}
