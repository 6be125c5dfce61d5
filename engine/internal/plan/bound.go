package plan

import (
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
)

// HistoryBound checks a planned append against a store's history limits
// (resolved: 0 is no bound). An append without a signal is not bounded
// (see [store.HistoryLimits]). The event bound is checked here, exactly:
// the append writes only at the seq it planned from. The byte bound needs
// the task's running total, which only the database has: maxBytes is the
// bound the driver's write checks against it (0: none), and the driver
// explains a refusal with [HistoryBytesRefusal].
func HistoryBound(p *store.EventAppendParams, ap AppendPlan, limits store.HistoryLimits) (maxBytes int64, err error) {
	if !ap.Signal {
		return 0, nil
	}
	adding := int64(len(ap.Events))
	if limits.MaxEvents > 0 && p.State.LastSeq+adding > limits.MaxEvents {
		return 0, errors.WithStack(&store.HistoryFullError{
			TaskID: p.TaskID, Events: p.State.LastSeq, Adding: adding, MaxEvents: limits.MaxEvents,
			AddingBytes: ap.Bytes, MaxBytes: limits.MaxBytes,
		})
	}
	return limits.MaxBytes, nil
}

// HistoryBytesRefusal is the error of an append the byte bound refused,
// given the task's running total: nil when the total leaves room (the
// refusal had another cause).
func HistoryBytesRefusal(p *store.EventAppendParams, ap AppendPlan, maxBytes, historyBytes int64) error {
	if maxBytes == 0 || historyBytes+ap.Bytes <= maxBytes {
		return nil
	}
	return errors.WithStack(&store.HistoryFullError{
		TaskID: p.TaskID, Events: p.State.LastSeq, Adding: int64(len(ap.Events)), Bytes: historyBytes,
		AddingBytes: ap.Bytes, MaxBytes: maxBytes,
	})
}
