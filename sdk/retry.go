package sdk

import (
	"context"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// ErrTaskState is returned (marked) when a task's status does not allow
// the request, such as retrying a task that is not dead-lettered.
var ErrTaskState = cairntype.ErrTaskState

// Retry sends a dead-lettered task back to its queue for reason: the
// history records task_requeued with the client's Identity and reason; the
// task is due at once, keeps its attempt count and gets a fresh retry
// budget. A task in any other status is [ErrTaskState]; one not in the
// client's namespace is [ErrNotFound].
func (c *Client) Retry(ctx context.Context, id uuid.UUID, reason string) error {
	res, err := engine.RequeueTasks(ctx, c.store.Engine(), &engine.TaskRequeueParams{
		Namespace: c.namespace, IDs: []uuid.UUID{id}, By: c.requester(ctx), Reason: reason,
	})
	if err != nil {
		return err
	}
	return res[0].Err
}

// DeadLetterOpts select dead letters for [Client.DeadLetters] and
// [Client.RetryDeadLetters]; nil, or the zero value, selects the newest
// 100.
type DeadLetterOpts struct {
	Type   string      // only tasks of this type; "" for all
	Filter *TaskFilter // only tasks it matches; nil for all
	// Limit is the most tasks returned or retried. Default 100; negative
	// for no limit.
	Limit int
	// IncludeInput and IncludeOutput put the tasks' inputs and outputs in
	// what [Client.DeadLetters] returns; without them it is lean (Input
	// and Output nil, not read from the database). Unlike a page of
	// [Client.ListPage], dead letters are not bounded in bytes: Limit
	// bounds what comes back.
	IncludeInput, IncludeOutput bool
}

// deadLetterPage is how many dead letters are read per query.
const deadLetterPage = 500

// DeadLetters returns dead-lettered tasks of the client's namespace that
// match opts, newest first. A task the filter cannot be evaluated on is
// skipped and its error returned with the
// others; a missing label is not such an error (it reads as "").
func (c *Client) DeadLetters(ctx context.Context, opts *DeadLetterOpts) ([]*TaskInfo, error) {
	var out []*TaskInfo
	err := c.eachDeadLetter(ctx, opts, func(page []*TaskInfo) error {
		out = append(out, page...)
		return nil
	})
	return out, err
}

// RetryReport says what [Client.RetryDeadLetters] did.
type RetryReport struct {
	Retried []uuid.UUID
	// Failed holds the tasks that matched but were not requeued, with why
	// (another writer raced, a history this cairn cannot read).
	Failed map[uuid.UUID]error
}

// RetryDeadLetters requeues, as [Client.Retry] does, every dead letter that
// matches opts, in batches, up to opts.Limit (100 by default; negative for
// no limit). It returns what it did even when it stops on an error.
func (c *Client) RetryDeadLetters(ctx context.Context, reason string, opts *DeadLetterOpts) (RetryReport, error) {
	report := RetryReport{Failed: map[uuid.UUID]error{}}
	err := c.eachDeadLetter(ctx, opts, func(page []*TaskInfo) error {
		ids := make([]uuid.UUID, len(page))
		for i, t := range page {
			ids[i] = t.ID
		}
		res, err := engine.RequeueTasks(ctx, c.store.Engine(), &engine.TaskRequeueParams{
			Namespace: c.namespace, IDs: ids, By: c.requester(ctx), Reason: reason,
		})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				report.Failed[r.ID] = r.Err
				continue
			}
			report.Retried = append(report.Retried, r.ID)
		}
		return nil
	})
	return report, err
}

// eachDeadLetter pages through the matching dead letters, handing each
// page of matches to fn. Requeued tasks leave the dead letters, so paging
// by cursor is not disturbed by fn requeueing what it is handed. With a
// filter, the reading and evaluating (not fn) is bounded by the client's
// [FilterLimits].
func (c *Client) eachDeadLetter(ctx context.Context, given *DeadLetterOpts, fn func([]*TaskInfo) error) error {
	opts := orZero(given)
	limit := opts.Limit
	if limit == 0 {
		limit = 100
	}
	var evalErrs error
	failedEvals := 0
	budget := c.newFilterBudget()
	params := &store.DeadLetterListParams{Namespace: c.namespace, Type: opts.Type, Limit: deadLetterPage,
		OmitPayloads: !opts.IncludeInput && !opts.IncludeOutput}
	for taken := 0; limit < 0 || taken < limit; {
		var room int // how many more fn may take; -1: any
		if room = -1; limit >= 0 {
			room = limit - taken
		}
		page, read, err := c.deadLetterPage(ctx, budget, params, &opts, room, func(err error) {
			// A few examples say what is wrong; a count, how often.
			if failedEvals++; failedEvals <= maxFilterErrors {
				evalErrs = errors.CombineErrors(evalErrs, err)
			}
		})
		if len(page) > 0 {
			if ferr := fn(page); ferr != nil {
				return ferr
			}
			taken += len(page)
		}
		if err != nil {
			return err
		}
		if read < deadLetterPage {
			break
		}
	}
	if failedEvals > 0 {
		return errors.WithHint(errors.Wrapf(evalErrs, "the filter failed on %d task(s), which were skipped; the first", failedEvals),
			`test for a label or attribute before reading it: "team" in task.labels && task.labels["team"] == "x"`)
	}
	return nil
}

// deadLetterPage reads the page of dead letters after params.Before and
// returns at most room (-1: any) of those filter matches, how many it
// read, and an error that stops the paging; params.Before moves on. A
// task the filter cannot be evaluated on goes to failed.
func (c *Client) deadLetterPage(ctx context.Context, budget *filterBudget, params *store.DeadLetterListParams,
	opts *DeadLetterOpts, room int, failed func(error)) ([]*TaskInfo, int, error) {
	filter := opts.Filter
	readCtx := ctx
	if filter != nil {
		var done func()
		readCtx, done = budget.page(ctx)
		defer done()
	}
	tasks, err := c.store.DeadLetterList(readCtx, params)
	if err == nil {
		err = c.openTasks(readCtx, tasks)
	}
	if err != nil {
		if filter != nil {
			err = budget.readErr(readCtx, err)
		}
		return nil, 0, err
	}
	if len(tasks) > 0 {
		last := tasks[len(tasks)-1]
		params.Before = &store.DeadLetterCursor{FinishedAt: *last.FinishedAt, ID: last.ID}
	}
	var page []*TaskInfo
	for _, t := range tasks {
		if room >= 0 && len(page) >= room {
			break
		}
		info := taskInfo(t)
		if !opts.IncludeInput {
			info.Input = nil
		}
		if !opts.IncludeOutput {
			info.Output = nil
		}
		if filter != nil {
			if err := budget.scan(); err != nil {
				return page, len(tasks), err
			}
			ok, spent, err := filter.match(readCtx, info)
			if stop := budget.evaluated(readCtx, spent, err); stop != nil {
				return page, len(tasks), stop
			}
			if err != nil {
				failed(err)
				continue
			}
			if !ok {
				continue
			}
		}
		page = append(page, info)
	}
	return page, len(tasks), nil
}

// maxFilterErrors is how many filter errors a listing keeps as examples.
const maxFilterErrors = 3
