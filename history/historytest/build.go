// Package historytest helps test code that reads or writes task histories:
// a builder for hand-written histories ([Build]), a seeded generator of valid
// ones ([Events], [FromSeed], [Long]), and the encoded form histories take in
// golden files and fuzz corpora ([EncodeEvents], [DecodeEvents]).
//
// Everything here is deterministic: times start at [Base] and advance by
// fixed or drawn amounts; nothing reads the wall clock.
package historytest

import (
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/history"
)

// Base is the time hand-written and generated histories start at. It is UTC
// and has no precision below the microsecond, like every time a history
// written by Postgres carries.
var Base = time.Date(2026, time.January, 2, 3, 4, 5, 123456000, time.UTC)

// The defaults [Build] fills into the time fields the constructors leave
// zero.
const (
	// LeaseTTL is how long after attempt_started its lease expires.
	LeaseTTL = 30 * time.Second
	// Backoff is how long after attempt_failed or lease_expired the retry is
	// due.
	Backoff = 10 * time.Second
)

// E is one event of a hand-written history before [Build] numbers it.
type E struct {
	Attempt int
	Data    history.Payload
	// At is the event's time. When zero, Build sets it one second after the
	// previous event's (Base for the first).
	At time.Time
}

// Build numbers events 1..n and gives each its time (see [E.At]). It also
// fills the payload times the constructors of this package leave zero:
// attempt_started's LeaseExpiresAt becomes At+[LeaseTTL]; lease_expired's
// NextRunAt, and an attempt_failed NextRunAt that points at the zero time,
// become At+[Backoff]. Anything else is kept as given, so tests can build
// invalid histories as easily as valid ones (and may renumber or reorder the
// result afterwards).
func Build(events ...E) []history.Event {
	out := make([]history.Event, len(events))
	at := Base.Add(-time.Second)
	for i, e := range events {
		if e.At.IsZero() {
			at = at.Add(time.Second)
		} else {
			at = e.At
		}
		out[i] = history.Event{
			Seq:     int64(i + 1),
			At:      at,
			Attempt: e.Attempt,
			Data:    fillTimes(e.Data, at),
		}
	}
	return out
}

func fillTimes(p history.Payload, at time.Time) history.Payload {
	switch p := p.(type) {
	case history.AttemptStartedData:
		if p.LeaseExpiresAt.IsZero() {
			p.LeaseExpiresAt = at.Add(LeaseTTL)
		}
		return p
	case history.LeaseExpiredData:
		if p.NextRunAt.IsZero() {
			p.NextRunAt = at.Add(Backoff)
		}
		return p
	case history.AttemptFailedData:
		if p.NextRunAt != nil && p.NextRunAt.IsZero() {
			next := at.Add(Backoff)
			p.NextRunAt = &next
		}
		return p
	}
	return p
}

// Worker is the worker id the constructors use.
const Worker = "worker-1"

// Scheduled returns a task_scheduled event for a task of type
// "send_invoice" allowing three attempts, due at Base.
func Scheduled() E {
	return E{Data: history.TaskScheduledData{
		Namespace:   "default",
		TaskType:    "send_invoice",
		TypeVersion: 1,
		Queue:       "default",
		Input:       json.RawMessage(`{"invoice":42}`),
		RunAt:       Base,
		MaxAttempts: 3,
	}}
}

// Started returns attempt_started for attempt under lease epoch, held by
// [Worker].
func Started(attempt int, epoch int64) E {
	return E{Attempt: attempt, Data: history.AttemptStartedData{WorkerID: Worker, LeaseEpoch: epoch}}
}

// Step returns step_completed for the step named name at position, with a
// small JSON output.
func Step(attempt, position int, name string) E {
	out, _ := json.Marshal(map[string]any{"step": name, "position": position})
	return E{Attempt: attempt, Data: history.StepCompletedData{Position: position, Name: name, Output: out}}
}

// Retry returns attempt_failed with a transient error and a next run time.
func Retry(attempt int, message string) E {
	next := time.Time{}
	return E{Attempt: attempt, Data: history.AttemptFailedData{
		Error:     history.ErrorInfo{Class: history.Transient, Message: message},
		NextRunAt: &next,
	}}
}

// FailAttempt returns attempt_failed without a next run time: the attempt
// failed for good, and a terminal event must follow.
func FailAttempt(attempt int, class history.Class, message string) E {
	return E{Attempt: attempt, Data: history.AttemptFailedData{
		Error: history.ErrorInfo{Class: class, Message: message},
	}}
}

// Expired returns lease_expired for attempt's lease at epoch.
func Expired(attempt int, epoch int64) E {
	return E{Attempt: attempt, Data: history.LeaseExpiredData{WorkerID: Worker, LeaseEpoch: epoch}}
}

// Released returns task_released for attempt's lease at epoch.
func Released(attempt int, epoch int64) E {
	return E{Attempt: attempt, Data: history.TaskReleasedData{WorkerID: Worker, LeaseEpoch: epoch, Reason: "shutdown"}}
}

// Completed returns task_completed with a small JSON output.
func Completed(attempt int) E {
	return E{Attempt: attempt, Data: history.TaskCompletedData{Output: json.RawMessage(`{"ok":true}`)}}
}

// Failed returns task_failed with a permanent error.
func Failed(attempt int, message string) E {
	return E{Attempt: attempt, Data: history.TaskFailedData{
		Error: history.ErrorInfo{Class: history.Permanent, Message: message},
	}}
}

// DeadLettered returns task_dead_lettered for reason.
func DeadLettered(attempt int, reason string) E {
	return E{Attempt: attempt, Data: history.TaskDeadLetteredData{
		Reason: reason,
		Error:  history.ErrorInfo{Class: history.Transient, Message: reason},
	}}
}

// Requeued returns task_requeued by an operator.
func Requeued(reason string) E {
	return E{Data: history.TaskRequeuedData{By: "alice@example.com", Reason: reason}}
}

// Signal returns signal_received for a signal called name carrying the
// JSON payload, sent by "api" with dedupID (none when empty).
func Signal(name, payload, dedupID string) E {
	var p json.RawMessage
	if payload != "" {
		p = json.RawMessage(payload)
	}
	return E{Data: history.SignalReceivedData{Name: name, Payload: p, Sender: "api", DedupID: dedupID}}
}
