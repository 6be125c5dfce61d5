package history

import (
	"encoding/json"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
)

// Type names an event. The string values are stored in the database and
// never change; Go constants are the CamelCase forms of the same facts.
type Type string

// The event types. Each is a past-tense fact about one task.
const (
	TaskScheduled    Type = "task_scheduled"
	AttemptStarted   Type = "attempt_started"
	StepCompleted    Type = "step_completed"
	AttemptFailed    Type = "attempt_failed"
	LeaseExpired     Type = "lease_expired"
	TaskReleased     Type = "task_released"
	TaskCompleted    Type = "task_completed"
	TaskFailed       Type = "task_failed"
	TaskDeadLettered Type = "task_dead_lettered"
	TaskRequeued     Type = "task_requeued"

	CancelRequested       Type = "cancel_requested"
	CompensationRequested Type = "compensation_requested"
	CompensationStarted   Type = "compensation_started"
	StepCompensated       Type = "step_compensated"
	CompensationFailed    Type = "compensation_failed"
	TaskCancelled         Type = "task_cancelled"
	TaskExpired           Type = "task_expired"
	TimerStarted          Type = "timer_started"
	TimerFired            Type = "timer_fired"
	SignalReceived        Type = "signal_received"
	WaitStarted           Type = "wait_started"
	WaitTimedOut          Type = "wait_timed_out"
	ChildStarted          Type = "child_started"
	ChildWaitStarted      Type = "child_wait_started"
	ChildFinished         Type = "child_finished"
	TaskErased            Type = "task_erased"
	PatchRecorded         Type = "patch_recorded"
	TaskContinued         Type = "task_continued"
	TaskForked            Type = "task_forked"
	SelectMatched         Type = "select_matched"
	StreamClosed          Type = "stream_closed"
	UpdateAccepted        Type = "update_accepted"
	UpdateCompleted       Type = "update_completed"
	BudgetReserved        Type = "budget_reserved"
	BudgetSettled         Type = "budget_settled"
	BudgetRefused         Type = "budget_refused"
	BudgetRaised          Type = "budget_raised"
	ModelLimitWaited      Type = "model_limit_waited"
	RemoteStepDispatched  Type = "remote_step_dispatched"
	RemoteStepCompleted   Type = "remote_step_completed"
	RemoteStepFailed      Type = "remote_step_failed"
	RemoteWaitStarted     Type = "remote_wait_started"
)

// Types lists every event type this version of the package understands, in
// the order of the constants above.
var Types = []Type{
	TaskScheduled, AttemptStarted, StepCompleted, AttemptFailed, LeaseExpired,
	TaskReleased, TaskCompleted, TaskFailed, TaskDeadLettered, TaskRequeued,
	CancelRequested, CompensationRequested, CompensationStarted, StepCompensated, CompensationFailed, TaskCancelled,
	TaskExpired, TimerStarted, TimerFired, SignalReceived, WaitStarted, WaitTimedOut,
	ChildStarted, ChildWaitStarted, ChildFinished, TaskErased, PatchRecorded, TaskContinued, TaskForked,
	SelectMatched,
	StreamClosed,
	UpdateAccepted, UpdateCompleted,
	BudgetReserved, BudgetSettled, BudgetRefused, BudgetRaised,
	ModelLimitWaited,
	RemoteStepDispatched, RemoteStepCompleted, RemoteStepFailed, RemoteWaitStarted,
}

// Event is one entry of a task's append-only log.
//
// Seq numbers a task's events 1..n without gaps. At is supplied by the writer
// (history reads no clock). Attempt is the attempt an event belongs to, or 0
// for events that belong to none (task_scheduled, task_failed from pending).
type Event struct {
	Seq     int64
	At      time.Time
	Attempt int
	Data    Payload
}

// Type returns the event's type, taken from its payload.
func (e Event) Type() Type {
	if e.Data == nil {
		return ""
	}
	return e.Data.EventType()
}

// Payload is the type-specific body of an [Event]. Implementations are the
// structs of this package; each encodes as a JSON object carrying its schema
// version in the field "v".
type Payload interface {
	EventType() Type
}

// TaskScheduledData is the payload of task_scheduled: everything needed to run the
// task, including the retry limits so the engine can enforce them without
// importing user code.
type TaskScheduledData struct {
	Namespace      string            `json:"namespace"`
	TaskType       string            `json:"task_type"`
	TypeVersion    int               `json:"type_version"`
	Queue          string            `json:"queue"`
	Priority       int               `json:"priority"`
	Input          json.RawMessage   `json:"input,omitempty"`
	RunAt          time.Time         `json:"run_at"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	TraceID        string            `json:"trace_id,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	// MaxAttempts is the retry budget: the most attempts a step gets. 0
	// (a history written without one) means DefaultMaxAttempts, never
	// unlimited: read it through AttemptBudget.
	MaxAttempts int `json:"max_attempts"`
	// Deadline, when set, is the schedule-to-close deadline: the task is
	// given up (dead-lettered) rather than started or retried after it.
	Deadline *time.Time `json:"deadline,omitempty"`
	// StartDeadline, when set, is the latest time the task may first
	// start: a task not started by then ends task_expired and never runs
	// (load shedding of work that is useless late).
	StartDeadline *time.Time `json:"start_deadline,omitempty"`
	// FairnessKey, when set, names who the task is for (a tenant, a user, a
	// chat): within a queue, due tasks of one priority are served round
	// robin across keys, so one key's flood does not delay another's task.
	FairnessKey string `json:"fairness_key,omitempty"`
	// FairnessWeight gives the key this many turns for one of a key of
	// weight 1. Zero means 1.
	FairnessWeight int `json:"fairness_weight,omitempty"`
	// ParentID is the task that started this one as its child, at
	// ParentPosition among its children; empty for a task started on its
	// own. The child's terminal append reports to the parent
	// (child_finished).
	ParentID       string `json:"parent_id,omitempty"`
	ParentPosition int    `json:"parent_position,omitempty"`
	// ContinuedFrom is the run this task continues as new (its
	// task_continued names this task): empty for the first run of a
	// chain. Unlike the fields above it is not kept on the task's row
	// (readers take it from the history), so a state rebuilt from the
	// row (a claim's) has it empty.
	ContinuedFrom string `json:"continued_from,omitempty"`
	// ForkedFrom, on a fork, names the task it was forked from and the
	// position it was forked at: the events after this one, up to the
	// first attempt, are copies of that task's steps at positions 0 to
	// ForkedFrom.Position (StepCompletedData.CopiedFromSeq). nil for a
	// task started otherwise.
	ForkedFrom *ForkOrigin `json:"forked_from,omitempty"`
	// Budget, when set, is the task's own spending budget (its Ref
	// empty: the reference is "task:<the task's id>"), and Budgets those
	// it inherits from its ancestors, nearest last: every budget that
	// covered its parent covers it. Before a step that declares its spend
	// runs, the spend is reserved against each (see [BudgetReservedData]).
	Budget  *TaskBudget  `json:"budget,omitempty"`
	Budgets []TaskBudget `json:"budgets,omitempty"`
}

// ForkOrigin names the task a fork was made from, TaskID, and the step
// position it was forked at: the fork holds copies of that task's steps
// at positions 0 to Position and runs the rest itself.
type ForkOrigin struct {
	TaskID   string `json:"task_id"`
	Position int    `json:"position"`
}

// DefaultMaxAttempts is the retry budget of a task scheduled without one
// (max_attempts 0), and the default retry policy's.
const DefaultMaxAttempts = 10

// AttemptBudget is the retry budget max_attempts n stands for: n, or
// DefaultMaxAttempts when n is 0 (or less). No budget is unlimited: a step
// that keeps crashing its worker is dead-lettered at it.
func AttemptBudget(n int) int {
	if n <= 0 {
		return DefaultMaxAttempts
	}
	return n
}

// MaxFairnessWeight bounds [TaskScheduledData.FairnessWeight].
const MaxFairnessWeight = 1000

// AttemptStartedData is the payload of attempt_started: a worker claimed the
// task under a lease.
type AttemptStartedData struct {
	WorkerID       string    `json:"worker_id"`
	LeaseEpoch     int64     `json:"lease_epoch"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// StepCompletedData is the payload of step_completed: the step at Position
// ran to completion and returned Output.
type StepCompletedData struct {
	Position int             `json:"position"`
	Name     string          `json:"name"`
	Output   json.RawMessage `json:"output,omitempty"`
	// OutputRef, in place of Output, names the blob holding an output over
	// the worker's blob threshold (the history keeps the reference, the
	// bytes are in the blobs table); readers resolve it.
	OutputRef *BlobRef `json:"output_ref,omitempty"`
	// Compensable says the step registered a compensator: cancelling the
	// task, or its permanent failure, undoes it.
	Compensable bool `json:"compensable,omitempty"`
	// DurationMillis is how long the step's function ran, in
	// milliseconds. Zero in events written before it was recorded (and
	// for a step that took under a millisecond).
	DurationMillis int64 `json:"duration_ms,omitempty"`
	// Usage is what the step reported spending on AI models, one entry
	// per model, in model order.
	Usage []Usage `json:"usage,omitempty"`
	// CopiedFromSeq, when above 0, marks a step a fork copied from the
	// task it was forked from (TaskScheduledData.ForkedFrom): the seq of
	// the event that recorded the step there (its step_completed, or the
	// timer_fired of a sleep, copied as a step named "sleep"). A copy
	// follows the fork's task_scheduled or another copy, belongs to no
	// attempt (Attempt 0), and carries no usage: the step ran, and was
	// paid for, in the original.
	CopiedFromSeq int64 `json:"copied_from_seq,omitempty"`
}

// Usage is what a step spent on one AI model: the tokens sent and
// received, and their cost in US dollars, as the step reported them.
type Usage struct {
	Model        string  `json:"model"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// UsageOf returns the usage an event's payload records: the Usage of a
// step_completed or an attempt_failed, nil for any other event. Roll-ups
// of what tasks spent sum it over histories; a fork's copied steps carry
// none (the original paid).
func UsageOf(p Payload) []Usage {
	switch d := p.(type) {
	case StepCompletedData:
		return d.Usage
	case AttemptFailedData:
		return d.Usage
	}
	return nil
}

// Spend is what a step declares it may spend before it runs
// (workflow.StepOpts.Spend): the engine reserves it against the budgets
// and model rate limits that apply, and settles the reservation with
// the step's reported [Usage] once it has run. Model names the model it
// calls (rate limits key by it); Tokens counts input and output tokens
// together.
type Spend struct {
	Model   string  `json:"model,omitempty"`
	Tokens  int64   `json:"tokens,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// MaxSpendModelBytes bounds [Spend.Model] (and a usage's model name).
const MaxSpendModelBytes = 200

// Validate reports what is wrong with s: negative or non-finite amounts,
// a model name over [MaxSpendModelBytes], or nothing declared at all.
func (s Spend) Validate() error {
	switch {
	case s.Tokens < 0:
		return errors.Newf("spend: tokens %d is negative", s.Tokens)
	case math.IsNaN(s.CostUSD) || math.IsInf(s.CostUSD, 0) || s.CostUSD < 0:
		return errors.Newf("spend: cost_usd %v is not a non-negative number", s.CostUSD)
	case len(s.Model) > MaxSpendModelBytes:
		return errors.Newf("spend: model name of %d bytes is over the limit of %d", len(s.Model), MaxSpendModelBytes)
	case s.Tokens == 0 && s.CostUSD == 0 && s.Model == "":
		return errors.Newf("spend: declares nothing (set Model, Tokens or CostUSD)")
	}
	return nil
}

// Class says whether a failure is worth retrying.
type Class string

// The error classes.
const (
	Transient Class = "transient"
	Permanent Class = "permanent"
)

// ErrorInfo is failure evidence as plain data: it survives a database round
// trip where a Go error chain would not.
type ErrorInfo struct {
	Class   Class             `json:"class"`
	Message string            `json:"message"`
	Kind    string            `json:"kind,omitempty"`
	Status  int               `json:"status,omitempty"`
	Attrs   map[string]string `json:"attrs,omitempty"`
	// Step and Position name the step that failed, if a step failed.
	Step     string `json:"step,omitempty"`
	Position int    `json:"position,omitempty"`
	// RetryAfter is a hint from the failing code, in milliseconds.
	RetryAfterMillis int64 `json:"retry_after_ms,omitempty"`
	// ClassifiedBy says what decided Class: "mark:permanent",
	// "mark:transient", "mark:retry_after", "rule:<kind>" for errors that
	// are always permanent, "policy:<name>" for a CEL policy (its
	// expression in Policy), or "default:step" / "default:workflow".
	ClassifiedBy string `json:"classified_by,omitempty"`
	// Policy is the expression of the CEL policy that classified the
	// error, and PolicyError the error it gave, if its evaluation failed
	// (which counts as permanent).
	Policy      string `json:"policy,omitempty"`
	PolicyError string `json:"policy_error,omitempty"`
}

// AttemptFailedData is the payload of attempt_failed. NextRunAt is set when
// the task will be retried; when it is nil the event is followed by a terminal
// event in the same append.
type AttemptFailedData struct {
	Error     ErrorInfo  `json:"error"`
	NextRunAt *time.Time `json:"next_run_at,omitempty"`
	// Usage is what the failed step reported spending on AI models
	// before it failed: a failed call is paid for too.
	Usage []Usage `json:"usage,omitempty"`
}

// LeaseExpiredData is the payload of lease_expired: the rescuer found the
// attempt's lease past its expiry and rescheduled the task at NextRunAt.
type LeaseExpiredData struct {
	WorkerID   string    `json:"worker_id"`
	LeaseEpoch int64     `json:"lease_epoch"`
	NextRunAt  time.Time `json:"next_run_at"`
}

// TaskReleasedData is the payload of task_released: a worker shutting down
// gave the task back before finishing the attempt, so another worker can take
// it at once instead of after the lease expires.
type TaskReleasedData struct {
	WorkerID   string `json:"worker_id"`
	LeaseEpoch int64  `json:"lease_epoch"`
	Reason     string `json:"reason,omitempty"`
}

// TaskCompletedData is the payload of task_completed.
type TaskCompletedData struct {
	Output json.RawMessage `json:"output,omitempty"`
}

// TaskFailedData is the payload of task_failed: a permanent error ended the
// task.
type TaskFailedData struct {
	Error ErrorInfo `json:"error"`
	// Compensated lists the positions of the steps compensated before the
	// task failed, in the order they were compensated.
	Compensated []int `json:"compensated,omitempty"`
}

// TaskDeadLetteredData is the payload of task_dead_lettered: the task used up
// its retry budget (or otherwise needs an operator) and waits for manual
// review.
type TaskDeadLetteredData struct {
	Reason string    `json:"reason"`
	Error  ErrorInfo `json:"error"`
}

// TaskRequeuedData is the payload of task_requeued: an operator (By) sent a
// dead-lettered task back to the queue, for Reason. The attempt count goes
// on; the retry budget starts afresh.
type TaskRequeuedData struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// CancelRequestedData is the payload of cancel_requested: By asked for the
// task to stop, for Reason. A task that has not started is cancelled in the
// same append; a running one stops at its next checkpoint.
type CancelRequestedData struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// CompensationRequestedData is the payload of compensation_requested: By
// asked for a completed task's steps to be undone.
type CompensationRequestedData struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// Why compensation runs.
const (
	CompensateCancelled = "cancelled" // the task was cancelled
	CompensateFailed    = "failed"    // the task failed permanently
	CompensateRequested = "requested" // compensation of a completed task was requested
)

// CompensationStartedData is the payload of compensation_started: the
// attempt undoes the completed compensable steps at Steps (positions, in
// the order they will be compensated: the reverse of completion). Reason is
// one of the Compensate* constants; Error is the failure that led to it,
// when Reason is "failed".
type CompensationStartedData struct {
	Reason string     `json:"reason"`
	Steps  []int      `json:"steps"`
	Error  *ErrorInfo `json:"error,omitempty"`
}

// StepCompensatedData is the payload of step_compensated: the compensator
// of the step at Position ran to completion.
type StepCompensatedData struct {
	Position int    `json:"position"`
	Name     string `json:"name"`
}

// CompensationFailedData is the payload of compensation_failed: the
// compensator of the step at Position failed permanently (or used up its
// retries). The task is dead-lettered for a person to look at; a requeue
// resumes compensation with this step.
type CompensationFailedData struct {
	Position int       `json:"position"`
	Name     string    `json:"name"`
	Error    ErrorInfo `json:"error"`
}

// TaskCancelledData is the payload of task_cancelled. Compensated lists the
// positions of the steps compensated, in order.
type TaskCancelledData struct {
	Reason      string `json:"reason,omitempty"`
	Compensated []int  `json:"compensated,omitempty"`
}

// TimerStartedData is the payload of timer_started: the workflow sleeps at
// step Position until FireAt. It ends the attempt, so no worker slot is
// held while the timer runs; the task is due again at FireAt.
type TimerStartedData struct {
	Position int       `json:"position"`
	FireAt   time.Time `json:"fire_at"`
}

// TimerFiredData is the payload of timer_fired: the timer at Position
// fired, and the workflow goes on past it. It records the sleep as a
// completed step named "sleep".
type TimerFiredData struct {
	Position int `json:"position"`
}

// SignalReceivedData is the payload of signal_received: Sender sent the
// task a signal called Name carrying Payload. It may arrive in any
// non-terminal state and does not change the task's status; a task
// waiting for a signal of that name is due at once. DedupID, when set,
// makes the send idempotent: a second signal with the same DedupID is not
// written.
//
// Signals are consumed by position, not by a further event: the workflow's
// Nth receive of a name that does not time out takes the Nth signal of
// that name in history order.
type SignalReceivedData struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Sender  string          `json:"sender,omitempty"`
	DedupID string          `json:"dedup_id,omitempty"`
}

// WaitStartedData is the payload of wait_started: the workflow's receive
// at Position (its ordinal among the workflow's receives, counted from 0)
// waits for a signal called Name until Deadline. Like timer_started it
// ends the attempt, so no worker slot is held while the task waits; the
// task is due again when a signal of that name arrives or at Deadline.
//
// Select, when set, makes it the wait of a workflow.Select at receive
// Position that found none of its cases ready: Name is then empty, and
// the task is due again when a signal called one of Select.Signals
// arrives, a child at one of Select.Children finishes, or at Deadline
// (the select's earliest timer; [Never] when it has none). Histories
// written before selects have no Select.
type WaitStartedData struct {
	Name     string      `json:"name"`
	Position int         `json:"position"`
	Deadline time.Time   `json:"deadline"`
	Select   *SelectWait `json:"select,omitempty"`
}

// WaitTimedOutData is the payload of wait_timed_out: the receive at
// Position reached its deadline with no signal called Name, and returned
// without one. A signal of that name arriving later stays in the history
// for the next receive of the name.
type WaitTimedOutData struct {
	Name     string `json:"name"`
	Position int    `json:"position"`
}

// PatchRecordedData is the payload of patch_recorded: the workflow's
// code called workflow.Patched (or workflow.DeprecatePatch) for PatchID
// and took the patched branch, on its first run past that point.
// Position is the step position the run was at (its next step's), kept
// for audit; the marker takes no step position of its own. A task's
// later runs read the marker and take the patched branch again; a
// history without it that has progress past the point was written by
// code without the patch, and takes the old branch. An id is recorded at
// most once per task.
type PatchRecordedData struct {
	PatchID  string `json:"patch_id"`
	Position int    `json:"position"`
	// CopiedFromSeq, when above 0, marks a marker a fork copied from the
	// task it was forked from (TaskScheduledData.ForkedFrom), with the
	// seq of its record there: like a copied step, it belongs to no
	// attempt and is among the fork's copies, before the copied step at
	// its position. The fork then takes the branch the original took.
	CopiedFromSeq int64 `json:"copied_from_seq,omitempty"`
}

// MaxPatchIDBytes bounds a patch id's length in bytes.
const MaxPatchIDBytes = 200

// ValidPatchID returns why id cannot be a patch id, or nil: an id is
// 1..[MaxPatchIDBytes] bytes of printable UTF-8 (spaces allowed, no
// control characters).
func ValidPatchID(id string) error {
	switch {
	case id == "":
		return errors.New("a patch id must not be empty")
	case len(id) > MaxPatchIDBytes:
		return errors.Newf("patch id of %d bytes is over the limit of %d", len(id), MaxPatchIDBytes)
	case !utf8.ValidString(id):
		return errors.Newf("patch id %q is not valid UTF-8", id)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return errors.Newf("patch id %q holds the unprintable character %U", id, r)
		}
	}
	return nil
}

// What becomes of a parent's running child when the parent ends other
// than by completing (cancelled, failed, dead-lettered): the child's
// policy, chosen when it starts.
const (
	ParentCloseCancel  = "cancel"  // a cancel is requested of the child (the default)
	ParentCloseAbandon = "abandon" // the child runs on, on its own
)

// ChildStartedData is the payload of child_started: the workflow's child
// at Position (its ordinal among the workflow's children, counted from 0)
// was started as task ChildID, of TaskType at TypeVersion. It is written
// in the same transaction as the child's task_scheduled, which names the
// parent and the position, so a child exists exactly when its parent's
// history says so. OnParentClose is one of the ParentClose* constants
// (empty means cancel).
type ChildStartedData struct {
	Position      int    `json:"position"`
	ChildID       string `json:"child_id"`
	TaskType      string `json:"task_type"`
	TypeVersion   int    `json:"type_version,omitempty"`
	OnParentClose string `json:"on_parent_close,omitempty"`
}

// ChildWaitStartedData is the payload of child_wait_started: the workflow
// awaits its children at Positions, none of which has finished, until
// Count of them have (0 means 1). Like wait_started it ends the attempt,
// so no worker slot is held while the children run; the task is due again
// when the Count-th of them finishes (child_finished), or at its
// deadline. A workflow awaiting one child's result awaits it alone; one
// whose starts the cap on running children holds back awaits half of the
// running ones, to start as many more in one attempt.
type ChildWaitStartedData struct {
	Positions []int `json:"positions"`
	Count     int   `json:"count,omitempty"`
}

// ChildFinishedData is the payload of child_finished: the child at
// Position, task ChildID, ended with Status (a terminal status), with
// Output when it completed and Error, its failure evidence, when it did
// not. The child's terminal append writes it into the parent's log in the
// same transaction; a parent waiting on the child is due at once.
//
// A child that continued as new reports when the last run of its chain
// ends: ChildID is still the id the parent started (the chain's first
// run), RunID the run that ended, whose Output it is (the parent's
// append of the report maps one to the other by the child's position).
type ChildFinishedData struct {
	Position int             `json:"position"`
	ChildID  string          `json:"child_id"`
	Status   Status          `json:"status"`
	Output   json.RawMessage `json:"output,omitempty"`
	Error    *ErrorInfo      `json:"error,omitempty"`
	RunID    string          `json:"run_id,omitempty"`
}

// TaskContinuedData is the payload of task_continued: the workflow
// continued as new (workflow.ContinueAsNew), so this run ended (status
// continued) and task NextTaskID, of the same type and version, runs on
// with a new input and a new history. The next run's task_scheduled is
// written in the same transaction and names this task (continued_from).
type TaskContinuedData struct {
	NextTaskID string `json:"next_task_id"`
}

// TaskErasedData is the payload of task_erased: the finished task's data
// key was destroyed (crypto-shredding), so every payload sealed with it is
// unreadable for good. The events stay: who did what, when, and how each
// attempt ended. By names who erased it and Reason why.
type TaskErasedData struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// TaskForkedData is the payload of task_forked: task ForkTaskID was
// forked from this one at step Position (Client.Fork), By asking. It may
// follow any status, a finished one included, and changes none: the
// original stays as it is (a reset cancels it by a request of its own).
// An erased task is not forked: its outputs are unreadable.
type TaskForkedData struct {
	ForkTaskID string `json:"fork_task_id"`
	Position   int    `json:"position"`
	By         string `json:"by,omitempty"`
}

// Never is the run time of a task due at no particular time: a parent
// awaiting its children, which their finishing makes due.
var Never = time.Date(9999, time.January, 1, 0, 0, 0, 0, time.UTC)

// SleepStepName is the name a fired timer has among a task's steps.
const SleepStepName = "sleep"

// TaskExpiredData is the payload of task_expired: the task was not started
// by its start deadline and never will be.
type TaskExpiredData struct {
	Reason string `json:"reason"`
}

// EventType implements [Payload].
func (TaskScheduledData) EventType() Type { return TaskScheduled }

// EventType implements [Payload].
func (AttemptStartedData) EventType() Type { return AttemptStarted }

// EventType implements [Payload].
func (StepCompletedData) EventType() Type { return StepCompleted }

// EventType implements [Payload].
func (AttemptFailedData) EventType() Type { return AttemptFailed }

// EventType implements [Payload].
func (LeaseExpiredData) EventType() Type { return LeaseExpired }

// EventType implements [Payload].
func (TaskReleasedData) EventType() Type { return TaskReleased }

// EventType implements [Payload].
func (TaskCompletedData) EventType() Type { return TaskCompleted }

// EventType implements [Payload].
func (TaskFailedData) EventType() Type { return TaskFailed }

// EventType implements [Payload].
func (TaskDeadLetteredData) EventType() Type { return TaskDeadLettered }

// EventType implements [Payload].
func (TaskRequeuedData) EventType() Type { return TaskRequeued }

// EventType implements [Payload].
func (CancelRequestedData) EventType() Type { return CancelRequested }

// EventType implements [Payload].
func (CompensationRequestedData) EventType() Type { return CompensationRequested }

// EventType implements [Payload].
func (CompensationStartedData) EventType() Type { return CompensationStarted }

// EventType implements [Payload].
func (StepCompensatedData) EventType() Type { return StepCompensated }

// EventType implements [Payload].
func (CompensationFailedData) EventType() Type { return CompensationFailed }

// EventType implements [Payload].
func (TaskCancelledData) EventType() Type { return TaskCancelled }

// EventType implements [Payload].
func (TaskExpiredData) EventType() Type { return TaskExpired }

// EventType implements [Payload].
func (TimerStartedData) EventType() Type { return TimerStarted }

// EventType implements [Payload].
func (TimerFiredData) EventType() Type { return TimerFired }

// EventType implements [Payload].
func (SignalReceivedData) EventType() Type { return SignalReceived }

// EventType implements [Payload].
func (WaitStartedData) EventType() Type { return WaitStarted }

// EventType implements [Payload].
func (WaitTimedOutData) EventType() Type { return WaitTimedOut }

// EventType implements [Payload].
func (ChildStartedData) EventType() Type { return ChildStarted }

// EventType implements [Payload].
func (ChildWaitStartedData) EventType() Type { return ChildWaitStarted }

// EventType implements [Payload].
func (ChildFinishedData) EventType() Type { return ChildFinished }
func (TaskErasedData) EventType() Type    { return TaskErased }

// EventType implements [Payload].
func (PatchRecordedData) EventType() Type { return PatchRecorded }

// EventType implements [Payload].
func (StreamClosedData) EventType() Type { return StreamClosed }

// EventType implements [Payload].
func (ModelLimitWaitedData) EventType() Type { return ModelLimitWaited }

// EventType implements [Payload].
func (TaskContinuedData) EventType() Type { return TaskContinued }

// EventType implements [Payload].
func (TaskForkedData) EventType() Type { return TaskForked }

// EventType implements [Payload].
func (SelectMatchedData) EventType() Type  { return SelectMatched }
func (UpdateAcceptedData) EventType() Type { return UpdateAccepted }

// EventType implements [Payload].
func (UpdateCompletedData) EventType() Type { return UpdateCompleted }
