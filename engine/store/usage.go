package store

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/history"
)

// UsageCell is [cairntype.UsageCell]: one key's usage in one bucket.
type UsageCell = cairntype.UsageCell

// MaxTaskUsageListIDs bounds [TaskUsageListParams.IDs]: a roll-up over
// more tasks reads them in several statements.
const MaxTaskUsageListIDs = 1000

// TaskUsageListParams names the tasks [Executor.TaskUsageList] reads.
type TaskUsageListParams struct {
	Namespace string
	// IDs are 1 to [MaxTaskUsageListIDs] task ids; those not in
	// Namespace, or gone, are left out of the result.
	IDs []uuid.UUID
}

// Validate checks the parameters: what every store does first.
func (p *TaskUsageListParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("task usage: namespace is required")
	case len(p.IDs) == 0 || len(p.IDs) > MaxTaskUsageListIDs:
		return errors.Newf("task usage: %d ids; ask for 1 to %d", len(p.IDs), MaxTaskUsageListIDs)
	}
	return nil
}

// TaskUsageFacts is what a usage roll-up reads of one task's history:
// every usage report of its step_completed and attempt_failed events in
// history order, the children its child_started events name, by
// position, and the run its task_continued names. Type, FairnessKey and
// Status are its row's (the projection of the same history).
type TaskUsageFacts struct {
	ID          uuid.UUID
	Type        string
	FairnessKey string
	Status      history.Status
	Usage       []history.Usage
	Children    []uuid.UUID
	ContinuedAs uuid.UUID // uuid.Nil unless it continued as new
}

// UsageSeriesParams asks [Executor.UsageSeries] for a namespace's usage
// reports in [From, Until), summed by key and bucket.
type UsageSeriesParams struct {
	Namespace string
	By        cairntype.UsageBy
	// From and Until bound the window; Step cuts it into buckets
	// (bucket i is [From+i*Step, From+(i+1)*Step)). The window is at
	// most [cairntype.MaxUsageWindow], in at most
	// [cairntype.MaxUsageBuckets] buckets of at least
	// [cairntype.MinUsageStep] (cairntype.UsageWindow aligns a query's).
	From, Until time.Time
	Step        time.Duration
}

// Validate checks the parameters: what every store does first.
func (p *UsageSeriesParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("usage series: namespace is required")
	case p.By != cairntype.UsageByFairnessKey && p.By != cairntype.UsageByModel && p.By != cairntype.UsageByType:
		return errors.Newf("usage series: by %q is not one of fairness_key, model or type", p.By)
	case p.Step < cairntype.MinUsageStep || p.Step%time.Microsecond != 0:
		return errors.Newf("usage series: step %s must be %s or more, in whole microseconds", p.Step, cairntype.MinUsageStep)
	case !p.From.Before(p.Until):
		return errors.New("usage series: from must be before until")
	case p.Until.Sub(p.From) > cairntype.MaxUsageWindow:
		return errors.Newf("usage series: a window of %s is over %s", p.Until.Sub(p.From), cairntype.MaxUsageWindow)
	case p.Buckets() > cairntype.MaxUsageBuckets:
		return errors.Newf("usage series: %d buckets; at most %d", p.Buckets(), cairntype.MaxUsageBuckets)
	}
	return nil
}

// Buckets is the number of buckets in the window (the last one may run
// past Until).
func (p *UsageSeriesParams) Buckets() int {
	if p.Step <= 0 {
		return 0
	}
	return int((p.Until.Sub(p.From) + p.Step - 1) / p.Step)
}
