package requests

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ForkCopy is one step a fork copies from the task it is forked from:
// Step is the original's record of it as stored (a sleep's timer_fired
// read as a step named "sleep"), Seq the seq of that record, which the
// copy names (history.StepCompletedData.CopiedFromSeq).
type ForkCopy struct {
	Seq  int64
	Step history.StepCompletedData
	// Sleep says the step is a sleep (a timer that fired): it has no
	// output to replace.
	Sleep bool
}

// ForkCopies returns the steps a fork of the task whose history is events
// (replayed: state) at position at copies, positions 0 to at, as stored
// (their outputs encoded; not compensable, as the original owns their
// undo), what the edge decodes, re-encodes for the fork,
// and gives [Fork]; and the patch markers it copies, those recorded at
// those positions (workflow.Patched), so the fork takes the branches the
// original took. It refuses, with an error that says why, what a fork
// cannot be made of:
//
//   - an erased task ([store.ErrTaskState]: its outputs are unreadable);
//   - a position not completed in order: beyond the steps on record, or
//     held ahead of a position not on record, a parallel step that
//     finished before one before it ([store.ErrTaskState]);
//   - a step at or before the position that was compensated
//     ([store.ErrTaskState]: its effect was undone);
//   - a task whose history records a child started, a receive, or a
//     signal before the step at the position completed
//     ([store.ErrUnsupported]: a fork copies steps only, so it would
//     start those children again or miss those signals).
func ForkCopies(id uuid.UUID, events []history.Event, state history.State, at int) ([]ForkCopy, []history.PatchRecordedData, error) {
	copies, err := forkCopies(id, events, state, at)
	if err != nil {
		return nil, nil, err
	}
	var patches []history.PatchRecordedData
	for _, e := range events {
		if p, ok := e.Data.(history.PatchRecordedData); ok && p.Position <= at {
			p.CopiedFromSeq = e.Seq
			patches = append(patches, p)
		}
	}
	return copies, patches, nil
}

func forkCopies(id uuid.UUID, events []history.Event, state history.State, at int) ([]ForkCopy, error) {
	switch {
	case state.Erased:
		return nil, errmark.Mark(errors.Newf("fork task %s: its data was erased, so its step outputs cannot be copied", id), store.ErrTaskState)
	case at < 0:
		return nil, errors.Newf("fork task %s: position %d is negative", id, at)
	case at >= len(state.Steps):
		if _, ahead := state.StepAt(at); ahead {
			return nil, errmark.Mark(errors.Newf("fork task %s at position %d: the step there completed ahead of position %d, which is not on record; fork at a position below %d",
				id, at, len(state.Steps), len(state.Steps)), store.ErrTaskState)
		}
		return nil, errmark.Mark(errors.Newf("fork task %s at position %d: it has %d steps on record (positions 0 to %d)",
			id, at, len(state.Steps), len(state.Steps)-1), store.ErrTaskState)
	}
	if c := state.Compensation; c != nil {
		for _, pos := range c.Done {
			if pos <= at {
				return nil, errmark.Mark(errors.Newf("fork task %s at position %d: step %d was compensated, its effect undone; fork at a position below %d",
					id, at, pos, pos), store.ErrTaskState)
			}
		}
	}
	copies := make([]ForkCopy, at+1)
	found := 0
	for _, e := range events {
		var step history.StepCompletedData
		sleep := false
		switch d := e.Data.(type) {
		case history.StepCompletedData:
			step = d
		case history.RemoteStepCompletedData:
			step = history.StepCompletedData{Position: d.Position, Name: d.Name, Output: d.Output}
		case history.TimerFiredData:
			step, sleep = history.StepCompletedData{Position: d.Position, Name: history.SleepStepName}, true
		case history.ChildStartedData, history.WaitStartedData, history.SignalReceivedData, history.SelectMatchedData:
			if found <= at {
				return nil, errmark.Mark(errors.Newf("fork task %s at position %d: its history records %s (event %d) before the step there completed; forking past children, receives, selects or signals is not supported",
					id, at, e.Type(), e.Seq), store.ErrUnsupported)
			}
			continue
		default:
			continue
		}
		if step.Position > at {
			continue
		}
		if step.Position < 0 || copies[step.Position].Seq != 0 {
			return nil, errors.AssertionFailedf("fork task %s: step %d recorded twice", id, step.Position)
		}
		// Usage stays the original's: the step ran, and was paid for,
		// there. So does its undo: a fork never undoes what it did not
		// do, so the copy is not compensable (the original's cancel or
		// compensation undoes the step, once).
		step.Usage, step.CopiedFromSeq, step.Compensable = nil, e.Seq, false
		copies[step.Position] = ForkCopy{Seq: e.Seq, Step: step, Sleep: sleep}
		found++
	}
	if found != at+1 {
		return nil, errors.AssertionFailedf("fork task %s: %d of the %d steps to copy found in its history", id, found, at+1)
	}
	return copies, nil
}

// ForkParams describes a fork ([Fork]).
type ForkParams struct {
	Namespace string
	// Original is the task forked from, whose history gets task_forked.
	Original uuid.UUID
	// OriginalSeq is the length of the original's history the copies were
	// read from: the fork's copies are of events before it, which never
	// change.
	OriginalSeq int64
	// Position is the step the fork is made at.
	Position int
	// By names who asks, for task_forked. Required.
	By string
	// Start is the fork's start, its payloads encoded: its ID set, its
	// Scheduled.ForkedFrom naming Original and Position.
	Start *store.TaskStartParams
	// Copies are the fork's copied steps, positions 0 to Position in
	// order, their outputs encoded for the fork (CopiedFromSeq set,
	// Compensable not: the original owns their undo).
	Copies []history.StepCompletedData
	// Patches are the copied patch markers ([ForkCopies]), in the order
	// the original recorded them: each is written before the copied step
	// at its position.
	Patches []history.PatchRecordedData
	// Reset, when set, ends the original in the same append as its
	// task_forked ([ForkReset]).
	Reset *ForkReset
}

// ForkReset is what a reset asks of the original, decided on its state as
// read in the fork's transaction and appended with its task_forked, so
// the cancel is decided with the fork, never after it: one not finished
// is cancelled (as [Cancel] decides), a completed one compensated (as
// [Compensate] decides) when Compensate is set, else nothing. One that
// continued as new is the caller's to cancel ([Cancel] follows its chain):
// [ForkResult.Continued] says so.
type ForkReset struct {
	Compensate bool
	// Reason is recorded with the cancel or the compensation; "" records
	// "reset: forked as <id>".
	Reason string
}

// ForkResult says what a fork wrote.
type ForkResult struct {
	ID uuid.UUID
	// Existing is set when Start's idempotency key was taken: ID is the
	// task that took it, and nothing was written.
	Existing bool
	// State is the fork's state after its copies (zero when Existing).
	State history.State
	// Continued, on a reset, says the original had continued as new: its
	// chain's current run was not cancelled (the caller's to do).
	Continued bool
}

// Fork writes a fork over ex, in one transaction: the fork's start
// (TaskStart: task_scheduled, its row, its data key and blobs), its
// copied steps (EventAppend, no attempt's), and task_forked in the
// original's history (EventAppend, fenced by the original's log as read
// in the transaction; the original may be in any status). A start whose
// idempotency key was taken writes nothing and returns that task. A
// concurrent append to the original (a running worker's) is retried, up
// to a few times; then the error is marked [store.ErrConflict].
func Fork(ctx context.Context, ex store.Executor, p *ForkParams) (ForkResult, error) {
	switch {
	case p.By == "":
		return ForkResult{}, errors.New("fork: By (who asks) is empty")
	case p.Start == nil || p.Start.ID == uuid.Nil:
		return ForkResult{}, errors.AssertionFailedf("fork task %s: the fork's start has no id", p.Original)
	case len(p.Copies) != p.Position+1:
		return ForkResult{}, errors.AssertionFailedf("fork task %s at position %d: %d copies", p.Original, p.Position, len(p.Copies))
	}
	for _, c := range p.Copies {
		if c.Compensable || c.CopiedFromSeq == 0 {
			return ForkResult{}, errors.AssertionFailedf("fork task %s: the copy of step %d is compensable or names no record (copied_from_seq %d)",
				p.Original, c.Position, c.CopiedFromSeq)
		}
	}
	for try := 0; ; try++ {
		res, err := forkOnce(ctx, ex, p)
		if errors.Is(err, store.ErrConflict) && try+1 < maxRequestTries {
			continue
		}
		if err != nil {
			return ForkResult{}, errors.Wrapf(err, "fork task %s", p.Original)
		}
		return res, nil
	}
}

func forkOnce(ctx context.Context, ex store.Executor, p *ForkParams) (ForkResult, error) {
	tx, err := ex.Begin(ctx)
	if err != nil {
		return ForkResult{}, err
	}
	// A no-op after the commit; on the way out of a refusal it must roll
	// back even when ctx has ended.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.TaskGet(ctx, &store.TaskGetParams{Namespace: p.Namespace, ID: p.Original}); err != nil {
		return ForkResult{}, err
	}
	events, err := store.TaskEvents(ctx, tx, p.Namespace, p.Original)
	if err != nil {
		return ForkResult{}, err
	}
	original, err := history.Replay(events)
	if err != nil {
		return ForkResult{}, err
	}
	if original.LastSeq < p.OriginalSeq {
		return ForkResult{}, errors.AssertionFailedf("the history is shorter (%d events) than when it was read (%d)", original.LastSeq, p.OriginalSeq)
	}
	if err := samePlan(p, events, original); err != nil {
		return ForkResult{}, err
	}
	started, err := tx.TaskStart(ctx, p.Start)
	if err != nil {
		return ForkResult{}, err
	}
	if started.Existing {
		if err := sameFork(ctx, tx, p, started.ID); err != nil {
			return ForkResult{}, err
		}
		return ForkResult{ID: started.ID, Existing: true}, nil
	}
	forkEvents, err := store.TaskEvents(ctx, tx, p.Namespace, started.ID)
	if err != nil {
		return ForkResult{}, err
	}
	fork, err := history.Replay(forkEvents)
	if err != nil {
		return ForkResult{}, err
	}
	payloads := make([]history.Payload, 0, len(p.Copies)+len(p.Patches))
	for _, c := range p.Copies {
		for _, m := range p.Patches {
			if m.Position == c.Position {
				payloads = append(payloads, m)
			}
		}
		payloads = append(payloads, c)
	}
	if fork, err = tx.EventAppend(ctx, &store.EventAppendParams{TaskID: started.ID, State: fork, At: fork.CreatedAt, Payloads: payloads}); err != nil {
		return ForkResult{}, err
	}
	onOriginal := []history.Payload{history.TaskForkedData{ForkTaskID: started.ID.String(), Position: p.Position, By: p.By}}
	ending, err := p.resetPayloads(original, started.ID)
	if err != nil {
		return ForkResult{}, err
	}
	onOriginal = append(onOriginal, ending...)
	if _, err := tx.EventAppend(ctx, &store.EventAppendParams{TaskID: p.Original, State: original, Payloads: onOriginal}); err != nil {
		return ForkResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return ForkResult{}, err
	}
	return ForkResult{ID: started.ID, State: fork, Continued: p.Reset != nil && original.Status == history.StatusContinued}, nil
}

// resetPayloads is what p.Reset appends to the original, in state, after
// its task_forked naming fork: as [Cancel] or [Compensate] decide.
func (p *ForkParams) resetPayloads(state history.State, fork uuid.UUID) ([]history.Payload, error) {
	if p.Reset == nil {
		return nil, nil
	}
	q := &Params{Namespace: p.Namespace, ID: p.Original, By: p.By, Reason: p.Reset.Reason}
	if q.Reason == "" {
		q.Reason = "reset: forked as " + fork.String()
	}
	switch {
	case state.Status == history.StatusContinued:
		return nil, nil // its chain's current run is another task
	case !state.Status.Terminal():
		var res CancelResult
		return decideCancel(q, state, &res)
	case state.Status == history.StatusCompleted && p.Reset.Compensate:
		return decideCompensate(q, state)
	}
	return nil, nil
}

// samePlan checks that the fork p plans is still the one the original's
// history, as read in the transaction (events, replayed: original),
// gives: ForkCopies refuses it as it would have (erased meanwhile, a step
// at or before the position compensated meanwhile, …), and copies and
// patch markers name the same records. The history only grows, so a
// difference means it changed under the plan: refused, with nothing
// written.
func samePlan(p *ForkParams, events []history.Event, original history.State) error {
	copies, patches, err := ForkCopies(p.Original, events, original, p.Position)
	if err != nil {
		return errors.Wrap(err, "the task changed since its history was read")
	}
	same := len(copies) == len(p.Copies) && len(patches) == len(p.Patches)
	for i := 0; same && i < len(copies); i++ {
		same = copies[i].Seq == p.Copies[i].CopiedFromSeq
	}
	for i := 0; same && i < len(patches); i++ {
		same = patches[i].CopiedFromSeq == p.Patches[i].CopiedFromSeq
	}
	if !same {
		return errmark.Mark(errors.Newf("at position %d: the steps to copy are no longer those read from its history; read it again", p.Position), store.ErrTaskState)
	}
	return nil
}

// sameFork checks that existing, the task holding the fork's idempotency
// key, is a fork of the same task at the same position: the store
// compared type and input only, and a key held by an ordinary start, or
// by a fork from elsewhere, is no retry of this fork. A holder removed
// since (retention) cannot be read and is taken as the fork, as a start's
// key is. Whether it holds the same output at the position is the edge's
// to check, which reads the payloads in clear.
func sameFork(ctx context.Context, ex store.Executor, p *ForkParams, existing uuid.UUID) error {
	// MaxBytes 1: a page holds one event whatever its size.
	first, err := ex.EventListPage(ctx, &store.EventPageParams{Namespace: p.Namespace, TaskID: existing, Limit: 1, MaxBytes: 1})
	if err != nil || len(first) == 0 {
		return err
	}
	sc, ok := first[0].Data.(history.TaskScheduledData)
	if !ok {
		return errors.AssertionFailedf("task %s: its first event is %s", existing, first[0].Type())
	}
	want := p.Start.Scheduled.ForkedFrom
	if sc.ForkedFrom == nil || want == nil || *sc.ForkedFrom != *want {
		what := "a task that is no fork"
		if sc.ForkedFrom != nil {
			what = fmt.Sprintf("a fork of task %s at position %d", sc.ForkedFrom.TaskID, sc.ForkedFrom.Position)
		}
		return errmark.Mark(errors.Newf("idempotency key %q is held by task %s, %s, not a fork of task %s at position %d: use another key",
			p.Start.Scheduled.IdempotencyKey, existing, what, p.Original, p.Position), store.ErrIdempotencyKeyReused)
	}
	return nil
}
