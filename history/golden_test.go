package history_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden histories in testdata/ from the definitions in golden_test.go")

// Golden histories are stored as the events table holds them (see
// historytest.EncodedEvent): testdata/NAME.json must replay to the summary in
// testdata/NAME.want; testdata/bad/NAME.json must be refused with an error
// marked ErrInvalidHistory containing the text in testdata/bad/NAME.want.
// The files, not the definitions below, are what the test replays: they pin
// the encoding as well as the fold. Regenerate them with
//
//	go test ./history -run TestGoldenHistories -update
//
// and review the diff.

// goldenSummary is the part of a replayed State a .want file pins.
type goldenSummary struct {
	Status     history.Status `json:"status"`
	Attempt    int            `json:"attempt"`
	LeaseEpoch int64          `json:"lease_epoch"`
	LastSeq    int64          `json:"last_seq"`
	Steps      []string       `json:"steps"`
	LastError  string         `json:"last_error,omitempty"`
	Output     string         `json:"output,omitempty"`
	Patches    []string       `json:"patches,omitempty"` // id@position
	Updates    []string       `json:"updates,omitempty"` // id:output or id:error, or id:pending
}

func summarize(s history.State) goldenSummary {
	sum := goldenSummary{
		Status:     s.Status,
		Attempt:    s.Attempt,
		LeaseEpoch: s.Lease.Epoch,
		LastSeq:    s.LastSeq,
		Steps:      stepNames(s),
		Output:     string(s.Output),
	}
	if s.LastError != nil {
		sum.LastError = s.LastError.Message
	}
	for _, p := range s.Patches {
		sum.Patches = append(sum.Patches, fmt.Sprintf("%s@%d", p.ID, p.Position))
	}
	for _, u := range s.Updates {
		switch {
		case !u.Completed:
			sum.Updates = append(sum.Updates, u.ID+":pending")
		case u.Error != nil:
			sum.Updates = append(sum.Updates, u.ID+":"+u.Error.Message)
		default:
			sum.Updates = append(sum.Updates, u.ID+":"+string(u.Output))
		}
	}
	return sum
}

// badWant is the content of a bad history's .want file.
type badWant struct {
	Error string `json:"error"`
}

// after returns e at Base+d.
func after(d time.Duration, e historytest.E) historytest.E {
	e.At = historytest.Base.Add(d)
	return e
}

// by sets the worker id of e's payload, for events that name one.
func by(worker string, e historytest.E) historytest.E {
	switch p := e.Data.(type) {
	case history.AttemptStartedData:
		p.WorkerID = worker
		e.Data = p
	case history.LeaseExpiredData:
		p.WorkerID = worker
		e.Data = p
	case history.TaskReleasedData:
		p.WorkerID = worker
		e.Data = p
	}
	return e
}

func goldenGood() map[string]struct {
	events []history.Event
	status history.Status
} {
	sec := time.Second
	return map[string]struct {
		events []history.Event
		status history.Status
	}{
		// A three-step workflow: the first attempt fails transiently after
		// its first step, the second loses its lease after the second step,
		// the third finishes.
		"completed_after_retry_and_lease_expiry": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "reserve")),
			after(3*sec, retry(1, "upstream returned 503")),
			after(13*sec, by("worker-2", started(2, 2))),
			after(15*sec, step(2, 1, "charge")),
			after(50*sec, by("worker-2", expired(2, 2))),
			after(61*sec, by("worker-3", started(3, 3))),
			after(62*sec, step(3, 2, "ship")),
			after(63*sec, completed(3)),
		)},
		// Two attempts allowed, both fail: the second is final and the task
		// waits for an operator.
		"dead_lettered": {status: history.StatusDeadLettered, events: build(
			after(0, historytest.E{Data: func() history.TaskScheduledData {
				p := scheduled().Data.(history.TaskScheduledData)
				p.MaxAttempts = 2
				p.Labels = map[string]string{"team": "payments"}
				return p
			}()}),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "reserve")),
			after(3*sec, retry(1, "connection reset")),
			after(13*sec, started(2, 2)),
			after(14*sec, failAttempt(2, history.Transient, "connection reset")),
			after(14*sec, deadLettered(2, "attempts exhausted")),
		)},
		// A worker shutting down gives the task back after two steps; another
		// worker resumes at the third.
		"released_and_resumed": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "reserve")),
			after(3*sec, step(1, 1, "charge")),
			after(4*sec, released(1, 1)),
			after(5*sec, by("worker-2", started(2, 2))),
			after(6*sec, step(2, 2, "ship")),
			after(7*sec, completed(2)),
		)},
		// A permanent error ends the task at once.
		"failed_permanently": {status: history.StatusFailed, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "reserve")),
			after(3*sec, failAttempt(1, history.Permanent, "card declined")),
			after(3*sec, failed(1, "card declined")),
		)},
		// Refused before any attempt.
		"failed_from_pending": {status: history.StatusFailed, events: build(
			after(0, scheduled()),
			after(1*sec, failed(0, "input refused")),
		)},
		// Signals and waits: a signal sent before its receive is taken at
		// once (nothing written); the second receive waits, a signal
		// wakes it; the third times out, and the signal sent after the
		// timeout stays for a later receive.
		"signals_and_waits": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, signal("approval", `{"ok":true}`, "d-1")),
			after(2*sec, started(1, 1)),
			after(3*sec, step(1, 0, "reserve")),
			after(4*sec, historytest.E{Attempt: 1, Data: history.WaitStartedData{Name: "approval", Position: 1, Deadline: historytest.Base.Add(time.Hour)}}),
			after(5*sec, signal("approval", `{"ok":false}`, "d-2")),
			after(6*sec, by("worker-2", started(2, 2))),
			after(7*sec, historytest.E{Attempt: 2, Data: history.WaitStartedData{Name: "approval", Position: 2, Deadline: historytest.Base.Add(8 * sec)}}),
			after(9*sec, by("worker-2", started(3, 3))),
			after(9*sec, historytest.E{Attempt: 3, Data: history.WaitTimedOutData{Name: "approval", Position: 2}}),
			after(10*sec, signal("approval", `"late"`, "")),
			after(11*sec, step(3, 1, "ship")),
			after(12*sec, completed(3)),
		)},
		// Selects: the first finds its signal there (select_matched, its
		// case 0); the second waits on a signal and a child
		// (wait_started with select), a signal of another name leaves it
		// waiting, the child's end wakes it (its case 1); the third's
		// timer wins (its case 1), and the signal sent after stays for a
		// later receive.
		"selects": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, signal("approval", `{"ok":true}`, "d-1")),
			after(2*sec, started(1, 1)),
			after(3*sec, step(1, 0, "reserve")),
			after(3*sec, historytest.E{Attempt: 1, Data: history.ChildStartedData{Position: 0, ChildID: "child-a", TaskType: "ocr_page"}}),
			after(3*sec, historytest.E{Attempt: 1, Data: history.SelectMatchedData{Position: 0, Case: 0, Kind: history.SelectSignal, Name: "approval", Seq: 2}}),
			after(4*sec, historytest.E{Attempt: 1, Data: history.WaitStartedData{Position: 1, Deadline: historytest.Base.Add(time.Hour),
				Select: &history.SelectWait{Signals: []string{"approval"}, Children: []int{0}}}}),
			after(5*sec, signal("other", `1`, "")),
			after(6*sec, historytest.E{Data: history.ChildFinishedData{Position: 0, ChildID: "child-a", Status: history.StatusCompleted, Output: json.RawMessage(`"page"`)}}),
			after(7*sec, by("worker-2", started(2, 2))),
			after(7*sec, historytest.E{Attempt: 2, Data: history.SelectMatchedData{Position: 1, Case: 1, Kind: history.SelectChild, Child: 0, Seq: 9}}),
			after(8*sec, historytest.E{Attempt: 2, Data: history.WaitStartedData{Position: 2, Deadline: historytest.Base.Add(18 * sec),
				Select: &history.SelectWait{Signals: []string{"approval"}}}}),
			after(18*sec, by("worker-2", started(3, 3))),
			after(18*sec, historytest.E{Attempt: 3, Data: history.SelectMatchedData{Position: 2, Case: 1, Kind: history.SelectTimer}}),
			after(19*sec, signal("approval", `"late"`, "")),
			after(20*sec, completed(3)),
		)},
		// Budgets: a batch's task budget and a tenant's inherited one; the
		// first step reserves and settles; the second is refused by the
		// tenant's window (wait), a raise wakes the task, and the next
		// attempt reserves, runs and settles it.
		"budgeted": {status: history.StatusCompleted, events: build(
			after(0, historytest.E{Data: func() history.TaskScheduledData {
				p := scheduled().Data.(history.TaskScheduledData)
				p.Budget = &history.TaskBudget{USD: 2, Tokens: 100_000}
				p.Budgets = []history.TaskBudget{{Ref: "task:0190a000-0000-7000-8000-00000000ba7c", USD: 50, OnExhausted: history.BudgetWait, WaitTimeoutMillis: 3_600_000}}
				return p
			}()}),
			after(1*sec, started(1, 1)),
			after(2*sec, historytest.E{Attempt: 1, Data: history.BudgetReservedData{Position: 0, Step: "draft",
				Budgets: []history.BudgetWindowRef{{Ref: "task:0190a000-0000-7000-8000-00000000ba7c"}, {Ref: "fairness_key:tenant-1", Window: ptr(historytest.Base.Truncate(time.Hour))}},
				Tokens:  4000, CostUSD: 0.04}}),
			after(3*sec, step(1, 0, "draft")),
			after(3*sec, historytest.E{Attempt: 1, Data: history.BudgetSettledData{Position: 0, Step: "draft", Reason: history.SettleStepCompleted,
				Budgets:  []history.BudgetWindowRef{{Ref: "task:0190a000-0000-7000-8000-00000000ba7c"}, {Ref: "fairness_key:tenant-1", Window: ptr(historytest.Base.Truncate(time.Hour))}},
				Reserved: true, ReservedTokens: 4000, ReservedUSD: 0.04, Tokens: 3100, CostUSD: 0.031}}),
			after(4*sec, historytest.E{Attempt: 1, Data: history.BudgetRefusedData{Position: 1, Step: "review",
				Budget: history.BudgetWindowRef{Ref: "fairness_key:tenant-1", Window: ptr(historytest.Base.Truncate(time.Hour))}, Action: history.BudgetWait,
				Tokens: 4000, CostUSD: 0.04, LimitUSD: 1, SpentUSD: 0.99, Deadline: ptr(historytest.Base.Add(time.Hour))}}),
			after(60*sec, historytest.E{Data: history.BudgetRaisedData{Budget: history.BudgetWindowRef{Ref: "fairness_key:tenant-1", Window: ptr(historytest.Base.Truncate(time.Hour))},
				By: "alice@example.com", Reason: "quarter end", USD: 1, LimitUSD: 2}}),
			after(61*sec, by("worker-2", started(2, 2))),
			after(62*sec, historytest.E{Attempt: 2, Data: history.BudgetReservedData{Position: 1, Step: "review",
				Budgets: []history.BudgetWindowRef{{Ref: "fairness_key:tenant-1", Window: ptr(historytest.Base.Truncate(time.Hour))}}, Tokens: 4000, CostUSD: 0.04}}),
			after(63*sec, step(2, 1, "review")),
			after(63*sec, historytest.E{Attempt: 2, Data: history.BudgetSettledData{Position: 1, Step: "review", Reason: history.SettleStepCompleted,
				Budgets:  []history.BudgetWindowRef{{Ref: "fairness_key:tenant-1", Window: ptr(historytest.Base.Truncate(time.Hour))}},
				Reserved: true, ReservedTokens: 4000, ReservedUSD: 0.04, Tokens: 5000, CostUSD: 0.05}}),
			after(64*sec, completed(2)),
		)},
		// Updates: one arrives while the task waits for its approval
		// (due at once); the next attempt replays to the wait, applies it
		// and waits again; a second one fails in its handler; the
		// approval ends the wait.
		"updated": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "draft")),
			after(3*sec, historytest.E{Attempt: 1, Data: history.WaitStartedData{Name: "approval", Position: 0, Deadline: historytest.Base.Add(time.Hour)}}),
			after(4*sec, historytest.E{Data: history.UpdateAcceptedData{UpdateID: "u-1", Name: "reassign", Args: json.RawMessage(`"bob"`), RequestedBy: "alice"}}),
			after(5*sec, by("worker-2", started(2, 2))),
			after(5*sec, historytest.E{Attempt: 2, Data: history.UpdateCompletedData{UpdateID: "u-1", Output: json.RawMessage(`"carol"`),
				At: history.UpdatePoint{Call: 1, Step: 1}}}),
			after(5*sec, historytest.E{Attempt: 2, Data: history.WaitStartedData{Name: "approval", Position: 0, Deadline: historytest.Base.Add(time.Hour)}}),
			after(6*sec, historytest.E{Data: history.UpdateAcceptedData{UpdateID: "u-2", Name: "reassign", Args: json.RawMessage(`""`)}}),
			after(7*sec, by("worker-2", started(3, 3))),
			after(7*sec, historytest.E{Attempt: 3, Data: history.UpdateCompletedData{UpdateID: "u-2",
				Error: &history.ErrorInfo{Class: history.Permanent, Message: "reassign to whom?", ClassifiedBy: "update"}, At: history.UpdatePoint{Call: 1, Step: 1}}}),
			after(7*sec, historytest.E{Attempt: 3, Data: history.WaitStartedData{Name: "approval", Position: 0, Deadline: historytest.Base.Add(time.Hour)}}),
			after(8*sec, signal("approval", `{"approved":true}`, "")),
			after(9*sec, started(4, 4)),
			after(10*sec, step(4, 1, "send")),
			after(11*sec, completed(4)),
		)},
		// Children: two started, the parent awaits the first; it finishes
		// (the parent is due), the second fails, and the parent, woken
		// again, completes with both outcomes.
		"children": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, historytest.E{Attempt: 1, Data: history.ChildStartedData{Position: 0, ChildID: "child-a", TaskType: "ocr_page"}}),
			after(2*sec, historytest.E{Attempt: 1, Data: history.ChildStartedData{Position: 1, ChildID: "child-b", TaskType: "ocr_page", OnParentClose: history.ParentCloseAbandon}}),
			after(2*sec, historytest.E{Attempt: 1, Data: history.ChildWaitStartedData{Positions: []int{0}}}),
			after(5*sec, historytest.E{Data: history.ChildFinishedData{Position: 0, ChildID: "child-a", Status: history.StatusCompleted, Output: json.RawMessage(`{"text":"page 1"}`)}}),
			after(6*sec, by("worker-2", started(2, 2))),
			after(6*sec, historytest.E{Attempt: 2, Data: history.ChildWaitStartedData{Positions: []int{1}}}),
			after(7*sec, historytest.E{Data: history.ChildFinishedData{Position: 1, ChildID: "child-b", Status: history.StatusFailed,
				Error: &history.ErrorInfo{Class: history.Permanent, Message: "unreadable page"}}}),
			after(8*sec, by("worker-2", started(3, 3))),
			after(9*sec, completed(3)),
		)},
		// Patched: the workflow passed workflow.Patched("add-classify")
		// at the frontier after its first step, and took the new branch.
		"patched": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "extract")),
			after(2*sec, historytest.E{Attempt: 1, Data: history.PatchRecordedData{PatchID: "add-classify", Position: 1}}),
			after(3*sec, step(1, 1, "classify")),
			after(4*sec, step(1, 2, "store")),
			after(5*sec, completed(1)),
		)},
		// Streamed: the first attempt's step streamed 500 chunks and
		// failed (its stream rewound), the second's streamed 900 and
		// completed; the history holds one stream_closed per attempt, not
		// the chunks.
		"streamed": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, historytest.E{Attempt: 1, Data: history.StreamClosedData{Name: "tokens", Position: 0, Chunks: 500, Bytes: 2500,
				Digest: "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8", Outcome: history.StreamRewound}}),
			after(2*sec, retry(1, "model overloaded")),
			after(3*sec, started(2, 2)),
			after(4*sec, historytest.E{Attempt: 2, Data: history.StreamClosedData{Name: "tokens", Position: 0, Chunks: 900, Bytes: 4500,
				Digest: "7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730", Outcome: history.StreamCompleted}}),
			after(4*sec, step(2, 0, "answer")),
			after(5*sec, historytest.E{Attempt: 2, Data: history.StreamClosedData{Name: "progress", Position: -1, Chunks: 2, Bytes: 80,
				Outcome: history.StreamCompleted}}),
			after(5*sec, completed(2)),
		)},
		// Waited under a model rate limit: the step's turn came after
		// 41.5 s, 3 steps ahead of it; the wait is written before its
		// completion.
		"model_waited": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(43*sec, historytest.E{Attempt: 1, Data: history.ModelLimitWaitedData{Position: 0, Step: "summarize", Model: "gpt-4o",
				WaitedMS: 41_500, Tokens: 1200, Ahead: 3}}),
			after(43*sec, step(1, 0, "summarize")),
			after(44*sec, completed(1)),
		)},
		// A run that continued as new after a step: it ends continued,
		// naming the next run; that run's task_scheduled names this one.
		"continued": {status: history.StatusContinued, events: build(
			after(0, historytest.E{Data: func() history.TaskScheduledData {
				p := scheduled().Data.(history.TaskScheduledData)
				p.ContinuedFrom = "run-1"
				return p
			}()}),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "poll")),
			after(3*sec, historytest.E{Attempt: 1, Data: history.TaskContinuedData{NextTaskID: "run-3"}}),
		)},
		// A completed task forked at its second step, after it finished:
		// task_forked names the fork; the status stays.
		"fork_origin": {status: history.StatusCompleted, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 0, "reserve")),
			after(3*sec, step(1, 1, "charge")),
			after(4*sec, step(1, 2, "ship")),
			after(5*sec, completed(1)),
			after(60*sec, historytest.E{Data: history.TaskForkedData{ForkTaskID: "fork-1", Position: 1, By: "alice"}}),
		)},
		// The fork: its first two steps copied from the original (one
		// with an edited output), the third run by its own attempt.
		"forked": {status: history.StatusCompleted, events: build(
			after(0, historytest.E{Data: func() history.TaskScheduledData {
				p := scheduled().Data.(history.TaskScheduledData)
				p.ForkedFrom = &history.ForkOrigin{TaskID: "orig-1", Position: 1}
				return p
			}()}),
			after(0, historytest.E{Data: history.StepCompletedData{Position: 0, Name: "reserve", Output: json.RawMessage(`{"id":"r-1"}`), CopiedFromSeq: 3}}),
			after(0, historytest.E{Data: history.StepCompletedData{Position: 1, Name: "charge", Output: json.RawMessage(`{"amount":12}`), CopiedFromSeq: 4}}),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 2, "ship")),
			after(3*sec, completed(1)),
		)},
		// A fork of a patched task: the original's marker copied before
		// the copied step at its position, so the fork takes the branch
		// the original took.
		"forked_patched": {status: history.StatusCompleted, events: build(
			after(0, historytest.E{Data: func() history.TaskScheduledData {
				p := scheduled().Data.(history.TaskScheduledData)
				p.ForkedFrom = &history.ForkOrigin{TaskID: "orig-2", Position: 0}
				return p
			}()}),
			after(0, historytest.E{Data: history.PatchRecordedData{PatchID: "add-classify", Position: 0, CopiedFromSeq: 3}}),
			after(0, historytest.E{Data: history.StepCompletedData{Position: 0, Name: "classify", Output: json.RawMessage(`"invoice"`), CopiedFromSeq: 4}}),
			after(1*sec, started(1, 1)),
			after(2*sec, step(1, 1, "store")),
			after(3*sec, completed(1)),
		)},
		// Still running: the second attempt holds the lease.
		"in_flight": {status: history.StatusRunning, events: build(
			after(0, scheduled()),
			after(1*sec, started(1, 1)),
			after(2*sec, retry(1, "timeout")),
			after(12*sec, by("worker-2", started(2, 2))),
			after(13*sec, step(2, 0, "reserve")),
		)},
	}
}

// goldenBad returns the known-bad histories, encoded, with the text their
// error must contain.
func goldenBad(t *testing.T) map[string]struct {
	data  []byte
	error string
} {
	t.Helper()
	good := goldenGood()
	encode := func(events []history.Event) []byte {
		t.Helper()
		data, err := historytest.EncodeEvents(events)
		require.NoError(t, err)
		return data
	}
	edit := func(name string, fn func(events []history.Event) []history.Event) []byte {
		t.Helper()
		events := append([]history.Event(nil), good[name].events...)
		return encode(fn(events))
	}
	renumber := func(events []history.Event) []history.Event {
		for i := range events {
			events[i].Seq = int64(i + 1)
		}
		return events
	}
	// Events whose data is written by hand, as it would be by a buggy or
	// future writer.
	raw := func(name string, seq int64, typ history.Type, data string) []byte {
		t.Helper()
		var encoded []historytest.EncodedEvent
		require.NoError(t, json.Unmarshal(encode(good[name].events), &encoded))
		encoded[seq-1].Type = history.Type(typ)
		encoded[seq-1].Data = json.RawMessage(data)
		out, err := historytest.FormatEncoded(encoded)
		require.NoError(t, err)
		return out
	}

	const flow = "completed_after_retry_and_lease_expiry"
	type bad = struct {
		data  []byte
		error string
	}
	return map[string]bad{
		"seq_gap": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				return append(ev[:4], ev[5:]...) // drop seq 5
			}),
			error: "event 6 (step_completed): expected seq 5",
		},
		"seq_repeated": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				ev[3].Seq = 3
				return ev
			}),
			error: "event 3 (attempt_failed): expected seq 4",
		},
		"starts_without_scheduled": {
			data:  edit(flow, func(ev []history.Event) []history.Event { return renumber(ev[1:]) }),
			error: "event 1 (attempt_started): a history starts with task_scheduled",
		},
		"event_after_completed": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				return append(ev, history.Event{Seq: 11, At: ev[9].At, Attempt: 4, Data: history.AttemptStartedData{WorkerID: "worker-4", LeaseEpoch: 4}})
			}),
			error: "event 11 (attempt_started): task is already completed",
		},
		"attempt_not_incremented": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				ev[4].Attempt = 1
				return ev
			}),
			error: "event 5 (attempt_started): attempt 1 follows attempt 1",
		},
		"epoch_not_raised": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				p := ev[4].Data.(history.AttemptStartedData)
				p.LeaseEpoch = 1
				ev[4].Data = p
				return ev
			}),
			error: "event 5 (attempt_started): lease epoch 1 does not exceed 1",
		},
		"stale_lease_expiry": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				p := ev[6].Data.(history.LeaseExpiredData)
				p.LeaseEpoch = 1
				ev[6].Data = p
				return ev
			}),
			error: "event 7 (lease_expired): lease epoch 1, current is 2",
		},
		"step_position_repeated": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				p := ev[5].Data.(history.StepCompletedData)
				p.Position = 0
				ev[5].Data = p
				return ev
			}),
			error: "event 6 (step_completed): position 0, expected 1 or a later position not on record",
		},
		"step_while_retrying": {
			data: edit(flow, func(ev []history.Event) []history.Event {
				return append(ev[:4], history.Event{Seq: 5, At: ev[3].At, Attempt: 1, Data: history.StepCompletedData{Position: 1, Name: "charge"}})
			}),
			error: "event 5 (step_completed): task is retrying, not running",
		},
		"completed_after_final_failure": {
			data: edit("failed_permanently", func(ev []history.Event) []history.Event {
				ev[4].Data = history.TaskCompletedData{}
				return ev
			}),
			error: "event 5 (task_completed): attempt 1 already ended",
		},
		"signal_dedup_repeated": {
			data: edit("signals_and_waits", func(ev []history.Event) []history.Event {
				p := ev[5].Data.(history.SignalReceivedData)
				p.DedupID = "d-1"
				ev[5].Data = p
				return ev
			}),
			error: `event 6 (signal_received): dedup id "d-1" already received`,
		},
		"step_while_waiting": {
			data: edit("signals_and_waits", func(ev []history.Event) []history.Event {
				return append(ev[:9], history.Event{Seq: 10, At: ev[8].At, Attempt: 3, Data: history.StepCompletedData{Position: 1, Name: "ship"}})
			}),
			error: `event 10 (step_completed): receive 2 waits for signal "approval"`,
		},
		"timed_out_after_signal": {
			data: edit("signals_and_waits", func(ev []history.Event) []history.Event {
				// The signal came first: the receive takes it, it cannot
				// time out.
				return append(ev[:7], history.Event{Seq: 8, At: ev[6].At, Attempt: 2, Data: history.WaitTimedOutData{Name: "approval", Position: 1}})
			}),
			error: `event 8 (wait_timed_out): no receive 1 waits for signal "approval"`,
		},
		"child_finished_twice": {
			data: edit("children", func(ev []history.Event) []history.Event {
				dup := ev[5]
				dup.Seq = 7
				return append(ev[:6], dup)
			}),
			error: "event 7 (child_finished): child 0 has already finished",
		},
		"child_position_skipped": {
			data: edit("children", func(ev []history.Event) []history.Event {
				p := ev[3].Data.(history.ChildStartedData)
				p.Position = 2
				ev[3].Data = p
				return ev[:4]
			}),
			error: "event 4 (child_started): position 2, expected 1",
		},
		"await_finished_child": {
			data: edit("children", func(ev []history.Event) []history.Event {
				w := ev[7]
				w.Data = history.ChildWaitStartedData{Positions: []int{0}}
				return append(ev[:7], w)
			}),
			error: "event 8 (child_wait_started): child 0 has finished",
		},
		"select_signal_not_received": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[5].Data = history.SelectMatchedData{Position: 0, Kind: history.SelectSignal, Name: "approval", Seq: 3}
				return ev[:6]
			}),
			error: `event 6 (select_matched): no signal "approval" was received at event 3`,
		},
		"select_unknown_kind": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[5].Data = history.SelectMatchedData{Position: 0, Kind: "carrier_pigeon"}
				return ev[:6]
			}),
			error: `event 6 (select_matched): unknown kind "carrier_pigeon"`,
		},
		"select_position_repeated": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[10].Data = history.SelectMatchedData{Position: 0, Case: 1, Kind: history.SelectChild, Child: 0, Seq: 9}
				return ev[:11]
			}),
			error: "event 11 (select_matched): position 0 does not follow select 0",
		},
		"select_child_not_finished": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[6].Data = history.SelectMatchedData{Position: 1, Case: 1, Kind: history.SelectChild, Child: 0}
				return ev[:7]
			}),
			error: "event 7 (select_matched): child 0 did not finish at event 0",
		},
		"select_wait_timed_out": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[13].Data = history.WaitTimedOutData{Position: 2}
				return ev[:14]
			}),
			error: `event 14 (wait_timed_out): no receive 2 waits for signal ""`,
		},
		"select_wait_with_name": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[6].Data = history.WaitStartedData{Name: "approval", Position: 1, Deadline: ev[6].At, Select: &history.SelectWait{Signals: []string{"approval"}}}
				return ev[:7]
			}),
			error: `event 7 (wait_started): a select's wait names no signal of its own (got "approval")`,
		},
		"select_wait_finished_child": {
			data: edit("selects", func(ev []history.Event) []history.Event {
				ev[11].Data = history.WaitStartedData{Position: 2, Deadline: ev[11].At, Select: &history.SelectWait{Children: []int{0}}}
				return ev[:12]
			}),
			error: "event 12 (wait_started): child 0 has finished",
		},
		"budget_settled_unreserved": {
			data: edit("budgeted", func(ev []history.Event) []history.Event {
				return append(ev[:2], history.Event{Seq: 3, At: ev[2].At, Attempt: 1, Data: history.BudgetSettledData{Position: 0, Step: "draft",
					Reason: history.SettleStepCompleted, Budgets: []history.BudgetWindowRef{{Ref: "namespace"}}, Reserved: true}})
			}),
			error: "event 3 (budget_settled): step 0 holds no reservation in attempt 1",
		},
		"budget_reserved_twice": {
			data: edit("budgeted", func(ev []history.Event) []history.Event {
				dup := ev[2]
				dup.Seq = 4
				return append(ev[:3], dup)
			}),
			error: "event 4 (budget_reserved): step 0 already holds a reservation in attempt 1",
		},
		"budget_wait_with_reservation_open": {
			data: edit("budgeted", func(ev []history.Event) []history.Event {
				refused := ev[5]
				refused.Seq = 4
				return append(ev[:3], refused)
			}),
			error: "event 4 (budget_refused): step 0's reservation is not settled",
		},
		"budget_unknown_ref": {
			data: edit("budgeted", func(ev []history.Event) []history.Event {
				ev[2].Data = history.BudgetReservedData{Position: 0, Step: "draft", Budgets: []history.BudgetWindowRef{{Ref: "tenant-1"}}}
				return ev[:3]
			}),
			error: "event 3 (budget_reserved): budget \"tenant-1\": not one of namespace",
		},
		"budget_raised_without_by": {
			data: edit("budgeted", func(ev []history.Event) []history.Event {
				ev[6].Data = history.BudgetRaisedData{Budget: history.BudgetWindowRef{Ref: "namespace"}, USD: 1}
				return ev[:7]
			}),
			error: "event 7 (budget_raised): no requester (by)",
		},
		"budget_scheduled_invalid": {
			data: edit("budgeted", func(ev []history.Event) []history.Event {
				p := ev[0].Data.(history.TaskScheduledData)
				p.Budget = &history.TaskBudget{OnExhausted: "pray"}
				ev[0].Data = p
				return ev[:1]
			}),
			error: "event 1 (task_scheduled): the task's own budget",
		},
		"update_accepted_twice": {
			data: edit("updated", func(ev []history.Event) []history.Event {
				dup := ev[4]
				dup.Seq = 6
				return append(ev[:5], dup)
			}),
			error: `event 6 (update_accepted): update "u-1" already accepted`,
		},
		"update_completed_unaccepted": {
			data: edit("updated", func(ev []history.Event) []history.Event {
				ev[6].Data = history.UpdateCompletedData{UpdateID: "u-9"}
				return ev[:7]
			}),
			error: `event 7 (update_completed): update "u-9" was not accepted`,
		},
		"update_completed_outside_attempt": {
			data: edit("updated", func(ev []history.Event) []history.Event {
				done := ev[6]
				done.Seq = 6
				return append(ev[:5], done)
			}),
			error: "event 6 (update_completed): task is pending, not running",
		},
		"update_after_completion": {
			data: edit("updated", func(ev []history.Event) []history.Event {
				return append(ev, history.Event{Seq: 17, At: ev[15].At, Data: history.UpdateAcceptedData{UpdateID: "u-3", Name: "reassign"}})
			}),
			error: "event 17 (update_accepted): task is already completed",
		},
		"patch_recorded_twice": {
			data: edit("patched", func(ev []history.Event) []history.Event {
				dup := ev[3]
				dup.Seq = 5
				return append(ev[:4], dup)
			}),
			error: `event 5 (patch_recorded): patch "add-classify" already recorded`,
		},
		"patch_without_id": {
			data: edit("patched", func(ev []history.Event) []history.Event {
				ev[3].Data = history.PatchRecordedData{Position: 1}
				return ev[:4]
			}),
			error: "event 4 (patch_recorded): a patch id must not be empty",
		},
		"patch_outside_attempt": {
			data: edit("failed_permanently", func(ev []history.Event) []history.Event {
				return append(ev[:4], history.Event{Seq: 5, At: ev[3].At, Attempt: 1, Data: history.PatchRecordedData{PatchID: "p", Position: 1}})
			}),
			error: "event 5 (patch_recorded): attempt 1 already ended",
		},
		"stream_closed_outside_attempt": {
			data: edit("failed_permanently", func(ev []history.Event) []history.Event {
				return append(ev[:4], history.Event{Seq: 5, At: ev[3].At, Attempt: 1,
					Data: history.StreamClosedData{Name: "tokens", Chunks: 1, Bytes: 1, Outcome: history.StreamCompleted}})
			}),
			error: "event 5 (stream_closed): attempt 1 already ended",
		},
		"model_limit_waited_outside_attempt": {
			data: edit("failed_permanently", func(ev []history.Event) []history.Event {
				return append(ev[:4], history.Event{Seq: 5, At: ev[3].At, Attempt: 1,
					Data: history.ModelLimitWaitedData{Position: 1, Step: "s", Model: "gpt-4o", WaitedMS: 5}})
			}),
			error: "event 5 (model_limit_waited): attempt 1 already ended",
		},
		"model_limit_waited_negative": {
			data: edit("model_waited", func(ev []history.Event) []history.Event {
				p := ev[2].Data.(history.ModelLimitWaitedData)
				p.WaitedMS = -1
				ev[2].Data = p
				return ev[:3]
			}),
			error: "event 3 (model_limit_waited): waited -1 ms, 1200 tokens, 3 ahead: none may be negative",
		},
		"model_limit_waited_without_model": {
			data: edit("model_waited", func(ev []history.Event) []history.Event {
				p := ev[2].Data.(history.ModelLimitWaitedData)
				p.Model = ""
				ev[2].Data = p
				return ev[:3]
			}),
			error: "event 3 (model_limit_waited): a model is 1 to 200 bytes",
		},
		"stream_closed_bad_outcome": {
			data: edit("streamed", func(ev []history.Event) []history.Event {
				p := ev[2].Data.(history.StreamClosedData)
				p.Outcome = "lost"
				ev[2].Data = p
				return ev[:3]
			}),
			error: `event 3 (stream_closed): outcome "lost" is neither "completed" nor "rewound"`,
		},
		"stream_closed_without_name": {
			data: edit("streamed", func(ev []history.Event) []history.Event {
				p := ev[2].Data.(history.StreamClosedData)
				p.Name = ""
				ev[2].Data = p
				return ev[:3]
			}),
			error: "event 3 (stream_closed): a stream name must not be empty",
		},
		"continued_after_cancel": {
			data: edit("continued", func(ev []history.Event) []history.Event {
				cancel := history.Event{Seq: 4, At: ev[2].At, Data: history.CancelRequestedData{By: "ops"}}
				cont := ev[3]
				cont.Seq = 5
				return append(ev[:3], cancel, cont)
			}),
			error: "event 5 (task_continued): the task's cancel was requested",
		},
		"continued_without_next": {
			data: edit("continued", func(ev []history.Event) []history.Event {
				ev[3].Data = history.TaskContinuedData{}
				return ev
			}),
			error: "event 4 (task_continued): no next task id",
		},
		"copy_after_attempt": {
			data: edit("forked", func(ev []history.Event) []history.Event {
				cp := ev[2]
				cp.Seq, cp.Data = 6, history.StepCompletedData{Position: 3, Name: "late", CopiedFromSeq: 2}
				return append(ev[:5], cp)
			}),
			error: "event 6 (step_completed): a copy follows only task_scheduled and other copies",
		},
		"fork_missing_copies": {
			data: edit("forked", func(ev []history.Event) []history.Event {
				st := ev[3]
				st.Seq = 3
				return append(ev[:2], st)
			}),
			error: "event 3 (attempt_started): a fork at position 1 holds 1 copied steps, not 2",
		},
		"copy_outside_fork": {
			data: edit("released_and_resumed", func(ev []history.Event) []history.Event {
				return append(ev[:1], history.Event{Seq: 2, At: ev[0].At, Data: history.StepCompletedData{Position: 0, Name: "reserve", CopiedFromSeq: 2}})
			}),
			error: "event 2 (step_completed): a copy in a task that is not a fork",
		},
		"patch_copy_beyond_fork": {
			data: edit("forked_patched", func(ev []history.Event) []history.Event {
				ev[1].Data = history.PatchRecordedData{PatchID: "add-classify", Position: 1, CopiedFromSeq: 3}
				return ev[:2]
			}),
			error: "event 2 (patch_recorded): copied marker at position 1, beyond the fork's position 0",
		},
		"patch_copy_after_attempt": {
			data: edit("forked_patched", func(ev []history.Event) []history.Event {
				return append(ev[:5], history.Event{Seq: 6, At: ev[4].At, Data: history.PatchRecordedData{PatchID: "late", Position: 0, CopiedFromSeq: 3}})
			}),
			error: "event 6 (patch_recorded): a copy follows only task_scheduled and other copies",
		},
		"forked_at_missing_step": {
			data: edit("fork_origin", func(ev []history.Event) []history.Event {
				ev[6].Data = history.TaskForkedData{ForkTaskID: "fork-1", Position: 3}
				return ev
			}),
			error: "event 7 (task_forked): step 3 is not on record",
		},
		"unknown_schema_version": {
			data:  raw("released_and_resumed", 3, history.StepCompleted, `{"v":2,"position":0,"name":"reserve"}`),
			error: "unknown schema version 2",
		},
		"unknown_event_type": {
			data:  raw("released_and_resumed", 5, "task_paused", `{"v":1}`),
			error: `unknown event type "task_paused"`,
		},
		"no_data": {
			data:  raw("released_and_resumed", 2, history.AttemptStarted, `null`),
			error: "no schema version",
		},
		"empty": {
			data:  []byte("[]\n"),
			error: "empty history",
		},
	}
}

func writeGolden(t *testing.T) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join("testdata", "bad"), 0o755))
	// Start from scratch so that a history whose definition was removed
	// does not live on. (testdata/fuzz and testdata/rapid are not touched.)
	for _, pattern := range []string{"*.json", "*.want", "bad/*.json", "bad/*.want"} {
		stale, err := filepath.Glob(filepath.Join("testdata", filepath.FromSlash(pattern)))
		require.NoError(t, err)
		for _, path := range stale {
			require.NoError(t, os.Remove(path))
		}
	}
	for name, g := range goldenGood() {
		s := mustReplay(t, g.events)
		require.Equal(t, g.status, s.Status, "%s replays to the wrong status; fix its definition", name)
		data, err := historytest.EncodeEvents(g.events)
		require.NoError(t, err)
		writeFile(t, filepath.Join("testdata", name+".json"), data)
		writeJSON(t, filepath.Join("testdata", name+".want"), summarize(s))
	}
	for name, b := range goldenBad(t) {
		writeFile(t, filepath.Join("testdata", "bad", name+".json"), b.data)
		writeJSON(t, filepath.Join("testdata", "bad", name+".want"), badWant{Error: b.error})
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	writeFile(t, path, append(data, '\n'))
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o644))
	t.Logf("wrote %s", path)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err, "every golden history needs a .want file next to it")
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), path)
}

func TestGoldenHistories(t *testing.T) {
	t.Parallel()

	if *update {
		writeGolden(t)
	}

	good, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, good)
	for _, path := range good {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			data, err := os.ReadFile(path)
			require.NoError(t, err)
			events, err := historytest.DecodeEvents(data)
			require.NoError(t, err)
			var want goldenSummary
			readJSON(t, strings.TrimSuffix(path, ".json")+".want", &want)

			s := mustReplay(t, events)
			require.Equal(t, want, summarize(s))
			checkProperties(t, events)

			// The file is in the form EncodeEvents writes.
			again, err := historytest.EncodeEvents(events)
			require.NoError(t, err)
			require.Equal(t, string(data), string(again), "re-encoding changed the file; run with -update and review")
		})
	}

	bad, err := filepath.Glob(filepath.Join("testdata", "bad", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, bad)
	for _, path := range bad {
		name := "bad/" + strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			data, err := os.ReadFile(path)
			require.NoError(t, err)
			var want badWant
			readJSON(t, strings.TrimSuffix(path, ".json")+".want", &want)
			require.NotEmpty(t, want.Error)

			var events []history.Event
			require.NotPanics(t, func() { events, err = historytest.DecodeEvents(data) })
			if err == nil {
				require.NotPanics(t, func() { _, err = history.Replay(events) })
			}
			requireMarked(t, err)
			require.Contains(t, err.Error(), want.Error)
		})
	}
}

func ptr[T any](v T) *T { return &v }
