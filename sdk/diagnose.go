package sdk

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// The windows [Client.DiagnoseQueue] accepts: 2s to 24h. Two seconds is the
// shortest window whose halves still hold a claim or two of a worker that
// polls every second; a day is as far back as a diagnosis reads events, so
// its cost stays a bounded range scan. A quarter of an hour (the CLI's
// default) suits most questions; a few seconds suits tests.
const (
	MinDiagnoseWindow = cairntype.MinDiagnoseWindow
	MaxDiagnoseWindow = cairntype.MaxDiagnoseWindow
)

// DiagnoseQueue answers "why is this queue growing?" from its history over
// the window ending now: it compares the window's first half ("then") with
// its second ("now") — inflow, outflow, attempts, retries, failures, live
// workers, attempt and step durations — reads the queue's depth, limits and
// waiting tasks by type and fairness key, and ranks the likely causes
// (lost_consumers, poison_retries, slower_attempts, inflow_spike, hot_key,
// concurrency_capped, rate_limited, unserved_type), each with the numbers
// that point at it. A queue where nothing looks wrong has no causes and is
// Healthy. The queue is in the client's namespace.
func (c *Client) DiagnoseQueue(ctx context.Context, queue string, window time.Duration) (*cairntype.QueueDiagnosis, error) {
	if err := validateName("queue", queue); err != nil {
		return nil, errmark.Mark(errors.Wrap(err, "diagnose queue"), ErrInvalid)
	}
	if window < MinDiagnoseWindow || window > MaxDiagnoseWindow {
		return nil, errmark.Mark(errors.Newf("diagnose queue %s: window %s must be between %s and %s",
			queue, window, MinDiagnoseWindow, MaxDiagnoseWindow), ErrInvalid)
	}
	d, err := engine.DiagnoseQueue(ctx, c.store.Engine(), &store.QueueDiagnoseParams{Namespace: c.namespace, Queue: queue, Window: window})
	if err != nil {
		return nil, err
	}
	found, err := c.store.StrandedList(ctx, &store.StrandedListParams{Namespace: c.namespace, Queue: queue, Limit: store.MaxStrandedList})
	if err != nil {
		return nil, err
	}
	d.Stranded = strandedTypes(found, d.At)
	return d, nil
}

// strandedTypes groups deploy-check findings by type and version, most
// tasks first; a task found by several workers counts once.
func strandedTypes(found []store.StrandedTask, at time.Time) []cairntype.StrandedType {
	out := []cairntype.StrandedType{}
	index := map[store.TypeKey]int{}
	seen := map[store.TypeKey]map[uuid.UUID]bool{}
	for _, f := range found {
		k := store.TypeKey{Type: f.Type, Version: f.Version}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k], seen[k] = i, map[uuid.UUID]bool{}
			out = append(out, cairntype.StrandedType{Type: f.Type, Version: f.Version, Kind: f.Kind, Position: f.Position,
				Recorded: f.Recorded, Called: f.Called, Workers: []string{}})
		}
		t := &out[i]
		if !slices.Contains(t.Workers, f.WorkerID) {
			t.Workers = append(t.Workers, f.WorkerID)
		}
		if !seen[k][f.TaskID] {
			seen[k][f.TaskID] = true
			t.Tasks++
			if (f.Status == history.StatusPending || f.Status == history.StatusRetrying) && f.RunAt.Before(at) {
				t.OldestWait = max(t.OldestWait, cairntype.MillisOf(at.Sub(f.RunAt)))
			}
		}
	}
	slices.SortStableFunc(out, func(a, b cairntype.StrandedType) int { return b.Tasks - a.Tasks })
	return out
}
