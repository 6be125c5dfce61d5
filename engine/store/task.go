package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
)

// EventAppendParams describes an append to one task's log.
type EventAppendParams struct {
	TaskID uuid.UUID
	// State is the task's state as the caller knows it: the replay of its
	// log up to State.LastSeq. The append succeeds only if the log is still
	// there.
	State history.State
	// Epoch, when not 0, fences the append: it succeeds only while the task
	// is under this lease epoch. Appends made for an attempt set it.
	Epoch int64
	// ExpiredOnly restricts the append to a task whose lease has expired by
	// the database clock (the rescuer's append).
	ExpiredOnly bool
	// At is the time of the new events. Default [Now].
	At time.Time
	// Attempt is the attempt the new events belong to.
	Attempt int
	// Payloads are the new events' bodies, in order.
	Payloads []history.Payload

	// AttemptStartedAt is when the attempt these events belong to began,
	// where the writer knows it (the processor, the rescuer): an append
	// that ends the attempt observes its duration. It is not written.
	AttemptStartedAt time.Time
}

// AppendResult is the outcome of one append of an [Store.EventAppendMany].
type AppendResult struct {
	State history.State // the new state; the old one when Err is set
	Err   error         // as for [Store.EventAppend]
}

// MigrationState is one migration and whether it has been applied.
type MigrationState struct {
	Version   int
	Name      string
	AppliedAt *time.Time // nil while pending
}

// DeadLetterListParams pages through a namespace's dead letters, newest
// first.
type DeadLetterListParams struct {
	// Namespace is the dead letters' namespace. Required.
	Namespace string
	Type      string // "" for every type
	// Before continues a listing: only tasks that were dead-lettered
	// before this one (by finished_at, then id) are returned.
	Before *DeadLetterCursor
	Limit  int // default 100
	// OmitPayloads leaves the tasks' Input and Output nil, and the driver
	// does not read those columns.
	OmitPayloads bool
}

// Validate checks the parameters: what every store does first.
func (p *DeadLetterListParams) Validate() error {
	return namespaceRequired("list dead letters", p == nil || p.Namespace == "")
}

// DeadLetterCursor is where a page of dead letters ended.
type DeadLetterCursor struct {
	FinishedAt time.Time
	ID         uuid.UUID
}

// DefaultNamespace is the namespace tasks belong to unless a caller names
// another.
const DefaultNamespace = "default"

// Task is a task's projection row: the state its event log replays to, plus
// its identity and the live lease expiry.
type Task struct {
	ID             uuid.UUID
	Namespace      string
	Queue          string
	Type           string
	TypeVersion    int
	Status         history.Status
	Priority       int
	RunAt          time.Time
	Attempt        int
	MaxAttempts    int
	LeaseOwner     string
	LeaseEpoch     int64
	LeaseExpiresAt *time.Time // extended by heartbeats; nil when not running
	IdempotencyKey string
	TraceID        string
	Input          json.RawMessage
	Output         json.RawMessage
	LastError      *history.ErrorInfo
	CancelRequest  bool
	LastSeq        int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
	Labels         map[string]string
	Deadline       *time.Time // the schedule-to-close deadline, if any
	StartDeadline  *time.Time // the latest first start, if any
	FairnessKey    string     // who the task is for, shared round robin
	FairnessWeight int        // the key's turns against weight 1; 0 when none
	ParentID       uuid.UUID  // the task that started this one as its child; uuid.Nil when none
	ParentPosition int        // its position among the parent's children
}

// FairnessQuantum is how far a keyed task's virtual start time (fair_at)
// is placed after the last waiting task of its key, over its weight. A key
// with n tasks waiting has its next one n quanta out, so a fresh key's task,
// placed at its run time, goes ahead of all but the first of another key's
// backlog started a quantum or more before. Large against the time between
// claims, so order among keys is round robin rather than arrival order.
const FairnessQuantum = time.Second

// TaskStartParams describes a task to start.
type TaskStartParams struct {
	Namespace string
	// Scheduled is the task_scheduled payload. Its Namespace is overwritten
	// with the Namespace above.
	Scheduled history.TaskScheduledData
	// RefuseKeyReuse, when set, accepts a taken idempotency key only for the
	// same start: a task of the same type whose input holds the same JSON
	// value (compared in jsoncheck's canonical form, so key order, white
	// space and how a number is written do not matter). Then the result is
	// the existing task, as without it. Any other start with the key fails
	// with an error marked [ErrIdempotencyKeyReused] and, in a
	// [Store.TaskStartMany], none of the batch is written. Unset, a taken key
	// returns the existing task whatever the start holds (a schedule's
	// ticks rely on it).
	RefuseKeyReuse bool
	// ID, when set, is the new task's id (a UUIDv7, so ids stay time
	// ordered); zero, the driver makes one. The payload stage, which seals
	// the input with the task's own key, chooses it before the insert.
	ID uuid.UUID
	// DataKey, when set, is the task's wrapped data key (payload/seal),
	// kept on its row (tasks.data_key) from the insert on: a start that
	// finds its idempotency key taken writes none.
	DataKey []byte
	// Blobs are written with the task, in its transaction, each owned by
	// it (TaskID is ID, which must be set): an input kept by reference.
	// A start that finds its idempotency key taken writes none.
	Blobs []*Blob
}

// TaskStartResult says which task a start refers to.
type TaskStartResult struct {
	ID uuid.UUID
	// Existing is true when the idempotency key was already taken and ID is
	// the task that took it; nothing was created.
	Existing bool
}

// TaskGetParams names one task to read ([Executor.TaskGet]): by ID or by
// IdempotencyKey, not both, in Namespace. Neither is the zero id, which
// no task has: [ErrNotFound].
type TaskGetParams struct {
	// Namespace is the task's namespace: a task of another namespace is
	// not found (nor is any task when it is empty).
	Namespace string
	// ID names the task by its id.
	ID uuid.UUID
	// IdempotencyKey names the task started with this key in Namespace
	// (TaskStartParams.Scheduled.IdempotencyKey).
	IdempotencyKey string
}

// TaskListParams filters [Store.TaskList]. Empty filters match
// everything.
type TaskListParams struct {
	// Namespace is the tasks' namespace. Required.
	Namespace string
	Status    history.Status
	Type      string
	Queue     string
	Before    uuid.UUID // only tasks older than this one (ids are UUIDv7); zero: from the newest
	Limit     int       // default 100

	// OmitInput and OmitOutput leave the tasks' Input and Output nil. With
	// both set the driver does not read those columns at all, so a listing
	// costs what the tasks' other fields cost however large their payloads
	// are. The zero value reads both.
	OmitInput, OmitOutput bool
	// MaxPayloadBytes, when above 0, bounds the page in bytes as Limit
	// does in rows: the page ends before the task whose payloads (the JSON
	// text of the input and output read, as stored) would take the page's
	// total past it. A page holds at least one task, whole, however large;
	// a page is never cut inside a task. A page cut this way holds fewer
	// than Limit tasks while more may follow: continue from its last task
	// until a page comes back empty. The driver reads the payloads of at
	// most one task past the bound. 0: no bound.
	MaxPayloadBytes int
}

// Validate checks the parameters: what every store does first.
func (p *TaskListParams) Validate() error {
	return namespaceRequired("list tasks", p == nil || p.Namespace == "")
}

// TaskType is [cairntype.TaskType]: the seam records and lists the value
// users get back, under its seam name until the seam names cairntype
// itself.
type TaskType = cairntype.TaskType

// TaskTypeRegisterParams records task types as registered by a worker
// ([Store.TaskTypeRegister]): a type already registered takes these
// defaults.
type TaskTypeRegisterParams struct {
	// Namespace is the types' namespace. Required.
	Namespace string
	// Worker is the worker's id, recorded as each type's RegisteredBy.
	Worker string
	// Types are the types with their defaults (their Namespace,
	// RegisteredBy and RegisteredAt are not read). None: nothing is
	// written.
	Types []TaskType
}

// Validate checks the parameters: what every store does first.
func (p *TaskTypeRegisterParams) Validate() error {
	return namespaceRequired("register task types", p == nil || p.Namespace == "")
}

// TaskTypeListParams lists the task types registered in a namespace, by
// name and version ([Store.TaskTypeList]).
type TaskTypeListParams struct {
	// Namespace is the types' namespace. Required.
	Namespace string
}

// Validate checks the parameters: what every store does first.
func (p *TaskTypeListParams) Validate() error {
	return namespaceRequired("list task types", p == nil || p.Namespace == "")
}

// TaskSignalParams describes a signal sent to a task: signal_received
// appended to its history (engine.SignalTask).
type TaskSignalParams struct {
	Namespace string
	// TaskID names the task; when it is the zero UUID, IdempotencyKey
	// does instead (the key the task was started with, in Namespace).
	TaskID         uuid.UUID
	IdempotencyKey string
	// Name is the signal's name, which a workflow's receive waits on.
	// Required.
	Name string
	// Payload is the signal's value as JSON; empty for none.
	Payload json.RawMessage
	// Sender says who sent it, for the history.
	Sender string
	// DedupID, when set, makes the send idempotent: a signal with this id
	// already in the task's history is not written again.
	DedupID string
	// ForWait, when set, is the one receive the signal is for (a
	// history.Wait's Position): it is written only while the task waits
	// there for a signal called Name, so that receive takes it and no
	// other. Otherwise nothing is written and the error is marked
	// ErrWaitEnded (the task has waited there or at a later receive, or
	// has finished) or ErrWaitNotReached. The dedup id is checked first.
	ForWait *int
}

// SignalResult says what a signal did.
type SignalResult struct {
	TaskID uuid.UUID
	// Duplicate is set when a signal with the same DedupID was already in
	// the history: nothing was written.
	Duplicate bool
	// State is the task's state after the signal (before it, when
	// Duplicate).
	State history.State
}

// SignalLookupParams asks [Executor.SignalLookup] for the facts of a task's
// history a signal is decided on, each read through an index rather than
// by reading the history.
type SignalLookupParams struct {
	// Namespace is the task's namespace, in which the caller found it
	// ([Executor.TaskGet]). The lookup reads by TaskID and does not match
	// it again; "" is allowed.
	Namespace string
	TaskID    uuid.UUID
	// DedupID, when set, asks whether the task's history holds a
	// signal_received with this dedup id ([SignalFacts.Seen]).
	DedupID string
	// OpenWait asks for the wait the task is in after its first LastSeq
	// events ([SignalFacts.Wait]).
	OpenWait bool
	LastSeq  int64
}

// SignalFacts are what [Executor.SignalLookup] found.
type SignalFacts struct {
	// Seen is set when the history holds a signal with the dedup id asked
	// about (false when none was asked about).
	Seen bool
	// Wait is the wait_started of the wait the task is in after its first
	// LastSeq events (history.State.Wait): its last wait_started, unless
	// a wait_timed_out or a signal of the wait's name follows it. nil
	// when it is in none, or when it was not asked for.
	Wait *history.WaitStartedData
}

// ChildStartParams starts children of a running parent: the children's
// tasks and the parent's child_started events, in one transaction, so a
// child exists exactly when its parent's history says so. The start is
// written above the seam, once for every driver (engine/internal/requests'
// StartChildren: TaskStartMany, then the parent's EventAppend).
type ChildStartParams struct {
	// Parent is the parent's append, fenced by its attempt's lease as the
	// attempt's other appends are; Payloads must be empty: the start
	// writes one child_started per child, with the child's task id.
	Parent EventAppendParams
	// Children are the children to start, at the parent's next positions
	// in order. Their Scheduled.ParentID, ParentPosition and
	// IdempotencyKey are set by the start (the key from the parent and
	// the position, so a retried parent never starts a second child);
	// their namespace must be the parent's.
	Children []ChildStart
}

// ChildStart is one child to start.
type ChildStart struct {
	Task TaskStartParams
	// OnParentClose is what becomes of the child when its parent ends
	// other than by completing: history.ParentCloseCancel (the default
	// when empty) or history.ParentCloseAbandon.
	OnParentClose string
}

// ChildStartResult is what a child start wrote.
type ChildStartResult struct {
	State history.State // the parent's, after its child_started events
	IDs   []uuid.UUID   // the children's task ids, in the order started
}

// HistoryLimits bound what a task's history takes from outside its runs: a
// signal that would take the history past either bound is refused with a
// [*HistoryFullError] and writes nothing. Both drivers take them in their
// Config and check them in their append, so no caller can go around them.
//
// The bounds apply to signals, the one append that anyone may repeat
// without limit. The task's own runs are bounded by the worker
// (WorkerConfig.MaxHistoryEvents, checked when an attempt starts), and the
// requests an operator makes of a task (cancel, compensate, requeue,
// erase) append one event each and are how a task at its bound is ended,
// so they are let through.
type HistoryLimits struct {
	// MaxEvents is the most events a history may hold after a signal.
	// 0: [DefaultMaxHistoryEvents]; negative: no bound.
	MaxEvents int64
	// MaxBytes is the most bytes of event data (the JSON of each event's
	// payload, as written) a history may hold after a signal, counted over
	// the events appended after the start: a task's input and the
	// fixed-size attempt_started events are bounded otherwise (the
	// payload limit; MaxEvents) and not counted. 0:
	// [DefaultMaxHistoryBytes]; negative: no bound.
	MaxBytes int64
}

// The defaults of [HistoryLimits]: the worker's default MaxHistoryEvents,
// and 64 MiB of event data.
const (
	DefaultMaxHistoryEvents = 50_000
	DefaultMaxHistoryBytes  = 64 << 20
)

// Resolved returns l with its defaults filled in and "no bound" as 0.
func (l HistoryLimits) Resolved() HistoryLimits {
	resolve := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return HistoryLimits{MaxEvents: resolve(l.MaxEvents, DefaultMaxHistoryEvents), MaxBytes: resolve(l.MaxBytes, DefaultMaxHistoryBytes)}
}

// TaskGetManyParams selects tasks by id ([Store.TaskGetMany]).
type TaskGetManyParams struct {
	// Namespace, when set, is the namespace the tasks must be of: a task
	// of another is not returned. "" means the tasks' own namespaces,
	// whatever they are: the runtime's reads of ids the store gave it.
	Namespace string
	IDs       []uuid.UUID
}

// EventListParams selects the events [Store.EventList] reads: of each
// task of After, those with a seq above its value there.
type EventListParams struct {
	// Namespace, when set, is the namespace the tasks must be of: a task
	// of another has no entry in the result. "" means the tasks' own
	// namespaces, whatever they are: the runtime's reads (the processor,
	// the rescuer, the deadlines) of ids the store gave it, which add no
	// predicate to the statement.
	Namespace string
	// After maps each task to the seq after which its events are read: 0
	// reads its whole log. Empty reads nothing.
	After map[uuid.UUID]int64
}

// EventListAll returns the [EventListParams] of the whole logs of ids, in
// namespace ("": the tasks' own).
func EventListAll(namespace string, ids ...uuid.UUID) *EventListParams {
	after := make(map[uuid.UUID]int64, len(ids))
	for _, id := range ids {
		after[id] = 0
	}
	return &EventListParams{Namespace: namespace, After: after}
}

// TaskEvents returns task id's whole log, in order, through e's
// [Executor.EventList] (namespace "": the task's own; nil when the task
// is unknown or not in namespace): the read of one history that requests,
// the rescue and tests make.
func TaskEvents(ctx context.Context, e Executor, namespace string, id uuid.UUID) ([]history.Event, error) {
	byTask, err := e.EventList(ctx, EventListAll(namespace, id))
	if err != nil {
		return nil, err
	}
	return byTask[id], nil
}

// EventPageParams pages through a task's events in order, keyset by seq:
// a reader of a long history holds one page at a time (Store.EventListPage).
type EventPageParams struct {
	Namespace string
	TaskID    uuid.UUID
	// After is the seq of the last event of the previous page; 0 starts
	// at the first event.
	After int64
	// Limit bounds the events of the page: 1 to [MaxEventPageLimit], 0
	// for [DefaultEventPageLimit].
	Limit int
	// MaxBytes bounds the page's event data (the JSON of the payloads, as
	// stored): the page ends before the event that would go past it, but
	// holds at least one event. 0: [DefaultEventPageBytes].
	MaxBytes int64
}

// The bounds of an [EventPageParams] page.
const (
	DefaultEventPageLimit = 100
	MaxEventPageLimit     = 1000
	DefaultEventPageBytes = 4 << 20
)

// ContinueParams continues a running task as new (workflow.ContinueAsNew):
// the next run's start and the ending run's task_continued, in one
// transaction, so the chain never loses a run and never forks. Written
// above the seam, once for every driver (engine/internal/requests'
// ContinueAsNew: TaskStart, then the run's fenced EventAppend).
type ContinueParams struct {
	// Run is the ending run's append, fenced by its attempt's lease as
	// the attempt's other appends are. Its Payloads are what goes before
	// the end (the last step's completion, if it is not on record yet);
	// the composite adds task_continued, naming the next run.
	Run EventAppendParams
	// Next is the next run's start: of the run's namespace, type and
	// version, its Scheduled.ContinuedFrom the run's id, without an
	// idempotency key (the chain's first run keeps it).
	Next TaskStartParams
}

// ContinueResult is what a continue wrote.
type ContinueResult struct {
	State  history.State // the ending run's, after task_continued
	NextID uuid.UUID     // the next run's task id
}
