package executor

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
)

// modelLimitGate is the gate of model rate limits (issue 38): a step
// whose Spend names a model with a limit in its namespace waits its
// turn, holding its worker slot, until it fits the limit's sliding
// window (engine.ModelLimiter); settle replaces its reservation by the
// tokens it reported for the model. Steps without a Spend naming a
// model pass at no cost; those of a model without a limit pay a lookup
// in the worker's cache of the namespace's limits.
func (h *Handler) modelLimitGate(ctx context.Context, a *edge.Attempt, step interpreter.StepInfo, spend *history.Spend) (func([]history.Usage, error) error, error) {
	if spend == nil || spend.Model == "" {
		return nil, nil
	}
	lim := h.modelLimiter(a.Task.Namespace)
	if lim == nil {
		return nil, nil
	}
	adm, err := lim.Admit(ctx, engine.ModelAsk{Namespace: a.Task.Namespace, Model: spend.Model, TaskID: a.Task.ID,
		Position: step.Position, FairnessKey: a.Task.FairnessKey, Tokens: spend.Tokens}, a.Stopping())
	if errors.Is(err, engine.ErrModelWaitStopping) {
		return nil, errmark.Mark(err, interpreter.ErrStopping) // the task is handed back
	}
	if err != nil || adm == nil {
		return nil, err
	}
	if adm.Waited > 0 {
		h.noteWait(a, history.ModelLimitWaitedData{Position: step.Position, Step: step.Name, Model: adm.Model,
			WaitedMS: adm.Waited.Milliseconds(), Tokens: adm.Tokens, Ahead: adm.Ahead})
	}
	return func(usage []history.Usage, _ error) error {
		tokens, reported := adm.Tokens, false
		for _, u := range usage {
			if u.Model == adm.Model {
				if !reported {
					tokens, reported = 0, true
				}
				tokens += u.InputTokens + u.OutputTokens
			}
		}
		// A step that reported nothing for the model keeps its
		// reservation: the call may have been made. A settlement that
		// fails leaves the reservation too, which errs on the safe side
		// for a minute; failing the step would run it again.
		if err := lim.Settle(a.DurableContext(), adm, tokens); err != nil {
			h.logger.Warn("worker: settle a step's model limit admission", "task_id", a.Task.ID, "model", adm.Model, "err", err.Error())
		}
		return nil
	}, nil
}

// waitNotes are the model_limit_waited events of an attempt's steps,
// written with each step's completion.
type waitNotes struct {
	mu    sync.Mutex
	byPos map[int]history.ModelLimitWaitedData
}

// noteWait keeps a step's wait for its completion's record.
func (h *Handler) noteWait(a *edge.Attempt, w history.ModelLimitWaitedData) {
	v, ok := h.waits.Load(a)
	if !ok {
		return
	}
	n := v.(*waitNotes)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byPos == nil {
		n.byPos = map[int]history.ModelLimitWaitedData{}
	}
	n.byPos[w.Position] = w
}

// withWaited puts before ev, a step's completion, the step's
// model_limit_waited if it waited.
func (h *Handler) withWaited(ctx context.Context, a *edge.Attempt, step history.Payload, ev edge.Events) (edge.Events, error) {
	done, ok := step.(history.StepCompletedData)
	if !ok {
		return ev, nil
	}
	v, ok := h.waits.Load(a)
	if !ok {
		return ev, nil
	}
	n := v.(*waitNotes)
	n.mu.Lock()
	w, waited := n.byPos[done.Position]
	delete(n.byPos, done.Position)
	n.mu.Unlock()
	if !waited {
		return ev, nil
	}
	wev, err := a.Encode(ctx, w)
	if err != nil {
		return ev, err
	}
	return wev.Then(ev), nil
}
