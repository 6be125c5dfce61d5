package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// The bounds of an update's name and id ([Client.Update]): each is kept
// in its events. Its args are bounded as a signal's payload is
// (ClientConfig.MaxPayloadBytes).
const (
	MaxUpdateNameBytes = history.MaxUpdateNameBytes
	MaxUpdateIDBytes   = history.MaxUpdateIDBytes
)

var (
	// ErrUpdateRejected marks an update the workflow's validator rejected
	// (workflow.UpdateOpts.Validator): nothing was written. The error's
	// text is the validator's.
	ErrUpdateRejected = errors.New("update rejected")
	// ErrUpdateNotFound marks an update whose name the workflow has no
	// handler for (workflow.SetUpdate) where it was validated: nothing
	// was written.
	ErrUpdateNotFound = errors.New("update not found")
	// ErrUpdateFailed marks an update whose handler returned an error (or
	// panicked) when it ran: an [*UpdateError]. The task goes on.
	ErrUpdateFailed = errors.New("update failed")
	// ErrUpdatePending marks an update recorded but not applied yet when
	// the caller stopped waiting ([Client.Update]'s ctx ended): wait for
	// its outcome with [Client.UpdateOutcome].
	ErrUpdatePending = errors.New("update pending")
)

// UpdateError is an update whose handler failed: the error it returned,
// as update_completed recorded it. It unwraps to [ErrUpdateFailed].
type UpdateError struct {
	UpdateID string
	Info     history.ErrorInfo
}

func (e *UpdateError) Error() string { return "update " + e.UpdateID + ": " + e.Info.Message }

// Unwrap makes the error match [ErrUpdateFailed].
func (e *UpdateError) Unwrap() error { return ErrUpdateFailed }

// UpdateOpts are the options of [Client.Update]; nil, or the zero value,
// takes every default.
type UpdateOpts struct {
	// UpdateID makes the update idempotent: an update with this id in the
	// task's history already is not validated or recorded again; the call
	// waits for (or returns) its outcome. Default: a new UUID, so a
	// retried call is a new update.
	UpdateID string
	// RequestedBy says who asked, for the history. Default: the requester
	// (see [WithRequester]), else the client's Identity.
	RequestedBy string
}

// UpdateResult is an update's outcome: its handler's result.
type UpdateResult struct {
	TaskID   uuid.UUID
	UpdateID string
	// Name is the update's name.
	Name string
	// Output is the handler's result, as JSON.
	Output json.RawMessage
	// Duplicate is set when the update id was in the task's history
	// already: this call recorded nothing.
	Duplicate bool
}

// maxUpdateTries bounds the validations of an update whose task moves on
// between its validation and its append.
const maxUpdateTries = 5

// Update asks the running task id to apply the update called name with
// args (encoded as JSON; a json.RawMessage is taken as it is, nil sends
// none), and returns the handler's result once it ran.
//
// The update is first validated, on the workflow's state as of the
// task's latest event, by the validator its workflow registered
// (workflow.SetUpdate): by a replay that runs no step, in process when
// ClientConfig.Worker registers the task's type, else on a worker of the
// type through an inquiry (as [Client.Query]; [ErrNoWorker] when none
// answers within ClientConfig.QueryTimeout). A rejection is an error
// marked [ErrUpdateRejected] carrying the validator's text, a name with
// no handler one marked [ErrUpdateNotFound], and nothing is written. Once
// accepted it is recorded (update_accepted) fenced on that event (if the
// task moved on meanwhile, it is validated again, a few times at most),
// which wakes a task that waits; the handler runs at the workflow's next
// call, and its outcome is recorded (update_completed). Update waits for
// it until ctx ends: then the error is marked [ErrUpdatePending] (the
// update stays recorded and is applied; [Client.UpdateOutcome] waits
// again). A handler's error is an [*UpdateError] (marked
// [ErrUpdateFailed]).
//
// With opts.UpdateID an update already in the history is not applied
// again: the call returns (or waits for) its outcome, Duplicate set. A
// task that continued as new takes the update in its chain's current run
// (UpdateResult.TaskID). A finished task is an error marked
// [ErrTaskState]; an unknown task [ErrNotFound]; invalid arguments
// [ErrInvalid].
func (c *Client) Update(ctx context.Context, id uuid.UUID, name string, args any, opts *UpdateOpts) (*UpdateResult, error) {
	res, err := c.SubmitUpdate(ctx, id, name, args, opts)
	if err != nil {
		return nil, err
	}
	out, err := c.UpdateOutcome(ctx, res.TaskID, res.UpdateID)
	if out != nil {
		out.Duplicate = res.Duplicate
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SubmitUpdate is [Client.Update] without the wait: it validates and
// records the update, and returns its id and the run it reached (Output
// empty); a duplicate's (Duplicate set) returns at once too. Wait for the
// outcome with [Client.UpdateOutcome].
func (c *Client) SubmitUpdate(ctx context.Context, id uuid.UUID, name string, args any, opts *UpdateOpts) (*UpdateResult, error) {
	req, err := c.updateRequest(ctx, id, name, args, opts)
	if err != nil {
		return nil, errmark.Mark(err, ErrInvalid)
	}
	// A chain that continued as new takes the update in its current run.
	t, err := engine.LatestRun(ctx, c.store.Engine(), c.namespace, id)
	if err != nil {
		return nil, errors.Wrapf(err, "update %q of task %s", name, id)
	}
	if t.Status.Terminal() {
		return nil, errmark.Mark(errors.Newf("update %q to task %s: it is %s; only a task that has not finished takes updates",
			name, t.ID, t.Status), ErrTaskState)
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, errors.Wrapf(err, "update %q: encode the request", name)
	}
	timeout := c.queryTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	var answer json.RawMessage
	if fn, ok := c.localFunc(store.TypeKey{Type: t.Type, Version: t.TypeVersion}); ok {
		vctx, cancel := context.WithTimeout(ctx, max(timeout, time.Millisecond))
		defer cancel()
		answer, err = answerUpdate(vctx, c.store, c.namespace, t.ID, fn, name, raw)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		code, msg, detail := inquiryErrorOf(err)
		err = updateError(name, code, msg, detail)
	} else {
		var res inquiryResult
		if res, err = c.inquire(ctx, t, store.InquiryUpdate, name, raw, timeout); err == nil {
			answer, err = res.Answer, updateError(name, res.Code, res.Error, res.Detail)
		}
	}
	if err != nil {
		return nil, err
	}
	var got updateAnswer
	if err := json.Unmarshal(answer, &got); err != nil {
		return nil, errors.Wrapf(err, "update %q of task %s: decode the answer", name, t.ID)
	}
	return &UpdateResult{TaskID: t.ID, UpdateID: req.UpdateID, Name: name, Duplicate: got.Duplicate}, nil
}

// updateInquiry is an update as an inquiry carries it to the worker that
// validates and records it (its args, the inquiry's, encoded as a whole
// by the payload stage).
type updateInquiry struct {
	UpdateID    string          `json:"update_id"`
	Args        json.RawMessage `json:"args,omitempty"`
	RequestedBy string          `json:"requested_by,omitempty"`
}

// updateAnswer is a validation's answer: the update was recorded, now or
// before (Duplicate).
type updateAnswer struct {
	Duplicate bool `json:"duplicate,omitempty"`
}

// updateRequest checks an update's arguments and returns what the
// validation is asked.
func (c *Client) updateRequest(ctx context.Context, id uuid.UUID, name string, args any, opts *UpdateOpts) (*updateInquiry, error) {
	o := orZero(opts)
	if id == uuid.Nil {
		return nil, errors.New("update: no task id")
	}
	if err := history.ValidUpdateText("name", name, MaxUpdateNameBytes); err != nil {
		return nil, err
	}
	if o.UpdateID == "" {
		o.UpdateID = uuid.NewString()
	}
	if err := history.ValidUpdateText("id", o.UpdateID, MaxUpdateIDBytes); err != nil {
		return nil, err
	}
	raw, err := c.signalPayload(name, args, false)
	if err != nil {
		return nil, errors.Wrap(err, "update args")
	}
	if len(raw) > MaxUpdateArgsBytes {
		return nil, errmark.Mark(&PayloadTooLargeError{What: fmt.Sprintf("the args of update %q", name), Size: len(raw),
			Limit: MaxUpdateArgsBytes}, ErrPayloadTooLarge)
	}
	if o.RequestedBy == "" {
		o.RequestedBy = c.requester(ctx)
	}
	return &updateInquiry{UpdateID: o.UpdateID, Args: raw, RequestedBy: o.RequestedBy}, nil
}

// MaxUpdateArgsBytes bounds the JSON of an update's args, besides the
// client's MaxPayloadBytes: 1 MiB, so the inquiry that carries them to a
// worker stays under the store's bound.
const MaxUpdateArgsBytes = 1 << 20

// errRejected marks a validator's rejection, on its way to an inquiry's
// answer.
var errRejected = errors.New("rejected")

// answerUpdate validates the update raw (an updateInquiry) called name of
// task id of namespace ns, whose workflow is fn, on the run inspectTask
// stops at the task's frontier, and, accepted, records it fenced on the
// last event that run saw: if the task moved on meanwhile, it validates
// again, [maxUpdateTries] times at most. An update id in the history
// already is answered as a duplicate, neither validated nor written.
func answerUpdate(ctx context.Context, st *edge.Store, ns string, id uuid.UUID, fn interpreter.Func, name string, raw json.RawMessage) (json.RawMessage, error) {
	var req updateInquiry
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, errors.Wrapf(err, "update %q: decode the request", name)
	}
	for try := 0; ; try++ {
		var seen int64
		duplicate := false
		err := inspectTask(ctx, st, ns, id, fn, func(in *interpreter.Inspection) error {
			if _, ok := in.State.UpdateByID(req.UpdateID); ok {
				duplicate = true
				return nil
			}
			if in.State.Status.Terminal() {
				return errmark.Mark(errors.Newf("task %s is %s; only a task that has not finished takes updates", id, in.State.Status), ErrTaskState)
			}
			seen = in.State.LastSeq
			err := in.ValidateUpdate(name, req.Args)
			if err != nil && !errors.Is(err, interpreter.ErrHandlerNotFound) {
				err = errmark.Mark(err, errRejected)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if !duplicate {
			res, err := st.AcceptUpdate(ctx, &engine.UpdateParams{Namespace: ns, TaskID: id, Seen: seen,
				Accepted: history.UpdateAcceptedData{UpdateID: req.UpdateID, Name: name, Args: req.Args, RequestedBy: req.RequestedBy}})
			if errors.Is(err, engine.ErrUpdateMoved) && try+1 < maxUpdateTries {
				continue
			}
			if errors.Is(err, engine.ErrUpdateMoved) {
				err = errors.WithHint(err, "the task moves on too fast to validate the update against it; try again")
			}
			if err != nil {
				return nil, err
			}
			duplicate = res.Existing
		}
		return json.Marshal(updateAnswer{Duplicate: duplicate})
	}
}

// The codes an update's validation fails with (store.Inquiry.ErrorCode),
// besides a query's.
const (
	inquiryUpdateRejected = "update_rejected"
	inquiryUpdateNotFound = "update_not_found"
	inquiryTaskState      = "task_state"
)

// updateError is the error of a validation answered with code and msg: nil
// when code is "".
func updateError(name, code, msg string, detail json.RawMessage) error {
	switch code {
	case "":
		return nil
	case inquiryUpdateRejected:
		return errmark.Mark(errors.Newf("update %q rejected: %s", name, msg), ErrUpdateRejected)
	case inquiryUpdateNotFound, inquiryNotFound:
		return errmark.Mark(errors.Newf("update %q: %s", name, msg), ErrUpdateNotFound)
	case inquiryTaskState:
		return errmark.Mark(errors.Newf("update %q: %s", name, msg), ErrTaskState)
	case inquiryBadArgs:
		return errmark.Mark(errors.Newf("update %q: %s", name, msg), ErrInvalid)
	case inquiryReplayFailed:
		return errmark.Mark(errmark.Mark(errors.Newf("update %q: %s", name, msg), ErrReplayFailed), interpreter.ErrNondeterministic)
	case inquiryTaskGone:
		return errmark.Mark(errors.Newf("update %q: %s", name, msg), ErrNotFound)
	}
	return errors.Newf("update %q: the validation failed: %s", name, msg)
}

// updateState is the task's state replayed from its history, its
// payloads decoded: where an update's outcome is read.
func (c *Client) updateState(ctx context.Context, id uuid.UUID) (history.State, error) {
	events, err := c.History(ctx, id)
	if err != nil {
		return history.State{}, err
	}
	if len(events) == 0 {
		return history.State{}, errmark.Mark(errors.Newf("task %s not found", id), ErrNotFound)
	}
	state, err := history.Replay(events)
	return state, errors.Wrapf(err, "update task %s", id)
}

// UpdateOutcome waits for the outcome of the update updateID of task id
// and returns it: the handler's result, or an [*UpdateError] (with the
// result's TaskID, UpdateID and Name). It waits
// until ctx ends (the error is then marked [ErrUpdatePending]). An update
// id the task never accepted is [ErrNotFound]; a task that finished
// before the update ran is an error marked [ErrTaskState].
//
// It reads the task's row, cheaply, at growing intervals (5ms to 200ms),
// and its history only when the row shows an event appended.
func (c *Client) UpdateOutcome(ctx context.Context, id uuid.UUID, updateID string) (*UpdateResult, error) {
	interval := 5 * time.Millisecond
	var seen int64 = -1
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, errmark.Mark(errors.Wrapf(context.Cause(ctx), "update %s to task %s: not applied yet", updateID, id), ErrUpdatePending)
		case <-timer.C:
		}
		t, err := c.store.TaskGet(ctx, &store.TaskGetParams{Namespace: c.namespace, ID: id})
		if err != nil {
			return nil, err
		}
		if t.LastSeq != seen {
			seen = t.LastSeq
			state, err := c.updateState(ctx, id)
			if err != nil {
				return nil, err
			}
			u, ok := state.UpdateByID(updateID)
			switch {
			case !ok:
				return nil, errmark.Mark(errors.Newf("task %s has no update %q", id, updateID), ErrNotFound)
			case u.Completed && u.Error != nil:
				return &UpdateResult{TaskID: id, UpdateID: updateID, Name: u.Name}, &UpdateError{UpdateID: updateID, Info: *u.Error}
			case u.Completed:
				return &UpdateResult{TaskID: id, UpdateID: updateID, Name: u.Name, Output: u.Output}, nil
			case state.Status.Terminal():
				return nil, errmark.Mark(errors.Newf("update %s to task %s: the task ended (%s) before the update was applied", updateID, id, state.Status), ErrTaskState)
			}
		}
		interval = min(2*interval, 200*time.Millisecond)
		timer.Reset(interval)
	}
}
