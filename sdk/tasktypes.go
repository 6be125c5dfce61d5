package sdk

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrUnknownType is returned (marked) by [Client.RegisteredType] for a
// workflow type no worker of the namespace has registered.
var ErrUnknownType = errors.New("unknown task type")

// TaskTypes returns the workflow types workers of the client's namespace
// have registered (each worker records its types when it starts), with the
// defaults their definitions give.
func (c *Client) TaskTypes(ctx context.Context) ([]cairntype.TaskType, error) {
	return c.store.TaskTypeList(ctx, &store.TaskTypeListParams{Namespace: c.namespace})
}

// RegisteredType returns a [WorkflowRef] for a type a worker registered,
// carrying the definition's defaults (queue, attempts, schedule-to-close),
// so a producer without the workflow's Go code starts it as the code
// would. version 0 takes the highest registered version. A type nobody
// registered is [ErrUnknownType], with the registered ones in the message.
func (c *Client) RegisteredType(ctx context.Context, name string, version int) (WorkflowRef, error) {
	types, err := c.TaskTypes(ctx)
	if err != nil {
		return nil, err
	}
	var found *store.TaskType
	var known []string
	for i, t := range types {
		known = append(known, t.Type+"@"+strconv.Itoa(t.Version))
		if t.Type == name && (version == 0 || t.Version == version) && (found == nil || t.Version > found.Version) {
			found = &types[i]
		}
	}
	if found == nil {
		what := name
		if version != 0 {
			what += "@" + strconv.Itoa(version)
		}
		registered := "none"
		if len(known) > 0 {
			registered = strings.Join(known[:min(len(known), 20)], ", ")
		}
		return nil, errmark.Mark(errors.Newf("task type %s is not registered by any worker of namespace %s (registered: %s)",
			what, c.namespace, registered), ErrUnknownType)
	}
	return registeredRef{*found}, nil
}

// registeredRef is a type as a worker registered it.
type registeredRef struct{ t store.TaskType }

func (r registeredRef) TypeName() string { return r.t.Type }
func (r registeredRef) TypeVersion() int { return r.t.Version }
func (r registeredRef) typeDefaults() workflowDefaults {
	retry := activities.DefaultRetryPolicy
	retry.MaxAttempts = r.t.MaxAttempts
	return workflowDefaults{queue: r.t.Queue, retry: retry, scheduleToClose: r.t.ScheduleToClose}
}

// typeRecords is the worker's types as the registry records them.
func (w *Worker) typeRecords() []store.TaskType {
	types := make([]store.TaskType, 0, len(w.types))
	for k, reg := range w.types {
		types = append(types, store.TaskType{Type: k.Type, Version: k.Version, Queue: reg.defaults.queue,
			MaxAttempts: reg.defaults.retry.MaxAttempts, ScheduleToClose: reg.defaults.scheduleToClose, Signals: reg.defaults.signals})
	}
	return types
}

// registerTypes records types in the registry of each of c's namespaces.
// A worker that starts while the database is out of reach waits for it
// (with backoff, until ctx ends) rather than failing: it is the same wait
// its claims would make. In the background (a cell's record, made while
// the worker runs), it tries again after any error, logging each new one,
// as there is no caller to report it to.
func (w *Worker) registerTypes(ctx context.Context, c *workerCell, types []store.TaskType, background bool) error {
	logger := w.cellLogger(c)
	var lastErr string
	for _, ns := range c.namespaces {
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			err := c.store.TaskTypeRegister(ctx, &store.TaskTypeRegisterParams{Namespace: ns, Worker: w.cfg.WorkerID, Types: types})
			if err == nil {
				break
			}
			if !background && !errors.Is(err, store.ErrUnavailable) {
				return err
			}
			if ctx.Err() != nil {
				return errors.Wrap(err, "worker start: the database stayed out of reach")
			}
			if err.Error() != lastErr {
				logger.Warn("worker: could not record its types yet; trying again", "namespace", ns, "err", err.Error())
				lastErr = err.Error()
			}
			select {
			case <-ctx.Done():
				return errors.Wrap(err, "worker start: the database stayed out of reach")
			case <-time.After(backoff):
			}
		}
	}
	return nil
}
