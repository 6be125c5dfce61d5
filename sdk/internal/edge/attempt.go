package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
)

// Handler runs attempts on the SDK's side of the edge: the attempt
// executor. It is [engine.Handler] with the attempt behind the edge: what
// it reads of the task's payloads is decoded, and what it hands back to
// be appended are [Events], encoded.
type Handler interface {
	HandleAttempt(ctx context.Context, a *Attempt) (Events, error)
}

// Handler returns the [engine.Handler] that runs h's attempts through the
// store's payload stage: the one a worker hands its processors.
func (e *Store) Handler(h Handler) engine.Handler { return handler{e: e, h: h} }

type handler struct {
	e *Store
	h Handler
}

func (x handler) HandleAttempt(ctx context.Context, a *engine.Attempt) ([]history.Payload, error) {
	task := *a.Task
	task.Input, task.Output = nil, nil // read through Attempt.Input
	ev, err := x.h.HandleAttempt(ctx, &Attempt{Task: &task, a: a, e: x.e, input: a.Task.Input, memo: map[memoKey]json.RawMessage{}})
	return ev.ps, err
}

// Events are events ready for an attempt to append: their payloads
// encoded. Only [Attempt.Encode] makes them.
type Events struct{ ps []history.Payload }

// Payloads returns the events, as they will be appended.
func (ev Events) Payloads() []history.Payload { return slices.Clone(ev.ps) }

// Len is the number of events.
func (ev Events) Len() int { return len(ev.ps) }

// Then returns ev followed by more.
func (ev Events) Then(more Events) Events {
	return Events{ps: append(slices.Clip(ev.ps), more.ps...)}
}

// Attempt is a claimed attempt of a task ([engine.Attempt]) behind the
// edge: its payloads are read decoded and written encoded. Its methods are
// for the handler's goroutine, but Signals and Children, which the
// workflow's goroutines may call.
type Attempt struct {
	// Task is the projection row as claimed, its payloads left out (nil):
	// [Attempt.Input] reads the input.
	Task *store.Task

	a     *engine.Attempt
	e     *Store
	input json.RawMessage // the row's input, as stored

	mu   sync.Mutex
	memo map[memoKey]json.RawMessage // signals' and children's payloads decoded, by their owner and stored bytes

	budgetsMu sync.Mutex
	budgets   *history.TaskScheduledData // the task's recorded task_scheduled, for its budgets; read once
}

type memoKey struct {
	owner  uuid.UUID
	stored string
}

// State returns the task's state as replayed from its history, including
// what this attempt has appended so far, its payloads as stored: read
// them with [Attempt.Steps], [Attempt.Signals] and [Attempt.Children].
func (a *Attempt) State() history.State { return a.a.State() }

// StateUpdates is [engine.Attempt.StateUpdates].
func (a *Attempt) StateUpdates() []history.Update { return a.a.StateUpdates() }

// LastSeq is [engine.Attempt.LastSeq].
func (a *Attempt) LastSeq() int64 { return a.a.LastSeq() }

// LeaseContext is [engine.Attempt.LeaseContext].
func (a *Attempt) LeaseContext() context.Context { return a.a.LeaseContext() }

// DurableContext is [engine.Attempt.DurableContext].
func (a *Attempt) DurableContext() context.Context { return a.a.DurableContext() }

// SyncCancel is [engine.Attempt.SyncCancel].
func (a *Attempt) SyncCancel(ctx context.Context) error { return a.a.SyncCancel(ctx) }

// WorkerID is [engine.Attempt.WorkerID].
func (a *Attempt) WorkerID() string { return a.a.WorkerID() }

// Stopping is [engine.Attempt.Stopping].
func (a *Attempt) Stopping() <-chan struct{} { return a.a.Stopping() }

// AwaitChildEnds is [engine.Attempt.AwaitChildEnds].
func (a *Attempt) AwaitChildEnds(ctx context.Context, positions []int, count int, within time.Duration) bool {
	return a.a.AwaitChildEnds(ctx, positions, count, within)
}

// CloseChildren is [engine.Attempt.CloseChildren].
func (a *Attempt) CloseChildren(ctx context.Context, reason string) error {
	return a.a.CloseChildren(ctx, reason)
}

// BudgetReserve is [engine.Attempt.BudgetReserve]: any of the run's
// goroutines may call it.
func (a *Attempt) BudgetReserve(ctx context.Context, p engine.ReserveParams) (engine.ReserveResult, error) {
	return a.a.BudgetReserve(ctx, p)
}

// BudgetSettle is [engine.Attempt.BudgetSettle]: any of the run's
// goroutines may call it.
func (a *Attempt) BudgetSettle(ctx context.Context, p engine.SettleParams) error {
	return a.a.BudgetSettle(ctx, p)
}

// LockedState is [engine.Attempt.LockedState].
func (a *Attempt) LockedState() history.State { return a.a.LockedState() }

// Scheduled returns the task's task_scheduled as its history records it,
// read once per attempt: a claim's state rebuilds it from the task's row,
// which does not keep the task's budgets.
func (a *Attempt) Scheduled(ctx context.Context) (history.TaskScheduledData, error) {
	// Read once, under a lock: a failed read (a cancelled context, a
	// database error) is not kept, so the next call reads again.
	a.budgetsMu.Lock()
	defer a.budgetsMu.Unlock()
	if a.budgets != nil {
		return *a.budgets, nil
	}
	evs, err := a.a.Store().EventListPage(ctx, &store.EventPageParams{Namespace: a.Task.Namespace, TaskID: a.Task.ID, Limit: 1})
	switch {
	case err != nil:
		return history.TaskScheduledData{}, errors.Wrap(err, "read the task's task_scheduled")
	case len(evs) == 0:
		return history.TaskScheduledData{}, errors.Newf("task %s has no history", a.Task.ID)
	}
	sc, ok := evs[0].Data.(history.TaskScheduledData)
	if !ok {
		return history.TaskScheduledData{}, errors.Newf("task %s begins with %s", a.Task.ID, evs[0].Type())
	}
	a.budgets = &sc
	return sc, nil
}

// ScopeBudgets reads the scope budgets of the task's namespace.
func (a *Attempt) ScopeBudgets(ctx context.Context) ([]store.BudgetDef, error) {
	return a.a.Store().BudgetList(ctx, &store.BudgetListParams{Namespace: a.Task.Namespace})
}

// Encode returns ps encoded, ready to append or to end the attempt with:
// the outputs of step_completed and task_completed pass through the
// stage (kept as blobs of the task over the threshold, sealed). Events
// that carry no payload pass as they are, and cannot fail.
func (a *Attempt) Encode(ctx context.Context, ps ...history.Payload) (Events, error) {
	var batch []*payload.Payload
	var at []int
	for i, d := range ps {
		if p := payload.OfEvent(a.Task.Namespace, a.Task.ID, d); p != nil && (len(p.Data) > 0 || p.Ref != nil) {
			batch, at = append(batch, p), append(at, i)
		}
	}
	if len(batch) == 0 {
		return Events{ps: slices.Clone(ps)}, nil
	}
	enc, err := a.e.stage.Encode(ctx, batch)
	if err != nil {
		return Events{}, err
	}
	out := slices.Clone(ps)
	for j, i := range at {
		pl := enc.At(j)
		out[i] = pl.Into(ps[i])
	}
	return Events{ps: out}, nil
}

// Append appends ev for this attempt, fenced by its lease epoch
// ([engine.Attempt.Append]).
func (a *Attempt) Append(ctx context.Context, ev Events) error {
	return a.a.Append(ctx, ev.ps...)
}

// StartChildren starts children of the attempt's task
// ([engine.Attempt.StartChildren]), their inputs encoded as a start's
// are; children's inputs stay in place whatever their size.
func (a *Attempt) StartChildren(ctx context.Context, children []store.ChildStart) ([]uuid.UUID, error) {
	ps := make([]*store.TaskStartParams, len(children))
	for i := range children {
		ps[i] = &children[i].Task
	}
	enc, err := a.e.encodeStarts(ctx, ps)
	if err != nil {
		return nil, err
	}
	encoded := slices.Clone(children)
	for i, p := range startParams(ps, enc) {
		encoded[i].Task = *p
	}
	ids, err := a.a.StartChildren(ctx, encoded)
	a.e.stage.Discard(ctx, enc, func(int) bool { return err == nil })
	return ids, err
}

// DispatchRemote writes remote steps' dispatches (remote_step_dispatched,
// their inputs encoded here) with their rows, fenced by the attempt's
// lease ([engine.Attempt.DispatchRemote]).
func (a *Attempt) DispatchRemote(ctx context.Context, ds []history.RemoteStepDispatchedData) error {
	ps := make([]history.Payload, len(ds))
	for i, d := range ds {
		ps[i] = d
	}
	ev, err := a.Encode(ctx, ps...)
	if err != nil {
		return err
	}
	return a.a.DispatchRemote(ctx, ev.ps)
}

// Input returns the task's input, decoded: read back (checked) when the
// client kept it as a blob. An input that does not open here (no key) is
// returned as it is stored, for the workflow's decode to refuse.
func (a *Attempt) Input(ctx context.Context) (json.RawMessage, error) {
	p := &payload.Payload{Namespace: a.Task.Namespace, Task: a.Task.ID, Kind: payload.Input, Data: a.input}
	if err := a.e.Decode(ctx, []*payload.Payload{p}); err != nil {
		return nil, err
	}
	return p.Data, errors.Wrap(p.Err, "read the task's input")
}

// Steps returns steps (the attempt's state's, Steps or Ahead) with their
// outputs decoded, those kept by reference read back: a copy, when any
// changed.
func (a *Attempt) Steps(ctx context.Context, steps []history.Step) ([]history.Step, error) {
	if len(steps) == 0 {
		return steps, nil
	}
	ps := make([]*payload.Payload, len(steps))
	for i, s := range steps {
		ps[i] = &payload.Payload{Namespace: a.Task.Namespace, Task: a.Task.ID, Kind: payload.StepOutput, Data: s.Output, Ref: s.OutputRef}
	}
	if err := a.e.Decode(ctx, ps); err != nil {
		return steps, err
	}
	out := slices.Clone(steps)
	for i, p := range ps {
		if p.Err != nil {
			return steps, errors.Wrapf(p.Err, "read the output of step %d (%s)", steps[i].Position, steps[i].Name)
		}
		out[i].Output, out[i].OutputRef = p.Data, p.Ref
	}
	return out, nil
}

// Signals returns signals (the attempt's state's) with their payloads
// decoded: a copy, when any changed. A payload that cannot be read back
// stays as it is stored, for the workflow's decode to refuse. Each
// payload is decoded once per attempt.
func (a *Attempt) Signals(ctx context.Context, signals []history.Signal) []history.Signal {
	var out []history.Signal
	a.each(ctx, len(signals), payload.Signal,
		func(i int) (uuid.UUID, json.RawMessage) { return a.Task.ID, signals[i].Payload },
		func(i int, data json.RawMessage) {
			if out == nil {
				out = slices.Clone(signals)
			}
			out[i].Payload = data
		})
	if out == nil {
		return signals
	}
	return out
}

// Updates returns updates (the attempt's state's) with their args (and
// the outputs of those completed) decoded: a copy, when any changed. As
// [Attempt.Signals].
func (a *Attempt) Updates(ctx context.Context, updates []history.Update) []history.Update {
	var out []history.Update
	a.each(ctx, len(updates), payload.Signal,
		func(i int) (uuid.UUID, json.RawMessage) { return a.Task.ID, updates[i].Args },
		func(i int, data json.RawMessage) {
			if out == nil {
				out = slices.Clone(updates)
			}
			out[i].Args = data
		})
	if out == nil {
		return updates
	}
	return out
}

// Children returns children (the attempt's state's) with their outputs
// decoded, each owned by its child: a copy, when any changed. As
// [Attempt.Signals].
func (a *Attempt) Children(ctx context.Context, children []history.Child) []history.Child {
	var out []history.Child
	a.each(ctx, len(children), payload.Output,
		func(i int) (uuid.UUID, json.RawMessage) {
			id := children[i].ID
			if children[i].RunID != "" {
				id = children[i].RunID // the output of the run that ended a chain is that run's
			}
			owner, err := uuid.Parse(id)
			if err != nil {
				return uuid.Nil, nil // not a child cairn started: left as it is
			}
			return owner, children[i].Output
		},
		func(i int, data json.RawMessage) {
			if out == nil {
				out = slices.Clone(children)
			}
			out[i].Output = data
		})
	if out == nil {
		return children
	}
	return out
}

// each decodes the n payloads of kind that get names (each with its
// owner), through the attempt's memo, and hands set each one that
// decoding changed.
func (a *Attempt) each(ctx context.Context, n int, kind payload.Kind, get func(i int) (uuid.UUID, json.RawMessage), set func(i int, data json.RawMessage)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ps []*payload.Payload
	var at []int
	for i := range n {
		owner, stored := get(i)
		if owner == uuid.Nil || len(stored) == 0 {
			continue
		}
		if data, ok := a.memo[memoKey{owner, string(stored)}]; ok {
			if !bytes.Equal(data, stored) {
				set(i, data)
			}
			continue
		}
		ps = append(ps, &payload.Payload{Namespace: a.Task.Namespace, Task: owner, Kind: kind, Data: stored})
		at = append(at, i)
	}
	if len(ps) == 0 || a.e.Decode(ctx, ps) != nil {
		return // left as stored: the workflow's decode says what is wrong
	}
	for j, p := range ps {
		if p.Err != nil {
			continue
		}
		owner, stored := get(at[j])
		a.memo[memoKey{owner, string(stored)}] = p.Data
		if !bytes.Equal(p.Data, stored) {
			set(at[j], p.Data)
		}
	}
}

// Blobs returns the blob store of a step of the attempt's task (what
// activities.PutBlob and GetBlob reach).
func (a *Attempt) Blobs() TaskBlobs {
	return TaskBlobs{e: a.e, namespace: a.Task.Namespace, task: a.Task.ID}
}

// TaskBlobs keeps the blobs of one task, through the stage.
type TaskBlobs struct {
	e         *Store
	namespace string
	task      uuid.UUID
}

// TaskID is the task whose blobs these are.
func (b TaskBlobs) TaskID() uuid.UUID { return b.task }

// PutBlob writes data as a blob of the task and returns its reference.
func (b TaskBlobs) PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	return b.e.PutBlob(ctx, b.namespace, b.task, contentType, data)
}

// GetBlob reads the blob ref names in the task's namespace, checked
// against the reference.
func (b TaskBlobs) GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	return b.e.GetBlob(ctx, b.namespace, ref, uuid.Nil)
}

// ContinueAsNew ends the attempt's task continued as new
// ([engine.Attempt.ContinueAsNew]): pending (the last step's completion,
// if not on record) and task_continued, with next's start, its input
// encoded as a start's is. It returns the next run's id.
func (a *Attempt) ContinueAsNew(ctx context.Context, pending Events, next store.TaskStartParams) (uuid.UUID, error) {
	ps := []*store.TaskStartParams{&next}
	enc, err := a.e.encodeStarts(ctx, ps)
	if err != nil {
		return uuid.Nil, err
	}
	id, err := a.a.ContinueAsNew(ctx, pending.ps, *startParams(ps, enc)[0])
	a.e.stage.Discard(ctx, enc, func(int) bool { return err == nil })
	return id, err
}
