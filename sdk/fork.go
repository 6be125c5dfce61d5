package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/internal/jsoncheck"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// ForkOpts says where to fork a task and what to change ([Client.Fork]).
type ForkOpts struct {
	// At is the step position to fork at, as the task's history shows it
	// (0-based; a sleep counts as a step). The fork keeps the steps at
	// positions 0 to At, which never run again, and runs those after At.
	At int
	// Output, when set, replaces the output of the step at At in the
	// fork: the steps after it see this value. It must be valid JSON, at
	// most the client's MaxPayloadBytes. A sleep has no output to
	// replace.
	Output json.RawMessage
	// Input, when set, is the fork's input in place of the original's
	// (checked as a start's input is).
	Input json.RawMessage
	// IdempotencyKey, when set, makes the fork idempotent as a start is:
	// a second fork with the key returns the first fork's id and writes
	// nothing. It must be the same fork: of the same task at the same
	// position, with the same input and output there; a key held by
	// another start or fork is refused ([ErrIdempotencyKeyReused]).
	IdempotencyKey string
}

// ResetOpts says where to reset a task ([Client.Reset]).
type ResetOpts struct {
	ForkOpts
	// Compensate, for an original that has completed, asks for its
	// compensable steps to be undone ([Client.Compensate]): it then ends
	// cancelled. An original not finished is cancelled whatever
	// Compensate says, and a cancel compensates the completed
	// compensable steps of a task, as always.
	Compensate bool
	// Reason is recorded with the cancel or the compensation; "" records
	// "reset: forked as <id>".
	Reason string
}

// Fork re-runs task id from a step: it starts a new task of the same
// type, version, queue and namespace (priority, labels, fairness key and
// retry budget carried) whose history holds copies of the original's
// steps at positions 0 to opts.At, opts.Output in place of step At's
// output when given. The copied steps never run again; the fork runs the
// steps after At like any task, on the workers of its type. The original
// records task_forked naming the fork; the fork's task_scheduled names
// the original (TaskInfo.ForkedFrom). Both are written in one
// transaction. The original may be in any status, finished included, and
// keeps it: [Client.Reset] also cancels it. This is DBOS's
// ForkWorkflow, Temporal's reset.
//
// Refused, with nothing written:
//
//   - a negative position, an output or input that is not valid JSON, an
//     output over MaxPayloadBytes, an input over a start's bound, an
//     output for a sleep ([ErrInvalid]);
//   - a position beyond the steps on record, a position held by a
//     parallel step that completed ahead of a position before it, a
//     compensated step at or before the position, an erased task
//     ([ErrTaskState]);
//   - a task whose history records a child started, a receive or a
//     signal before the step at the position completed
//     ([cairntype.ErrUnsupported]: the fork copies steps only);
//   - a copied output this client cannot read back (sealed without the
//     key, a blob gone), or over MaxPayloadBytes: the fork writes its
//     copies as it writes any output (over the blob threshold, as a blob
//     of its own).
func (c *Client) Fork(ctx context.Context, id uuid.UUID, opts ForkOpts) (uuid.UUID, error) {
	newID, _, err := c.fork(ctx, id, opts, nil, nil)
	return newID, err
}

// Reset forks task id ([Client.Fork]) and ends the original: an
// original not finished is cancelled ([Client.Cancel]; a running one
// stops at its next checkpoint, its compensable steps undone, those the
// fork copied too); a completed one is compensated when opts.Compensate
// is set ([Client.Compensate]), else left as it is, as is one that
// failed, was cancelled or is dead-lettered. That request is decided on
// the original's state as read in the fork's transaction and written in
// it, with task_forked: there is no moment when the fork exists and the
// original has not been asked to end. The fork is due at once, though: a
// running original may still be running a step after opts.At when the
// fork runs that step too, until the original's next checkpoint.
//
// One that continued as new has its chain's current run cancelled, when
// that has not finished, after the fork is written; so is an original
// whose fork already existed (opts.IdempotencyKey, a fork written by an
// earlier call). It returns the fork's id.
//
// Refused as Fork refuses, and, with nothing written, when Compensate is
// set on a completed task with no compensable step ([ErrTaskState]). If
// the fork is written but the later cancel fails, the fork's id is
// returned with the error: retry with the fork's idempotency key, or
// cancel the original yourself.
func (c *Client) Reset(ctx context.Context, id uuid.UUID, opts ResetOpts) (uuid.UUID, error) {
	reset := &engine.ForkReset{Compensate: opts.Compensate, Reason: opts.Reason}
	newID, res, err := c.fork(ctx, id, opts.ForkOpts, reset, func(state history.State) error {
		if opts.Compensate && state.Status == history.StatusCompleted && !hasCompensable(state) {
			return errmark.Mark(errors.Newf("reset task %s: it completed and none of its steps has a compensator; reset without Compensate", id), store.ErrTaskState)
		}
		return nil
	})
	if err != nil {
		return uuid.Nil, err
	}
	if !res.Existing && !res.Continued {
		return newID, nil // the fork's transaction asked the original to end
	}
	reason := opts.Reason
	if reason == "" {
		reason = "reset: forked as " + newID.String()
	}
	for try := 0; ; try++ {
		info, err := c.getStored(ctx, id)
		if err != nil {
			return newID, errors.Wrapf(err, "reset task %s (forked as %s)", id, newID)
		}
		switch {
		case info.Status == history.StatusContinued:
			// The chain's current run is what runs now: the cancel
			// follows the chain to it. One that has finished is left
			// as it is.
			if err = c.Cancel(ctx, id, reason); errors.Is(err, ErrTaskState) {
				err = nil
			}
		case !info.Status.Terminal():
			err = c.Cancel(ctx, id, reason)
		case info.Status == history.StatusCompleted && opts.Compensate:
			err = c.Compensate(ctx, id, reason)
		}
		if errors.Is(err, ErrTaskState) && try < 3 {
			continue // it finished meanwhile: look again
		}
		if err != nil {
			return newID, errors.Wrapf(err, "reset task %s (forked as %s)", id, newID)
		}
		return newID, nil
	}
}

func hasCompensable(state history.State) bool {
	for _, st := range state.CompletedSteps() {
		if st.Compensable {
			return true
		}
	}
	return false
}

// fork is Fork, with check deciding on the original's state first, and
// reset, when set, asking the original to end in the fork's transaction.
func (c *Client) fork(ctx context.Context, id uuid.UUID, opts ForkOpts, reset *engine.ForkReset, check func(history.State) error) (uuid.UUID, engine.ForkResult, error) {
	if err := c.checkForkOpts(id, &opts); err != nil {
		return uuid.Nil, engine.ForkResult{}, errmark.Mark(err, ErrInvalid)
	}
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: id})
	if err != nil {
		return uuid.Nil, engine.ForkResult{}, errors.Wrapf(err, "fork task %s", id)
	}
	byTask, err := c.store.EventList(ctx, store.EventListAll(c.namespace, id))
	if err != nil {
		return uuid.Nil, engine.ForkResult{}, err
	}
	events := byTask[id]
	state, err := history.Replay(events)
	if err != nil {
		return uuid.Nil, engine.ForkResult{}, errors.Wrapf(err, "fork task %s", id)
	}
	if check != nil {
		if err := check(state); err != nil {
			return uuid.Nil, engine.ForkResult{}, err
		}
	}
	copies, patches, err := engine.ForkCopies(id, events, state, opts.At)
	if err != nil {
		return uuid.Nil, engine.ForkResult{}, err
	}
	if opts.Output != nil && copies[opts.At].Sleep {
		return uuid.Nil, engine.ForkResult{}, errmark.Mark(errors.Newf("fork task %s at position %d: the step there is a sleep, which has no output to replace", id, opts.At), ErrInvalid)
	}
	// The original's payloads, read back in clear: the fork's are its
	// own, sealed with its own key.
	ps := make([]*payload.Payload, 0, len(copies)+1)
	for _, cp := range copies {
		ps = append(ps, &payload.Payload{Namespace: c.namespace, Task: id, Kind: payload.StepOutput, Data: cp.Step.Output, Ref: cp.Step.OutputRef})
	}
	input := &payload.Payload{Namespace: c.namespace, Task: id, Kind: payload.Input, Data: t.Input}
	ps = append(ps, input)
	if err := c.store.Decode(ctx, ps); err != nil {
		return uuid.Nil, engine.ForkResult{}, err
	}
	steps := make([]history.StepCompletedData, len(copies))
	for i, cp := range copies {
		p := ps[i]
		out := p.Data
		if i == opts.At && opts.Output != nil {
			out = opts.Output
		} else if err := c.readable(p, fmt.Sprintf("the output of step %d (%s)", i, cp.Step.Name), c.maxPayload); err != nil {
			return uuid.Nil, engine.ForkResult{}, errors.Wrapf(err, "fork task %s", id)
		}
		step := cp.Step
		step.Output, step.OutputRef = out, nil
		steps[i] = step
	}
	in := opts.Input
	if in == nil {
		if err := c.readable(input, "the input", c.inputLimit(len(input.Data))); err != nil {
			return uuid.Nil, engine.ForkResult{}, errors.Wrapf(err, "fork task %s", id)
		}
		in = input.Data
	}
	sc := state.Scheduled
	start := &store.TaskStartParams{Namespace: c.namespace, RefuseKeyReuse: true, Scheduled: history.TaskScheduledData{
		TaskType: sc.TaskType, TypeVersion: sc.TypeVersion, Queue: sc.Queue, Priority: sc.Priority,
		Input: in, RunAt: time.Now(), IdempotencyKey: opts.IdempotencyKey, Labels: sc.Labels,
		MaxAttempts: sc.MaxAttempts, FairnessKey: sc.FairnessKey, FairnessWeight: sc.FairnessWeight,
		ForkedFrom: &history.ForkOrigin{TaskID: id.String(), Position: opts.At},
	}}
	res, err := c.store.Fork(ctx, &edge.ForkRequest{
		Namespace: c.namespace, Original: id, OriginalSeq: state.LastSeq, Position: opts.At, By: c.requester(ctx),
		Start: start, Copies: steps, Patches: patches, Reset: reset,
	})
	if err != nil {
		return uuid.Nil, engine.ForkResult{}, err
	}
	if res.Existing {
		// The engine checked the holder is a fork of id at At; the
		// output it holds there is for this side to compare, in clear.
		if err := c.sameForkOutput(ctx, id, res.ID, opts, steps[opts.At].Output); err != nil {
			return uuid.Nil, engine.ForkResult{}, err
		}
	}
	return res.ID, res, nil
}

// sameForkOutput checks that fork, which holds the idempotency key of a
// fork of task id at opts.At, holds want there: a retry with another
// output is no retry, and is refused ([ErrIdempotencyKeyReused]) rather
// than answered with the first fork.
func (c *Client) sameForkOutput(ctx context.Context, id, fork uuid.UUID, opts ForkOpts, want json.RawMessage) error {
	var got *history.StepCompletedData
	for after := int64(0); got == nil; {
		events, err := c.store.EventListPage(ctx, &store.EventPageParams{Namespace: c.namespace, TaskID: fork, After: after, Limit: store.MaxEventPageLimit})
		if err != nil || len(events) == 0 {
			return err // removed since: taken as the fork, as a start's key is
		}
		for _, e := range events {
			if st, ok := e.Data.(history.StepCompletedData); ok && st.CopiedFromSeq != 0 && st.Position == opts.At {
				got = &st
				break
			}
		}
		after = events[len(events)-1].Seq
	}
	p := &payload.Payload{Namespace: c.namespace, Task: fork, Kind: payload.StepOutput, Data: got.Output, Ref: got.OutputRef}
	if err := c.store.Decode(ctx, []*payload.Payload{p}); err != nil {
		return err
	}
	if p.Err != nil || !sameJSON(p.Data, want) {
		return errmark.Mark(errors.Newf("fork task %s: idempotency key %q is held by fork %s, whose output at position %d is not this fork's: use another key",
			id, opts.IdempotencyKey, fork, opts.At), ErrIdempotencyKeyReused)
	}
	return nil
}

// sameJSON reports whether a and b are the same JSON value, whatever
// their spacing or key order (a store may write JSON back normalized).
func sameJSON(a, b []byte) bool {
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

// readable checks that p, one of the original's payloads decoded, is in
// clear and within limit: a fork writes its copied outputs as outputs
// (the client's MaxPayloadBytes), its input as a start does.
func (c *Client) readable(p *payload.Payload, what string, limit int) error {
	switch {
	case p.Err != nil:
		return errors.Wrapf(p.Err, "%s cannot be read back", what)
	case p.Ref != nil:
		return errors.Newf("%s is kept by reference and was not read back", what)
	case history.MaybeSealed(p.Data):
		return errmark.Mark(errors.Newf("%s is encrypted and this client has no key for it", what), payload.ErrSealed)
	case len(p.Data) > limit:
		return errmark.Mark(errors.Newf("%s is %d bytes, over the limit of %d bytes (MaxPayloadBytes) of an output the fork writes", what, len(p.Data), limit), ErrInvalid)
	}
	return nil
}

// inputLimit is the bound of an input of n bytes, as a start's: the
// client's MaxPayloadBytes, or payload.MaxBlobBytes for one the payload
// stage keeps by reference.
func (c *Client) inputLimit(n int) int {
	if c.blobThreshold > 0 && n > c.blobThreshold {
		return payload.MaxBlobBytes
	}
	return c.maxPayload
}

// checkForkOpts checks what a fork is given, before anything is read.
func (c *Client) checkForkOpts(id uuid.UUID, o *ForkOpts) error {
	if o.At < 0 {
		return errors.Newf("fork task %s: position %d is negative (positions count from 0)", id, o.At)
	}
	if err := checkKey("idempotency key", o.IdempotencyKey); err != nil {
		return errors.Wrapf(err, "fork task %s", id)
	}
	for _, v := range []struct {
		what string
		raw  json.RawMessage
	}{{"output", o.Output}, {"input", o.Input}} {
		if v.raw == nil {
			continue
		}
		if !json.Valid(v.raw) {
			return errors.Newf("fork task %s: the %s is not valid JSON", id, v.what)
		}
		if err := jsoncheck.Check(v.raw, v.what); err != nil {
			return errors.Wrapf(err, "fork task %s", id)
		}
		if err := checkReserved(v.what, v.raw); err != nil {
			return errors.Wrapf(err, "fork task %s", id)
		}
		limit := c.maxPayload
		if v.what == "input" {
			limit = c.inputLimit(len(v.raw))
		}
		if err := checkPayloadSize(v.what, v.raw, limit); err != nil {
			return errors.Wrapf(err, "fork task %s", id)
		}
		if interpreter.HasNULEscape(v.raw) {
			return errors.Newf("fork task %s: the %s contains the character U+0000, which PostgreSQL cannot store in JSON", id, v.what)
		}
	}
	return nil
}

// forkedFrom reads the origin of task id from its task_scheduled: nil
// when it is no fork.
func (c *Client) forkedFrom(ctx context.Context, id uuid.UUID) (*history.ForkOrigin, error) {
	sc, err := c.scheduledOf(ctx, c.namespace, id)
	if err != nil || sc == nil {
		return nil, err
	}
	return sc.ForkedFrom, nil
}

// MaxForksListed bounds what [Client.Forks] returns: the first this many
// forks made of a task.
const MaxForksListed = 1000

// maxForksListed is MaxForksListed, which tests lower.
var maxForksListed = MaxForksListed

// Forks returns the tasks forked from task id ([Client.Fork],
// [Client.Reset]), in the order they were made, at most [MaxForksListed]
// (the first made), read from its history's task_forked events: the
// history is read a page at a time, its payloads not decoded, up to the
// last fork listed. A task never forked has none; an unknown task is
// [ErrNotFound].
func (c *Client) Forks(ctx context.Context, id uuid.UUID) ([]history.Fork, error) {
	t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: id})
	if err != nil {
		return nil, err
	}
	var forks []history.Fork
	for after := int64(0); after < t.LastSeq && len(forks) < maxForksListed; {
		events, err := c.store.EventListPage(ctx, &store.EventPageParams{Namespace: c.namespace, TaskID: id, After: after, Limit: store.MaxEventPageLimit})
		if err != nil {
			return nil, err
		}
		if len(events) == 0 {
			break
		}
		for _, e := range events {
			if f, ok := e.Data.(history.TaskForkedData); ok && len(forks) < maxForksListed {
				forks = append(forks, history.Fork{TaskID: f.ForkTaskID, Position: f.Position})
			}
		}
		after = events[len(events)-1].Seq
	}
	return forks, nil
}
