package enginetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// ProjectionDiff compares a task's projection row with the replay of its
// history and describes each column where they differ; it returns nil when
// they agree. lease_expires_at is left out: heartbeats extend it without an
// event. JSON columns are compared by value, since PostgreSQL normalizes
// jsonb.
func ProjectionDiff(t *store.Task, s history.State) []string {
	var diffs []string
	check := func(column string, row, replay any) {
		if !reflect.DeepEqual(row, replay) {
			diffs = append(diffs, fmt.Sprintf("%s: row %v, replay %v", column, row, replay))
		}
	}
	checkTime := func(column string, row *time.Time, replay time.Time) {
		switch {
		case row == nil && replay.IsZero():
		case row == nil || !row.Equal(replay):
			diffs = append(diffs, fmt.Sprintf("%s: row %v, replay %v", column, row, replay))
		}
	}
	checkJSON := func(column string, row, replay json.RawMessage) {
		if !jsonEqual(row, replay) {
			diffs = append(diffs, fmt.Sprintf("%s: row %s, replay %s", column, row, replay))
		}
	}
	sc := s.Scheduled
	check("namespace", t.Namespace, sc.Namespace)
	check("queue", t.Queue, sc.Queue)
	check("type", t.Type, sc.TaskType)
	check("type_version", t.TypeVersion, sc.TypeVersion)
	check("priority", t.Priority, sc.Priority)
	check("max_attempts", t.MaxAttempts, sc.MaxAttempts)
	check("idempotency_key", t.IdempotencyKey, sc.IdempotencyKey)
	check("trace_id", t.TraceID, sc.TraceID)
	checkJSON("input", t.Input, sc.Input)
	if len(t.Labels) > 0 || len(sc.Labels) > 0 {
		check("labels", t.Labels, sc.Labels)
	}
	if t.Deadline != nil || sc.Deadline != nil {
		check("deadline", t.Deadline, sc.Deadline)
	}
	if t.StartDeadline != nil || sc.StartDeadline != nil {
		check("start_deadline", t.StartDeadline, sc.StartDeadline)
	}
	check("fairness_key", t.FairnessKey, sc.FairnessKey)
	check("fairness_weight", t.FairnessWeight, sc.FairnessWeight)
	check("parent_id", plan.ParentString(t.ParentID), sc.ParentID)
	check("parent_position", t.ParentPosition, sc.ParentPosition)
	check("status", t.Status, s.Status)
	checkTime("run_at", &t.RunAt, s.RunAt)
	check("attempt", t.Attempt, s.Attempt)
	check("lease_owner", t.LeaseOwner, s.Lease.Owner)
	check("lease_epoch", t.LeaseEpoch, s.Lease.Epoch)
	checkJSON("output", t.Output, s.Output)
	check("last_error", t.LastError, s.LastError)
	check("cancel_requested", t.CancelRequest, s.CancelRequested)
	check("last_seq", t.LastSeq, s.LastSeq)
	checkTime("created_at", &t.CreatedAt, s.CreatedAt)
	checkTime("updated_at", &t.UpdatedAt, s.UpdatedAt)
	checkTime("started_at", t.StartedAt, s.StartedAt)
	checkTime("finished_at", t.FinishedAt, s.FinishedAt)
	if (t.LeaseExpiresAt != nil) != (s.Lease.Owner != "") {
		diffs = append(diffs, fmt.Sprintf("lease_expires_at: row %v while lease owner is %q", t.LeaseExpiresAt, s.Lease.Owner))
	}
	return diffs
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b))
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}
