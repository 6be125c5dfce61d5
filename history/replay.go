package history

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrInvalidHistory marks every error that reports an event sequence (or an
// encoded event) that cannot be a task's history.
var ErrInvalidHistory = errors.New("invalid history")

func invalidf(cause error, format string, args ...any) error {
	var err error
	if cause != nil {
		err = errors.Wrapf(cause, format, args...)
	} else {
		err = errors.Newf(format, args...)
	}
	return &invalidHistory{err}
}

// invalidHistory marks err as ErrInvalidHistory so the standard library's
// errors.Is matches as well as cockroachdb's (internal/errmark does the
// same elsewhere; history imports no cairn package).
type invalidHistory struct{ err error }

func (e *invalidHistory) Error() string        { return e.err.Error() }
func (e *invalidHistory) Unwrap() error        { return e.err }
func (e *invalidHistory) Is(target error) bool { return target == ErrInvalidHistory }

// Status is where a task stands. The strings are stored and shown to users.
type Status string

// The task statuses.
const (
	StatusPending      Status = "pending"
	StatusRunning      Status = "running"
	StatusRetrying     Status = "retrying"
	StatusCompleted    Status = "completed"
	StatusFailed       Status = "failed"
	StatusCancelled    Status = "cancelled"
	StatusDeadLettered Status = "dead_lettered"
	StatusExpired      Status = "expired" // not started by its start deadline
	// StatusContinued is the end of a run that continued as new
	// (task_continued): the task's work goes on in the run it names
	// (State.ContinuedAs).
	StatusContinued Status = "continued"
)

// AttemptsUsed is the number of attempts that count against max_attempts:
// every attempt started except those handed back by a stopping worker.
func (s State) AttemptsUsed() int { return s.Attempt - s.Released }

// Terminal reports whether no further event but an explicit requeue can
// follow a task in status s.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusDeadLettered, StatusExpired, StatusContinued:
		return true
	}
	return false
}

// Budget is the retry budget in use: attempts and time spent on the step
// the task is at. It is per step, as in Temporal's per-activity retries:
// completing a step starts the next one's budget afresh (with the running
// attempt as its first), and so does a requeue. Attempts handed back by a
// stopping worker do not count.
type Budget struct {
	Attempts int       // attempts begun on this step, released ones excluded
	Since    time.Time // at of the first of them; zero before it
}

// Timer is a durable timer: the workflow's step Position sleeps until
// FireAt.
type Timer struct {
	Position int
	FireAt   time.Time
}

// Signal is a signal the task received (signal_received), with the seq of
// its event.
type Signal struct {
	Seq     int64
	Name    string
	Payload json.RawMessage
	Sender  string
	DedupID string
}

// Wait is a receive that waited for a signal: the workflow's receive at
// Position (its ordinal among the workflow's receives) waits for a signal
// called Name until Deadline. TimedOut is set by wait_timed_out.
//
// Select is set for the wait of a workflow.Select (see [WaitStartedData]):
// Name is then empty, and the wait ends at a signal called one of
// Select.Signals or the end of a child at one of Select.Children.
type Wait struct {
	Position int
	Name     string
	Deadline time.Time
	TimedOut bool
	Select   *SelectWait
}

// Child is a child workflow the task started (child_started), with its
// outcome once it finished (child_finished).
type Child struct {
	Position      int
	ID            string
	TaskType      string
	TypeVersion   int
	OnParentClose string // one of the ParentClose* constants; empty means cancel
	Finished      bool
	Status        Status
	Output        json.RawMessage
	Error         *ErrorInfo
	FinishedSeq   int64 // seq of its child_finished
	// RunID is the run that ended, when the child continued as new (its
	// chain's last): the owner of Output. Empty otherwise.
	RunID string
}

// ChildWait is a wait for Count of the children at Positions to finish;
// Finished counts those that have.
type ChildWait struct {
	Positions []int
	Count     int
	Finished  int
}

// ChildByID returns the position of the child that is task id, or -1.
func (s State) ChildByID(id string) int {
	for _, c := range s.Children {
		if c.ID == id {
			return c.Position
		}
	}
	return -1
}

// HasSignal reports whether the task received a signal with dedupID.
func (s State) HasSignal(dedupID string) bool {
	for _, sig := range s.Signals {
		if sig.DedupID == dedupID {
			return true
		}
	}
	return false
}

// Patch is a patch marker (patch_recorded): the workflow took the branch
// of patch ID, first at step position Position.
type Patch struct {
	ID       string
	Position int
}

// HasPatch reports whether the task recorded the marker of patch id.
func (s State) HasPatch(id string) bool {
	for _, p := range s.Patches {
		if p.ID == id {
			return true
		}
	}
	return false
}

// Compensation is the undoing of a task's completed steps.
type Compensation struct {
	// Reason is one of the Compensate* constants.
	Reason string
	// Started is set by compensation_started; before it, compensation has
	// only been requested (compensation_requested).
	Started bool
	Pending []int // positions still to compensate, in order
	Done    []int // positions compensated, in order
	// Cause is the failure that led to compensation, when Reason is
	// "failed".
	Cause *ErrorInfo
}

// IsStarted reports whether compensation has started (c may be nil).
func (c *Compensation) IsStarted() bool { return c != nil && c.Started }

// Lease is the claim a worker holds on a running task. Epoch grows with every
// attempt and is kept after the lease ends, so a stale worker's writes can be
// fenced off by comparing epochs.
type Lease struct {
	Owner     string
	Epoch     int64
	ExpiresAt time.Time // as granted when the attempt started; heartbeats extend it outside the log
}

// Fork is a task forked from this one at step Position (task_forked).
type Fork struct {
	TaskID   string `json:"task_id"`
	Position int    `json:"position"`
}

// Step is a completed step as the history records it.
type Step struct {
	Position int
	Name     string
	Output   json.RawMessage
	// OutputRef names the blob holding the output when the history keeps
	// it by reference (Output is then empty until a reader resolves it).
	OutputRef   *BlobRef
	Compensable bool // the step registered a compensator
}

// State is what replaying a task's history yields. The engine's tasks
// projection row holds the same values; see docs/architecture.md.
type State struct {
	Scheduled TaskScheduledData // the task_scheduled payload

	Status  Status
	Attempt int // the latest attempt number, 0 before the first
	// Released counts attempts handed back by task_released (a worker
	// shutting down) and those that ended waiting (wait_started,
	// child_wait_started). They are not failures and do not use up
	// max_attempts.
	Released int
	// Budget is what the failing step has used of its retry budget.
	Budget    Budget
	RunAt     time.Time // when the task is next due (or was, once running)
	Lease     Lease
	Steps     []Step // completed steps, by position, up to the first position not on record (see Ahead)
	LastError *ErrorInfo
	Output    json.RawMessage
	// Ahead are the steps completed beyond the first position not on
	// record, by position: parallel steps (workflow.Go, workflow.Map)
	// that finished while one before them ran on or failed. They join
	// Steps once the positions before them are on record.
	Ahead []Step

	CancelRequested bool
	// Compensation is set once compensation of the task's steps has been
	// requested or has started.
	Compensation *Compensation
	// Timer is the durable timer the workflow sleeps on, from
	// timer_started until timer_fired.
	Timer *Timer
	// Signals are the signals received, in history order; Waits the
	// receives that waited (wait_started), by position; Wait the one the
	// task waits on now, from wait_started until a signal of its name
	// arrives or wait_timed_out.
	Signals []Signal
	Waits   []Wait
	Wait    *Wait
	// Selects are the workflow.Select calls decided (select_matched), by
	// position among receives: which case won each.
	Selects []SelectMatch
	// Children are the child workflows started, by position, with their
	// outcomes once finished; ChildWait the children the task awaits now,
	// from child_wait_started until one of them finishes.
	Children  []Child
	ChildWait *ChildWait
	// Remote are the remote steps dispatched and not completed
	// (workflow.Remote), by position: in flight, or failed; RemoteWait
	// the remote steps the task awaits now, from remote_wait_started until
	// enough of them complete or one fails.
	Remote     []RemoteStep
	RemoteWait *RemoteWait
	// Patches are the patch markers recorded (patch_recorded), in
	// history order: the workflow.Patched calls that took the patched
	// branch.
	Patches []Patch
	// Erased is set by task_erased: the task's data key is gone, its
	// payloads unreadable, and nothing may reopen it.
	Erased bool
	// ContinuedAs is the id of the run this one continued as
	// (task_continued), set with status continued.
	ContinuedAs string
	// Forks are the tasks forked from this one (task_forked), in history
	// order.
	Forks []Fork
	// Updates are the updates accepted (update_accepted), in history
	// order, each with its outcome once its handler ran
	// (update_completed).
	Updates []Update
	// Reservations are the budget reservations not settled yet
	// (budget_reserved without its budget_settled), in history order;
	// BudgetWait the wait of a task over a budget whose action is to
	// wait (budget_refused), until the step it waited at reserves.
	Reservations []Reservation
	BudgetWait   *BudgetWaitState
	LastSeq      int64

	CreatedAt  time.Time // at of task_scheduled
	UpdatedAt  time.Time // at of the latest event
	StartedAt  time.Time // at of the first attempt_started, zero before
	FinishedAt time.Time // at of the terminal event, zero before
}

// Replay folds events into the state they describe. It is total: any
// sequence that is not a valid history gives an error marked
// [ErrInvalidHistory] naming the offending event, never a panic.
func Replay(events []Event) (State, error) {
	var s State
	for _, e := range events {
		// The fold's intermediate states are Replay's alone, so steps can be
		// appended in place: replay stays linear in the number of steps.
		next, err := apply(s, e, true)
		if err != nil {
			return s, err
		}
		s = next
	}
	if s.LastSeq == 0 {
		return s, invalidf(nil, "replay: empty history")
	}
	return s, nil
}

// Apply returns the state after e, or an error marked [ErrInvalidHistory] if
// e cannot follow s. s is not modified; the returned state may share the Steps
// backing array with s, so callers treat states as values to replace, not to
// mutate.
func Apply(s State, e Event) (State, error) {
	return apply(s, e, false)
}

// ApplyAll applies events to s in order, as repeated [Apply] would, but
// copies s's steps only once: appending many steps stays linear. On error it
// returns s unchanged and the error naming the offending event.
func ApplyAll(s State, events []Event) (State, error) {
	steps := make([]Step, len(s.Steps), len(s.Steps)+len(events))
	copy(steps, s.Steps)
	next := s
	next.Steps = steps
	// Children and remote steps are written in place too: copied as well.
	next.Children = slices.Clone(s.Children)
	next.Remote = slices.Clone(s.Remote)
	for _, e := range events {
		var err error
		// next is ours alone (its steps and children were just copied),
		// so they are written in place.
		if next, err = apply(next, e, true); err != nil {
			return s, err
		}
	}
	return next, nil
}

// apply is [Apply]. owned says the caller holds the only copy of s and will
// never apply another event to it, so s's Steps may be appended to, and its
// Children written, in place.
func apply(s State, e Event, owned bool) (State, error) {
	orig := s
	if e.Data == nil {
		return s, invalidf(nil, "event %d: no payload", e.Seq)
	}
	typ, ok := typeOf(e.Data)
	if !ok {
		return s, invalidf(nil, "event %d: unknown payload %T", e.Seq, e.Data)
	}
	if e.Seq != s.LastSeq+1 {
		return s, invalidf(nil, "event %d (%s): expected seq %d", e.Seq, typ, s.LastSeq+1)
	}
	if s.LastSeq == 0 && typ != TaskScheduled {
		return s, invalidf(nil, "event %d (%s): a history starts with %s", e.Seq, typ, TaskScheduled)
	}
	reopens := (typ == TaskRequeued && s.Status == StatusDeadLettered) ||
		(typ == CompensationRequested && s.Status == StatusCompleted)
	if s.Status.Terminal() && !reopens && typ != TaskErased && typ != TaskForked {
		return s, invalidf(nil, "event %d (%s): task is already %s", e.Seq, typ, s.Status)
	}
	if s.Erased && reopens {
		// Its input and outputs are gone: nothing can run it again.
		return s, invalidf(nil, "event %d (%s): the task's data was erased", e.Seq, typ)
	}
	var err error
	switch p := e.Data.(type) {
	case TaskScheduledData:
		err = s.applyScheduled(e, p)
	case AttemptStartedData:
		err = s.applyAttemptStarted(e, p)
	case StepCompletedData:
		err = s.applyStepCompleted(e, p, owned)
	case AttemptFailedData:
		err = s.applyAttemptFailed(e, p)
	case LeaseExpiredData:
		err = s.applyLeaseEnded(e, p.LeaseEpoch, StatusRetrying, p.NextRunAt)
	case TaskReleasedData:
		if err = s.applyLeaseEnded(e, p.LeaseEpoch, StatusPending, e.At); err == nil {
			s.Released++
			s.Budget.Attempts--
		}
	case TaskCompletedData:
		err = s.applyCompleted(e, p)
	case TaskFailedData:
		if err = s.checkCompensated(e, p.Compensated); err == nil {
			s.finish(e, StatusFailed)
			info := p.Error
			s.LastError = &info
		}
	case TaskDeadLetteredData:
		s.finish(e, StatusDeadLettered)
		info := p.Error
		s.LastError = &info
	case TaskRequeuedData:
		err = s.applyRequeued(e, p)
	case CancelRequestedData:
		err = s.applyCancelRequested(e, p)
	case CompensationRequestedData:
		err = s.applyCompensationRequested(e, p)
	case CompensationStartedData:
		err = s.applyCompensationStarted(e, p)
	case StepCompensatedData:
		err = s.applyStepCompensated(e, p)
	case CompensationFailedData:
		err = s.applyCompensationFailed(e, p)
	case TaskCancelledData:
		err = s.applyCancelled(e, p)
	case TimerStartedData:
		err = s.applyTimerStarted(e, p)
	case TimerFiredData:
		err = s.applyTimerFired(e, p, owned)
	case SignalReceivedData:
		err = s.applySignalReceived(e, p)
	case WaitStartedData:
		err = s.applyWaitStarted(e, p)
	case WaitTimedOutData:
		err = s.applyWaitTimedOut(e, p)
	case ChildStartedData:
		err = s.applyChildStarted(e, p, owned)
	case ChildWaitStartedData:
		err = s.applyChildWaitStarted(e, p)
	case ChildFinishedData:
		err = s.applyChildFinished(e, p, owned)
	case PatchRecordedData:
		err = s.applyPatchRecorded(e, p)
	case StreamClosedData:
		err = s.applyStreamClosed(e, p)
	case ModelLimitWaitedData:
		err = s.applyModelLimitWaited(e, p)
	case TaskErasedData:
		switch {
		case !s.Status.Terminal():
			err = invalidf(nil, "event %d (%s): task is %s; only a finished task is erased", e.Seq, TaskErased, s.Status)
		case s.Erased:
			err = invalidf(nil, "event %d (%s): task was already erased", e.Seq, TaskErased)
		default:
			s.Erased = true
		}
	case TaskContinuedData:
		err = s.applyContinued(e, p)
	case TaskForkedData:
		err = s.applyForked(e, p)
	case SelectMatchedData:
		err = s.applySelectMatched(e, p)
	case UpdateAcceptedData:
		err = s.applyUpdateAccepted(e, p)
	case UpdateCompletedData:
		err = s.applyUpdateCompleted(e, p)
	case BudgetReservedData:
		err = s.applyBudgetReserved(e, p)
	case BudgetSettledData:
		err = s.applyBudgetSettled(e, p)
	case BudgetRefusedData:
		err = s.applyBudgetRefused(e, p)
	case BudgetRaisedData:
		err = s.applyBudgetRaised(e, p)
	case RemoteStepDispatchedData:
		err = s.applyRemoteDispatched(e, p, owned)
	case RemoteStepCompletedData:
		err = s.applyRemoteCompleted(e, p, owned)
	case RemoteStepFailedData:
		err = s.applyRemoteFailed(e, p, owned)
	case RemoteWaitStartedData:
		err = s.applyRemoteWaitStarted(e, p)
	case TaskExpiredData:
		if s.Status != StatusPending || s.Attempt != 0 {
			err = invalidf(nil, "event %d (%s): task is %s after %d attempts; only a task never started expires", e.Seq, TaskExpired, s.Status, s.Attempt)
			break
		}
		s.finish(e, StatusExpired)
	default:
		err = invalidf(nil, "event %d: unknown payload %T", e.Seq, e.Data)
	}
	if err != nil {
		return orig, err
	}
	s.LastSeq = e.Seq
	s.UpdatedAt = e.At
	return s, nil
}

// typeOf returns the type of p if it is one of this package's payloads. It
// calls no method of p: a foreign implementation, or a nil pointer to one of
// ours (whose value-receiver EventType panics), is reported, not run.
func typeOf(p Payload) (Type, bool) {
	switch p.(type) {
	case TaskScheduledData:
		return TaskScheduled, true
	case AttemptStartedData:
		return AttemptStarted, true
	case StepCompletedData:
		return StepCompleted, true
	case AttemptFailedData:
		return AttemptFailed, true
	case LeaseExpiredData:
		return LeaseExpired, true
	case TaskReleasedData:
		return TaskReleased, true
	case TaskCompletedData:
		return TaskCompleted, true
	case TaskFailedData:
		return TaskFailed, true
	case TaskDeadLetteredData:
		return TaskDeadLettered, true
	case TaskRequeuedData:
		return TaskRequeued, true
	case CancelRequestedData:
		return CancelRequested, true
	case CompensationRequestedData:
		return CompensationRequested, true
	case CompensationStartedData:
		return CompensationStarted, true
	case StepCompensatedData:
		return StepCompensated, true
	case CompensationFailedData:
		return CompensationFailed, true
	case TaskCancelledData:
		return TaskCancelled, true
	case TaskExpiredData:
		return TaskExpired, true
	case TimerStartedData:
		return TimerStarted, true
	case TimerFiredData:
		return TimerFired, true
	case SignalReceivedData:
		return SignalReceived, true
	case WaitStartedData:
		return WaitStarted, true
	case WaitTimedOutData:
		return WaitTimedOut, true
	case ChildStartedData:
		return ChildStarted, true
	case ChildWaitStartedData:
		return ChildWaitStarted, true
	case ChildFinishedData:
		return ChildFinished, true
	case TaskErasedData:
		return TaskErased, true
	case PatchRecordedData:
		return PatchRecorded, true
	case StreamClosedData:
		return StreamClosed, true
	case ModelLimitWaitedData:
		return ModelLimitWaited, true
	case TaskContinuedData:
		return TaskContinued, true
	case TaskForkedData:
		return TaskForked, true
	case SelectMatchedData:
		return SelectMatched, true
	case UpdateAcceptedData:
		return UpdateAccepted, true
	case UpdateCompletedData:
		return UpdateCompleted, true
	case BudgetReservedData:
		return BudgetReserved, true
	case BudgetSettledData:
		return BudgetSettled, true
	case BudgetRefusedData:
		return BudgetRefused, true
	case BudgetRaisedData:
		return BudgetRaised, true
	case RemoteStepDispatchedData:
		return RemoteStepDispatched, true
	case RemoteStepCompletedData:
		return RemoteStepCompleted, true
	case RemoteStepFailedData:
		return RemoteStepFailed, true
	case RemoteWaitStartedData:
		return RemoteWaitStarted, true
	}
	return "", false
}

func (s *State) applyScheduled(e Event, p TaskScheduledData) error {
	if s.LastSeq != 0 {
		return invalidf(nil, "event %d (%s): task already scheduled", e.Seq, TaskScheduled)
	}
	if p.TaskType == "" {
		return invalidf(nil, "event %d (%s): no task type", e.Seq, TaskScheduled)
	}
	if p.FairnessWeight < 0 || p.FairnessWeight > MaxFairnessWeight {
		return invalidf(nil, "event %d (%s): fairness weight %d is outside 0..%d", e.Seq, TaskScheduled, p.FairnessWeight, MaxFairnessWeight)
	}
	if p.FairnessWeight != 0 && p.FairnessKey == "" {
		return invalidf(nil, "event %d (%s): fairness weight %d without a fairness key", e.Seq, TaskScheduled, p.FairnessWeight)
	}
	if p.ParentPosition < 0 || (p.ParentPosition != 0 && p.ParentID == "") {
		return invalidf(nil, "event %d (%s): parent position %d without a parent", e.Seq, TaskScheduled, p.ParentPosition)
	}
	if f := p.ForkedFrom; f != nil && (f.TaskID == "" || f.Position < 0) {
		return invalidf(nil, "event %d (%s): forked from task %q at position %d", e.Seq, TaskScheduled, f.TaskID, f.Position)
	}
	if b := p.Budget; b != nil && (b.Ref != "" || b.Validate() != nil) {
		return invalidf(b.Validate(), "event %d (%s): the task's own budget (ref %q)", e.Seq, TaskScheduled, b.Ref)
	}
	for _, b := range p.Budgets {
		if err := b.Validate(); err != nil || b.Ref == "" {
			return invalidf(err, "event %d (%s): inherited budget %q", e.Seq, TaskScheduled, b.Ref)
		}
	}
	s.Scheduled = p
	s.Status = StatusPending
	s.RunAt = p.RunAt
	s.CreatedAt = e.At
	return nil
}

func (s *State) applyAttemptStarted(e Event, p AttemptStartedData) error {
	if s.Status != StatusPending && s.Status != StatusRetrying {
		return invalidf(nil, "event %d (%s): task is %s", e.Seq, AttemptStarted, s.Status)
	}
	if e.Attempt != s.Attempt+1 {
		return invalidf(nil, "event %d (%s): attempt %d follows attempt %d", e.Seq, AttemptStarted, e.Attempt, s.Attempt)
	}
	if p.LeaseEpoch <= s.Lease.Epoch {
		return invalidf(nil, "event %d (%s): lease epoch %d does not exceed %d", e.Seq, AttemptStarted, p.LeaseEpoch, s.Lease.Epoch)
	}
	// An empty owner is how the state says the attempt has ended; a lease
	// without one would leave the attempt unable to do anything but fail.
	if p.WorkerID == "" {
		return invalidf(nil, "event %d (%s): no worker id", e.Seq, AttemptStarted)
	}
	if f := s.Scheduled.ForkedFrom; f != nil && s.Attempt == 0 && len(s.Steps) != f.Position+1 {
		return invalidf(nil, "event %d (%s): a fork at position %d holds %d copied steps, not %d", e.Seq, AttemptStarted, f.Position, len(s.Steps), f.Position+1)
	}
	s.Status = StatusRunning
	s.Attempt = e.Attempt
	s.Lease = Lease{Owner: p.WorkerID, Epoch: p.LeaseEpoch, ExpiresAt: p.LeaseExpiresAt}
	// Woken (a child finished, a cancel, its deadline): the attempt looks
	// at its children and remote steps afresh.
	s.ChildWait, s.RemoteWait = nil, nil
	if s.StartedAt.IsZero() {
		s.StartedAt = e.At
	}
	s.Budget.Attempts++
	if s.Budget.Since.IsZero() {
		s.Budget.Since = e.At
	}
	return nil
}

func (s *State) requireCurrentAttempt(e Event) error {
	if s.Status != StatusRunning {
		return invalidf(nil, "event %d (%s): task is %s, not running", e.Seq, e.Data.EventType(), s.Status)
	}
	if e.Attempt != s.Attempt {
		return invalidf(nil, "event %d (%s): belongs to attempt %d, current is %d", e.Seq, e.Data.EventType(), e.Attempt, s.Attempt)
	}
	return nil
}

func (s *State) applyStepCompleted(e Event, p StepCompletedData, owned bool) error {
	if p.CopiedFromSeq != 0 {
		return s.applyStepCopied(e, p, owned)
	}
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if s.Compensation.IsStarted() {
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, StepCompleted)
	}
	// The workflow sleeps at the timer's position (the next): only
	// timer_fired may take it.
	if s.Timer != nil {
		return invalidf(nil, "event %d (%s): a timer runs at position %d", e.Seq, StepCompleted, s.Timer.Position)
	}
	if s.Wait != nil {
		return invalidf(nil, "event %d (%s): receive %d waits for signal %q", e.Seq, StepCompleted, s.Wait.Position, s.Wait.Name)
	}
	if _, done := s.StepAt(p.Position); done || p.Position < len(s.Steps) {
		return invalidf(nil, "event %d (%s): position %d, expected %d or a later position not on record", e.Seq, StepCompleted, p.Position, len(s.Steps))
	}
	if p.Name == "" {
		return invalidf(nil, "event %d (%s): no step name", e.Seq, StepCompleted)
	}
	if p.OutputRef != nil && len(p.Output) > 0 {
		return invalidf(nil, "event %d (%s): an output and an output reference", e.Seq, StepCompleted)
	}
	if _, remote := s.RemoteAt(p.Position); remote {
		return invalidf(nil, "event %d (%s): position %d is a remote step's", e.Seq, StepCompleted, p.Position)
	}
	s.recordStep(e, Step{Position: p.Position, Name: p.Name, Output: p.Output, OutputRef: p.OutputRef, Compensable: p.Compensable}, owned)
	return nil
}

// recordStep puts a completed step among Steps, or Ahead when a position
// before it is not on record.
func (s *State) recordStep(e Event, step Step, owned bool) {
	if step.Position > len(s.Steps) {
		// A parallel step ahead of one not on record: that one's budget
		// runs on.
		s.addAhead(step)
		return
	}
	// The next step's budget starts now, with this attempt as its first
	// (a remote step may complete between attempts: then the next one).
	first := 0
	if s.Status == StatusRunning && s.Lease.Owner != "" {
		first = 1
	}
	s.Budget = Budget{Attempts: first, Since: e.At}
	s.addStep(step, owned)
	// The steps completed ahead of it that now follow on join Steps.
	for len(s.Ahead) > 0 && s.Ahead[0].Position == len(s.Steps) {
		s.addStep(s.Ahead[0], owned)
		s.Ahead = s.Ahead[1:]
	}
	if len(s.Ahead) == 0 {
		s.Ahead = nil
	}
}

// applyStepCopied applies a fork's copy of a step of the task it was
// forked from: only in the fork's prefix (task_scheduled, then copies, in
// position order), before any attempt.
func (s *State) applyStepCopied(e Event, p StepCompletedData, owned bool) error {
	if err := s.requireForkPrefix(e, p.CopiedFromSeq); err != nil {
		return err
	}
	f := s.Scheduled.ForkedFrom
	switch {
	case p.Position != len(s.Steps):
		return invalidf(nil, "event %d (%s): copied step at position %d, expected %d", e.Seq, StepCompleted, p.Position, len(s.Steps))
	case p.Position > f.Position:
		return invalidf(nil, "event %d (%s): copied step at position %d, beyond the fork's position %d", e.Seq, StepCompleted, p.Position, f.Position)
	case p.Name == "":
		return invalidf(nil, "event %d (%s): no step name", e.Seq, StepCompleted)
	case p.OutputRef != nil && len(p.Output) > 0:
		return invalidf(nil, "event %d (%s): an output and an output reference", e.Seq, StepCompleted)
	case len(p.Usage) > 0:
		return invalidf(nil, "event %d (%s): a copied step with usage (it was paid for in the original)", e.Seq, StepCompleted)
	}
	s.addStep(Step{Position: p.Position, Name: p.Name, Output: p.Output, OutputRef: p.OutputRef, Compensable: p.Compensable}, owned)
	return nil
}

// requireForkPrefix checks that e, a copy (copied from seq), may follow
// s: s is a fork, and everything in it so far is its task_scheduled and
// other copies (steps and patch markers), before any attempt.
func (s *State) requireForkPrefix(e Event, seq int64) error {
	switch {
	case seq < 0:
		return invalidf(nil, "event %d (%s): copied from seq %d", e.Seq, e.Data.EventType(), seq)
	case s.Scheduled.ForkedFrom == nil:
		return invalidf(nil, "event %d (%s): a copy in a task that is not a fork", e.Seq, e.Data.EventType())
	case e.Attempt != 0 || s.Attempt != 0 || s.LastSeq != int64(len(s.Steps)+len(s.Patches))+1:
		return invalidf(nil, "event %d (%s): a copy follows only task_scheduled and other copies", e.Seq, e.Data.EventType())
	}
	return nil
}

// applyForked records a fork of the task (task_forked): in any status,
// the status unchanged.
func (s *State) applyForked(e Event, p TaskForkedData) error {
	switch {
	case p.ForkTaskID == "":
		return invalidf(nil, "event %d (%s): no fork task id", e.Seq, TaskForked)
	case p.Position < 0:
		return invalidf(nil, "event %d (%s): position %d", e.Seq, TaskForked, p.Position)
	case s.Erased:
		return invalidf(nil, "event %d (%s): the task's data was erased", e.Seq, TaskForked)
	}
	if _, ok := s.StepAt(p.Position); !ok {
		return invalidf(nil, "event %d (%s): step %d is not on record", e.Seq, TaskForked, p.Position)
	}
	s.Forks = append(slices.Clip(s.Forks), Fork{TaskID: p.ForkTaskID, Position: p.Position})
	return nil
}

// addAhead adds a step completed beyond the first position not on record,
// in position order. Ahead is always copied: it is short, and another State
// may share it.
func (s *State) addAhead(step Step) {
	i, _ := slices.BinarySearchFunc(s.Ahead, step.Position, func(st Step, pos int) int { return st.Position - pos })
	s.Ahead = slices.Insert(slices.Clone(s.Ahead), i, step)
}

// StepAt returns the completed step at position pos, in Steps or Ahead.
func (s *State) StepAt(pos int) (Step, bool) {
	if pos >= 0 && pos < len(s.Steps) {
		return s.Steps[pos], true
	}
	if i, ok := slices.BinarySearchFunc(s.Ahead, pos, func(st Step, pos int) int { return st.Position - pos }); ok {
		return s.Ahead[i], true
	}
	return Step{}, false
}

// CompletedSteps returns every completed step, Steps then Ahead: in
// position order.
func (s *State) CompletedSteps() []Step {
	if len(s.Ahead) == 0 {
		return s.Steps
	}
	return append(slices.Clip(s.Steps), s.Ahead...)
}

// addStep appends a completed step. owned says no other State shares s's
// Steps; otherwise they are copied on append, as appending in place would
// write into spare capacity another State derived from s may share.
func (s *State) addStep(step Step, owned bool) {
	if owned {
		s.Steps = append(s.Steps, step)
		return
	}
	steps := make([]Step, len(s.Steps), len(s.Steps)+1)
	copy(steps, s.Steps)
	s.Steps = append(steps, step)
}

func (s *State) applyAttemptFailed(e Event, p AttemptFailedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	info := p.Error
	s.LastError = &info
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
	if p.NextRunAt != nil {
		// A remote step whose failure this attempt classified is
		// dispatched again by the next one.
		s.retryRemote(func(r RemoteStep) bool { return r.Failed != nil && info.Step != "" && r.Position == info.Position })
		s.Status = StatusRetrying
		s.RunAt = *p.NextRunAt
		if s.CancelRequested {
			// A cancel is waiting: the next attempt compensates, at once
			// rather than after the backoff.
			s.RunAt = e.At
		}
	}
	// Without a next run time the task stays running, leaseless, until the
	// terminal event that must follow in the same append.
	return nil
}

func (s *State) applyLeaseEnded(e Event, epoch int64, status Status, runAt time.Time) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if epoch != s.Lease.Epoch {
		return invalidf(nil, "event %d (%s): lease epoch %d, current is %d", e.Seq, e.Data.EventType(), epoch, s.Lease.Epoch)
	}
	s.Status = status
	s.RunAt = runAt
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
	return nil
}

func (s *State) applyCompleted(e Event, p TaskCompletedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if s.Compensation != nil {
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, TaskCompleted)
	}
	s.finish(e, StatusCompleted)
	s.Output = p.Output
	return nil
}

func (s *State) applyContinued(e Event, p TaskContinuedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	switch {
	case p.NextTaskID == "":
		return invalidf(nil, "event %d (%s): no next task id", e.Seq, TaskContinued)
	case s.CancelRequested:
		// A cancel recorded before the end wins: the task is cancelled,
		// not continued.
		return invalidf(nil, "event %d (%s): the task's cancel was requested", e.Seq, TaskContinued)
	case s.Compensation != nil:
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, TaskContinued)
	}
	s.finish(e, StatusContinued)
	s.ContinuedAs = p.NextTaskID
	return nil
}

func (s *State) applyRequeued(e Event, p TaskRequeuedData) error {
	if s.Status != StatusDeadLettered {
		return invalidf(nil, "event %d (%s): task is %s, only a dead-lettered task is requeued", e.Seq, TaskRequeued, s.Status)
	}
	if p.By == "" {
		return invalidf(nil, "event %d (%s): no requester (by)", e.Seq, TaskRequeued)
	}
	s.Status = StatusPending
	s.RunAt = e.At
	s.FinishedAt = time.Time{}
	s.Budget = Budget{}
	// Its remote steps' rows went with its end: each is dispatched again.
	s.retryRemote(func(RemoteStep) bool { return true })
	return nil
}

// finish moves the task to a terminal status. Terminal events may follow any
// non-terminal state: a pending task can fail (it expired, or its input was
// refused), a running one can be dead-lettered by the rescuer.
func (s *State) finish(e Event, status Status) {
	s.ChildWait, s.RemoteWait = nil, nil
	s.Status = status
	s.FinishedAt = e.At
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
}

// requireLeasedAttempt checks that e belongs to the running attempt and
// that attempt still holds its lease.
func (s *State) requireLeasedAttempt(e Event) error {
	if err := s.requireCurrentAttempt(e); err != nil {
		return err
	}
	if s.Lease.Owner == "" {
		return invalidf(nil, "event %d (%s): attempt %d already ended", e.Seq, e.Data.EventType(), e.Attempt)
	}
	return nil
}

func (s *State) applyCancelRequested(e Event, p CancelRequestedData) error {
	switch {
	case p.By == "":
		return invalidf(nil, "event %d (%s): no requester (by)", e.Seq, CancelRequested)
	case s.CancelRequested:
		return invalidf(nil, "event %d (%s): cancel already requested", e.Seq, CancelRequested)
	case s.Status == StatusRunning && s.Lease.Owner == "":
		return invalidf(nil, "event %d (%s): attempt %d is ending", e.Seq, CancelRequested, s.Attempt)
	}
	s.CancelRequested = true
	if s.Status != StatusRunning {
		// Due at once: the next attempt goes straight to compensation.
		s.RunAt = e.At
	}
	return nil
}

func (s *State) applyCompensationRequested(e Event, p CompensationRequestedData) error {
	if s.Status != StatusCompleted {
		return invalidf(nil, "event %d (%s): task is %s, only a completed task is compensated on request", e.Seq, CompensationRequested, s.Status)
	}
	if p.By == "" {
		return invalidf(nil, "event %d (%s): no requester (by)", e.Seq, CompensationRequested)
	}
	s.Status = StatusPending
	s.RunAt = e.At
	s.FinishedAt = time.Time{}
	s.Budget = Budget{}
	s.Compensation = &Compensation{Reason: CompensateRequested}
	return nil
}

func (s *State) applyCompensationStarted(e Event, p CompensationStartedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if s.Compensation.IsStarted() {
		return invalidf(nil, "event %d (%s): compensation already started", e.Seq, CompensationStarted)
	}
	switch p.Reason {
	case CompensateCancelled, CompensateFailed, CompensateRequested:
	default:
		return invalidf(nil, "event %d (%s): unknown reason %q", e.Seq, CompensationStarted, p.Reason)
	}
	seen := make(map[int]bool, len(p.Steps))
	for _, pos := range p.Steps {
		if step, ok := s.StepAt(pos); !ok || !step.Compensable || seen[pos] {
			return invalidf(nil, "event %d (%s): step %d is not a completed compensable step", e.Seq, CompensationStarted, pos)
		}
		seen[pos] = true
	}
	s.Compensation = &Compensation{Reason: p.Reason, Started: true, Pending: slices.Clone(p.Steps)}
	if p.Error != nil {
		info := *p.Error
		s.LastError, s.Compensation.Cause = &info, &info
	}
	s.Budget = Budget{Attempts: 1, Since: e.At}
	return nil
}

// requireNextCompensation checks that position is the step compensation is
// at.
func (s *State) requireNextCompensation(e Event, position int, name string) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if !s.Compensation.IsStarted() {
		return invalidf(nil, "event %d (%s): compensation has not started", e.Seq, e.Data.EventType())
	}
	if len(s.Compensation.Pending) == 0 || s.Compensation.Pending[0] != position {
		return invalidf(nil, "event %d (%s): step %d is not the next to compensate (pending %v)", e.Seq, e.Data.EventType(), position, s.Compensation.Pending)
	}
	if step, _ := s.StepAt(position); step.Name != name {
		return invalidf(nil, "event %d (%s): step %d is %q, not %q", e.Seq, e.Data.EventType(), position, step.Name, name)
	}
	return nil
}

func (s *State) applyStepCompensated(e Event, p StepCompensatedData) error {
	if err := s.requireNextCompensation(e, p.Position, p.Name); err != nil {
		return err
	}
	c := *s.Compensation
	c.Pending = slices.Clone(c.Pending[1:])
	c.Done = append(slices.Clone(c.Done), p.Position)
	s.Compensation = &c
	s.Budget = Budget{Attempts: 1, Since: e.At}
	return nil
}

func (s *State) applyCompensationFailed(e Event, p CompensationFailedData) error {
	if err := s.requireNextCompensation(e, p.Position, p.Name); err != nil {
		return err
	}
	info := p.Error
	s.LastError = &info
	return nil
}

func (s *State) applyCancelled(e Event, p TaskCancelledData) error {
	if !s.CancelRequested && s.Compensation == nil {
		return invalidf(nil, "event %d (%s): no cancel or compensation was requested", e.Seq, TaskCancelled)
	}
	if s.Status == StatusRunning {
		if err := s.requireLeasedAttempt(e); err != nil {
			return err
		}
	}
	if s.Compensation != nil && len(s.Compensation.Pending) > 0 {
		return invalidf(nil, "event %d (%s): steps %v are not compensated yet", e.Seq, TaskCancelled, s.Compensation.Pending)
	}
	if err := s.checkCompensated(e, p.Compensated); err != nil {
		return err
	}
	s.finish(e, StatusCancelled)
	return nil
}

// checkCompensated checks that a terminal event lists exactly the steps
// compensated so far.
func (s *State) checkCompensated(e Event, listed []int) error {
	var done []int
	if s.Compensation != nil {
		done = s.Compensation.Done
	}
	if !slices.Equal(listed, done) {
		return invalidf(nil, "event %d (%s): lists compensated steps %v, the history has %v", e.Seq, e.Data.EventType(), listed, done)
	}
	return nil
}

func (s *State) applyTimerStarted(e Event, p TimerStartedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	// A run woken before its timer is due (an update arrived) sleeps
	// again at the timer's position: like a hand-back it uses up nothing
	// of the retry budget.
	rearm := s.Timer != nil && s.Timer.Position == p.Position
	switch {
	case s.Timer != nil && !rearm:
		return invalidf(nil, "event %d (%s): a timer is already running", e.Seq, TimerStarted)
	case s.Wait != nil:
		return invalidf(nil, "event %d (%s): receive %d waits for signal %q", e.Seq, TimerStarted, s.Wait.Position, s.Wait.Name)
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, TimerStarted)
	case p.Position != len(s.Steps):
		return invalidf(nil, "event %d (%s): position %d, expected %d", e.Seq, TimerStarted, p.Position, len(s.Steps))
	case len(s.Ahead) > 0:
		// A sleep waits for every step before it: none can be on record
		// after it.
		return invalidf(nil, "event %d (%s): step %d is on record after the timer's position", e.Seq, TimerStarted, s.Ahead[0].Position)
	}
	// The attempt ends: the task waits, holding no lease, until the timer
	// is due.
	if rearm {
		s.Released++
		s.Budget.Attempts--
	}
	s.Timer = &Timer{Position: p.Position, FireAt: p.FireAt}
	s.Status = StatusPending
	s.RunAt = p.FireAt
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
	s.wakeForUpdates(e)
	return nil
}

func (s *State) applyTimerFired(e Event, p TimerFiredData, owned bool) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if s.Timer == nil || s.Timer.Position != p.Position {
		return invalidf(nil, "event %d (%s): no timer at position %d", e.Seq, TimerFired, p.Position)
	}
	s.Timer = nil
	s.Budget = Budget{Attempts: 1, Since: e.At}
	s.addStep(Step{Position: p.Position, Name: SleepStepName}, owned)
	return nil
}

func (s *State) applySignalReceived(e Event, p SignalReceivedData) error {
	if p.Name == "" {
		return invalidf(nil, "event %d (%s): no signal name", e.Seq, SignalReceived)
	}
	if p.DedupID != "" && s.HasSignal(p.DedupID) {
		return invalidf(nil, "event %d (%s): dedup id %q already received", e.Seq, SignalReceived, p.DedupID)
	}
	// Clip: a State derived from s may share spare capacity.
	s.Signals = append(slices.Clip(s.Signals), Signal{Seq: e.Seq, Name: p.Name, Payload: p.Payload, Sender: p.Sender, DedupID: p.DedupID})
	if s.Wait != nil && s.Wait.Awaits(p.Name) {
		// The receive (or select) it waits on takes this signal: due at once. The
		// status stays what it was (pending: the wait ended the attempt).
		s.Wait = nil
		if s.Status == StatusPending && e.At.Before(s.RunAt) {
			s.RunAt = e.At
		}
	}
	return nil
}

func (s *State) applyWaitStarted(e Event, p WaitStartedData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	switch {
	case p.Select != nil:
		if err := checkSelectWait(e, p); err != nil {
			return err
		}
		if err := s.checkSelectChildren(e, p.Select.Children); err != nil {
			return err
		}
	case p.Name == "":
		return invalidf(nil, "event %d (%s): no signal name", e.Seq, WaitStarted)
	}
	switch {
	case s.Timer != nil:
		return invalidf(nil, "event %d (%s): a timer runs at position %d", e.Seq, WaitStarted, s.Timer.Position)
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, WaitStarted)
	}
	rearm := s.Wait != nil && s.Wait.Position == p.Position && s.Wait.Name == p.Name
	if p.Select != nil && s.Wait == nil {
		// A select woken by a child it did not select (one of the running
		// children its wait lists while the cap holds starts back) waits
		// again at the same position.
		n := len(s.Waits)
		rearm = n > 0 && s.Waits[n-1].Position == p.Position && s.Waits[n-1].Select != nil
	}
	if s.Wait != nil && !rearm {
		return invalidf(nil, "event %d (%s): receive %d already waits for signal %q", e.Seq, WaitStarted, s.Wait.Position, s.Wait.Name)
	}
	if n := len(s.Waits); !rearm && n > 0 && p.Position <= s.Waits[n-1].Position {
		return invalidf(nil, "event %d (%s): position %d does not follow %d", e.Seq, WaitStarted, p.Position, s.Waits[n-1].Position)
	}
	if p.Position < 0 {
		return invalidf(nil, "event %d (%s): position %d", e.Seq, WaitStarted, p.Position)
	}
	w := Wait{Position: p.Position, Name: p.Name, Deadline: p.Deadline, Select: p.Select}
	if rearm {
		// Woken before its deadline with no signal: it waits again, to
		// a new deadline.
		s.Waits = append(slices.Clip(s.Waits[:len(s.Waits)-1]), w)
	} else {
		s.Waits = append(slices.Clip(s.Waits), w)
	}
	// The attempt ends: the task waits, holding no lease, until a signal
	// of the name arrives or the deadline passes. Like a hand-back, it
	// uses up nothing of the retry budget.
	s.Released++
	s.Budget.Attempts--
	s.Wait = &w
	s.Status = StatusPending
	s.RunAt = p.Deadline
	if dl := s.Scheduled.Deadline; p.Select != nil && dl != nil && dl.Before(s.RunAt) {
		// A select without a timer waits until Never: the task's own
		// deadline still wakes it, as it does a parent awaiting children.
		s.RunAt = *dl
	}
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
	s.wakeForUpdates(e)
	return nil
}

func (s *State) applyWaitTimedOut(e Event, p WaitTimedOutData) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if s.Wait == nil || s.Wait.Select != nil || s.Wait.Position != p.Position || s.Wait.Name != p.Name {
		return invalidf(nil, "event %d (%s): no receive %d waits for signal %q", e.Seq, WaitTimedOut, p.Position, p.Name)
	}
	w := *s.Wait
	w.TimedOut = true
	s.Waits = append(slices.Clip(s.Waits[:len(s.Waits)-1]), w)
	s.Wait = nil
	return nil
}

func (s *State) applyChildStarted(e Event, p ChildStartedData, owned bool) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	switch {
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, ChildStarted)
	case p.Position != len(s.Children):
		return invalidf(nil, "event %d (%s): position %d, expected %d", e.Seq, ChildStarted, p.Position, len(s.Children))
	case p.ChildID == "":
		return invalidf(nil, "event %d (%s): no child id", e.Seq, ChildStarted)
	case p.TaskType == "":
		return invalidf(nil, "event %d (%s): no task type", e.Seq, ChildStarted)
	case p.OnParentClose != "" && p.OnParentClose != ParentCloseCancel && p.OnParentClose != ParentCloseAbandon:
		return invalidf(nil, "event %d (%s): unknown parent close policy %q", e.Seq, ChildStarted, p.OnParentClose)
	}
	child := Child{Position: p.Position, ID: p.ChildID, TaskType: p.TaskType, TypeVersion: p.TypeVersion, OnParentClose: p.OnParentClose}
	// Child ids are not checked for repeats (replay would be quadratic in
	// the children): the store starts each child as a new task, under a
	// key derived from the parent and the position.
	if owned {
		// Replay's own state: append in place, so replay stays linear.
		s.Children = append(s.Children, child)
		return nil
	}
	// Clip: a State derived from s may share spare capacity.
	s.Children = append(slices.Clip(s.Children), child)
	return nil
}

func (s *State) applyChildWaitStarted(e Event, p ChildWaitStartedData) error {
	if err := s.checkWaitStart(e, "child", "children", p.Positions, p.Count); err != nil {
		return err
	}
	for _, pos := range p.Positions {
		if pos < 0 || pos >= len(s.Children) {
			return invalidf(nil, "event %d (%s): no child %d was started", e.Seq, ChildWaitStarted, pos)
		}
		if s.Children[pos].Finished {
			return invalidf(nil, "event %d (%s): child %d has finished", e.Seq, ChildWaitStarted, pos)
		}
	}
	// The attempt ends: the task waits, holding no lease, until one of
	// the children finishes (or its deadline, when it has one). It did not
	// fail: like a hand-back it uses up nothing of the retry budget, or a
	// parent that woke often would give up at its next step's first
	// failure.
	s.ChildWait = &ChildWait{Positions: slices.Clone(p.Positions), Count: max(p.Count, 1)}
	s.parkForWait(e)
	return nil
}

// checkWaitStart checks what a wait of the attempt for some of its
// children or remote steps (one, many) at positions, count of them,
// requires: the attempt holds its lease, no timer or receive waits, no
// compensation runs, and the count fits.
func (s *State) checkWaitStart(e Event, one, many string, positions []int, count int) error {
	if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	typ := e.Data.EventType()
	switch {
	case s.Timer != nil:
		return invalidf(nil, "event %d (%s): a timer runs at position %d", e.Seq, typ, s.Timer.Position)
	case s.Wait != nil:
		return invalidf(nil, "event %d (%s): receive %d waits for signal %q", e.Seq, typ, s.Wait.Position, s.Wait.Name)
	case s.Compensation.IsStarted():
		return invalidf(nil, "event %d (%s): task is compensating", e.Seq, typ)
	case len(positions) == 0:
		return invalidf(nil, "event %d (%s): awaits no %s", e.Seq, typ, one)
	case count < 0 || count > len(positions):
		return invalidf(nil, "event %d (%s): awaits %d of %d %s", e.Seq, typ, count, len(positions), many)
	}
	return nil
}

// parkForWait ends the attempt to wait (its wait already set): the task
// is pending, holding no lease, due at its deadline if it has one and
// else when what it awaits ends; the attempt uses up nothing of the retry
// budget.
func (s *State) parkForWait(e Event) {
	s.Released++
	s.Budget.Attempts--
	s.Status = StatusPending
	s.RunAt = Never
	if dl := s.Scheduled.Deadline; dl != nil {
		s.RunAt = *dl
	}
	s.Lease.Owner, s.Lease.ExpiresAt = "", time.Time{}
	s.wakeForUpdates(e)
}

func (s *State) applyChildFinished(e Event, p ChildFinishedData, owned bool) error {
	if p.Position < 0 || p.Position >= len(s.Children) {
		return invalidf(nil, "event %d (%s): no child %d was started", e.Seq, ChildFinished, p.Position)
	}
	c := s.Children[p.Position]
	switch {
	case c.ID != p.ChildID:
		return invalidf(nil, "event %d (%s): child %d is task %s, not %s", e.Seq, ChildFinished, p.Position, c.ID, p.ChildID)
	case c.Finished:
		return invalidf(nil, "event %d (%s): child %d has already finished", e.Seq, ChildFinished, p.Position)
	case !p.Status.Terminal() || p.Status == StatusContinued:
		return invalidf(nil, "event %d (%s): status %q is not a terminal status", e.Seq, ChildFinished, p.Status)
	case p.Status != StatusCompleted && p.Error == nil && p.Status != StatusCancelled && p.Status != StatusExpired:
		return invalidf(nil, "event %d (%s): a %s child without its error", e.Seq, ChildFinished, p.Status)
	}
	c.Finished, c.Status, c.Output, c.Error, c.FinishedSeq, c.RunID = true, p.Status, p.Output, p.Error, e.Seq, p.RunID
	if owned {
		s.Children[p.Position] = c
	} else {
		children := slices.Clone(s.Children)
		children[p.Position] = c
		s.Children = children
	}
	if w := s.Wait; w != nil && w.Select != nil && slices.Contains(w.Select.Children, p.Position) {
		// A select waits on it: due at once, as a signal of its names
		// makes it.
		s.Wait = nil
		if s.Status == StatusPending && e.At.Before(s.RunAt) {
			s.RunAt = e.At
		}
	}
	if w := s.ChildWait; w != nil && slices.Contains(w.Positions, p.Position) {
		wait := *w
		wait.Finished++
		s.ChildWait = &wait
		if wait.Finished >= wait.Count {
			// The last of the children it awaits: due at once. The
			// status stays what it was (pending: the wait ended the
			// attempt).
			s.ChildWait = nil
			if s.Status == StatusPending && e.At.Before(s.RunAt) {
				s.RunAt = e.At
			}
		}
	}
	return nil
}

func (s *State) applyPatchRecorded(e Event, p PatchRecordedData) error {
	if p.CopiedFromSeq != 0 {
		if err := s.requireForkPrefix(e, p.CopiedFromSeq); err != nil {
			return err
		}
		if p.Position > s.Scheduled.ForkedFrom.Position {
			return invalidf(nil, "event %d (%s): copied marker at position %d, beyond the fork's position %d", e.Seq, PatchRecorded, p.Position, s.Scheduled.ForkedFrom.Position)
		}
		// A copied marker is written before the copy of the step at its
		// position: the steps before that are copied already.
		if p.Position > len(s.Steps) {
			return invalidf(nil, "event %d (%s): copied marker at position %d ahead of the steps copied so far (%d): it precedes the copy of the step at its position", e.Seq, PatchRecorded, p.Position, len(s.Steps))
		}
	} else if err := s.requireLeasedAttempt(e); err != nil {
		return err
	}
	if err := ValidPatchID(p.PatchID); err != nil {
		return invalidf(err, "event %d (%s)", e.Seq, PatchRecorded)
	}
	if p.Position < 0 {
		return invalidf(nil, "event %d (%s): position %d", e.Seq, PatchRecorded, p.Position)
	}
	if s.HasPatch(p.PatchID) {
		return invalidf(nil, "event %d (%s): patch %q already recorded", e.Seq, PatchRecorded, p.PatchID)
	}
	// Clipped: a state shares its slices with those before it.
	s.Patches = append(slices.Clip(s.Patches), Patch{ID: p.PatchID, Position: p.Position})
	return nil
}
