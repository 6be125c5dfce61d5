package plan

import (
	"encoding/json"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// TaskUsageRow is a row of both drivers' TaskUsageList statement: a task
// and one of the events a usage roll-up reads (Seq nil when it has none):
// the usage JSON of step_completed or attempt_failed, or the id a
// child_started or task_continued names.
type TaskUsageRow struct {
	TaskID, Type, FairnessKey, Status string
	Seq                               *int64
	EventType, Usage, Ref             *string
}

// TaskUsageRows folds a driver's rows, in (task, seq) order, into
// [store.TaskUsageFacts].
type TaskUsageRows struct {
	facts []store.TaskUsageFacts
	last  string
}

// Add folds the next row.
func (f *TaskUsageRows) Add(r TaskUsageRow) error {
	if r.TaskID != f.last || len(f.facts) == 0 {
		id, err := uuid.Parse(r.TaskID)
		if err != nil {
			return errors.Wrapf(err, "task usage: task id %q", r.TaskID)
		}
		f.facts = append(f.facts, store.TaskUsageFacts{ID: id, Type: r.Type, FairnessKey: r.FairnessKey, Status: history.Status(r.Status)})
		f.last = r.TaskID
	}
	if r.Seq == nil || r.EventType == nil {
		return nil
	}
	t := &f.facts[len(f.facts)-1]
	switch history.Type(*r.EventType) {
	case history.StepCompleted, history.AttemptFailed:
		if r.Usage == nil {
			return nil
		}
		var us []history.Usage
		if err := json.Unmarshal([]byte(*r.Usage), &us); err != nil {
			return errors.Wrapf(err, "task usage: usage of task %s event %d", r.TaskID, *r.Seq)
		}
		t.Usage = append(t.Usage, us...)
	case history.ChildStarted, history.TaskContinued:
		if r.Ref == nil {
			return errors.Newf("task usage: task %s event %d (%s) names no task", r.TaskID, *r.Seq, *r.EventType)
		}
		id, err := uuid.Parse(*r.Ref)
		if err != nil {
			return errors.Wrapf(err, "task usage: task %s event %d", r.TaskID, *r.Seq)
		}
		if history.Type(*r.EventType) == history.ChildStarted {
			t.Children = append(t.Children, id)
		} else {
			t.ContinuedAs = id
		}
	}
	return nil
}

// Facts returns the tasks folded.
func (f *TaskUsageRows) Facts() []store.TaskUsageFacts { return f.facts }
