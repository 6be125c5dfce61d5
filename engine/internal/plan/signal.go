package plan

import (
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// StateFromRow is the state a task's projection row holds, with the wait
// it is in (nil: none). It lacks what the row does not keep (steps,
// signals, children, compensation, the retry budget), so it serves an
// append that neither reads nor changes those: a signal's. Everything the
// append writes back to the row comes from the row, so the row stays
// equal to the replay.
func StateFromRow(t *store.Task, wait *history.WaitStartedData) history.State {
	s := history.State{
		Scheduled: ScheduledFromRow(t), Status: t.Status, Attempt: t.Attempt, RunAt: t.RunAt,
		Lease:     history.Lease{Owner: t.LeaseOwner, Epoch: t.LeaseEpoch},
		LastError: t.LastError, Output: t.Output, CancelRequested: t.CancelRequest, LastSeq: t.LastSeq,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
	if t.StartedAt != nil {
		s.StartedAt = *t.StartedAt
	}
	if t.FinishedAt != nil {
		s.FinishedAt = *t.FinishedAt
	}
	if wait != nil {
		s.Wait = &history.Wait{Position: wait.Position, Name: wait.Name, Deadline: wait.Deadline, Select: wait.Select}
	}
	return s
}

// DecodeWait decodes the data of a wait_started event, as a driver's
// SignalLookup reads it.
func DecodeWait(data []byte) (*history.WaitStartedData, error) {
	payload, err := history.Decode(history.WaitStarted, data)
	if err != nil {
		return nil, err
	}
	w, ok := payload.(history.WaitStartedData)
	if !ok {
		return nil, errors.AssertionFailedf("wait_started decoded as %T", payload)
	}
	w = NormalizePayload(w).(history.WaitStartedData)
	return &w, nil
}
