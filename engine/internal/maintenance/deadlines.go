package maintenance

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// expireBatch is how many tasks past their start deadline one pass ends at
// a time.
const expireBatch = 100

// expirer is the leader's service that ends, at each pass, the tasks not
// started by their start deadline.
type expirer struct {
	cfg Config
	svc service.Base
}

// Start expires start deadlines until Stop or until ctx is done.
func (e *expirer) Start(ctx context.Context) error {
	return e.svc.Start(ctx, func(ctx context.Context) { every(ctx, e.cfg.Interval, e.expireStartDeadlines) })
}

// Stop stops expiring and waits.
func (e *expirer) Stop() { e.svc.Stop() }

// expireStartDeadlines ends, in batches, the tasks not started by their
// start deadline.
func (e *expirer) expireStartDeadlines(ctx context.Context) {
	for {
		n, err := ExpireStartDeadlines(ctx, e.cfg.Store, expireBatch)
		if err != nil {
			if ctx.Err() == nil {
				e.cfg.Logger.Warn("rescuer: expire tasks past their start deadline", service.ErrAttr(err))
			}
			return
		}
		if n > 0 {
			e.cfg.Logger.Info("rescuer: expired tasks not started by their start deadline", "count", n)
		}
		if n < expireBatch {
			return
		}
	}
}

// ExpireStartDeadlines ends up to max tasks that were not started by their
// start deadline with task_expired, and returns how many it ended. The
// claim never starts such a task, so it cannot race a worker; each append
// is still fenced by the task's seq.
func ExpireStartDeadlines(ctx context.Context, s store.Store, max int) (int, error) {
	ids, err := s.TaskListStartExpired(ctx, &store.TaskListStartExpiredParams{Max: max})
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return expireTasks(ctx, s, ids)
}

// expireTasks appends task_expired to each of the listed tasks still
// pending, unstarted, with a start deadline.
func expireTasks(ctx context.Context, s store.Store, ids []uuid.UUID) (int, error) {
	events, err := s.EventList(ctx, store.EventListAll("", ids...))
	if err != nil {
		return 0, err
	}
	appends := make([]*store.EventAppendParams, 0, len(ids))
	for _, id := range ids {
		state, err := history.Replay(events[id])
		if err != nil || state.Status != history.StatusPending || state.Attempt != 0 || state.Scheduled.StartDeadline == nil {
			continue // unreadable here, or it moved on
		}
		appends = append(appends, &store.EventAppendParams{TaskID: id, State: state, Payloads: []history.Payload{history.TaskExpiredData{
			Reason: fmt.Sprintf("not started by its start deadline %s", state.Scheduled.StartDeadline.Format(time.RFC3339Nano)),
		}}})
	}
	if len(appends) == 0 {
		return 0, nil
	}
	results, err := s.EventAppendMany(ctx, appends)
	if err != nil {
		return 0, err
	}
	expired := 0
	for _, res := range results {
		if res.Err == nil {
			expired++
		}
	}
	return expired, nil
}
