package store

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
)

// Store is the seam between cairn's runtime and a database: the
// statements of [Executor], run on the store (each committed when it
// returns) or in a transaction of it ([Executor.Begin]), and the store's
// notifications ([Listener]). What a request means (cancel, compensate,
// requeue, rescue, expiry, a diagnosis's causes) is decided once, above
// the seam, in package engine.
//
// Two drivers implement it with the same semantics: engine/pgstore
// (PostgreSQL, any number of processes) and engine/sqlitestore (one SQLite
// file, one process). The conformance suite in engine/storetest runs
// against both. A driver may offer more outside the interface (pgstore's
// WithTx runs the statements in a caller's pgx transaction, River's
// UnwrapExecutor); a caller that needs it and has another store returns an
// error marked [ErrUnsupported].
//
// The interface is for drivers and for decorators of them (tracing, fault
// injection); it grows as the engine needs, so implementing it outside
// cairn means following its changes.
type Store interface {
	Executor

	// NewListener returns a listener for the store's notifications, not yet
	// connected. Each call returns a new one.
	NewListener() Listener

	// Ping checks that the database answers.
	Ping(ctx context.Context) error

	// ObserverAttach makes the store count its committed writes into o
	// (engine.Metrics) from now on, unless it counts into an observer
	// already (the driver's Config.Metrics, or an earlier attach), and
	// returns the observer it counts into then: o, or the one it had. The
	// SDK attaches its configured metrics this way to a store a caller
	// made, rather than wrapping the store.
	ObserverAttach(o Observer) Observer
}

// Executor is the seam's statements: what runs on a [Store], each call
// committed when it returns, and in a [Tx], where its writes are the
// transaction's. Every method is valid in both; what a [Store] adds
// (NewListener, Ping, ObserverAttach) is not a statement and is not on a
// Tx.
//
// A method that writes in several statements where it would open a
// transaction of its own on the store (a start into a bounded queue,
// EventAppendMany in rounds or ending children,
// TaskRemoveMany) runs them in a nested transaction
// of the Tx (a savepoint), so it is as atomic in a Tx as on the store. The
// refusals a method documents (ErrConflict, ErrFenced, ErrQueueFull,
// ErrNotFound, ...) leave the Tx usable; after another error (a lost
// connection, a unique violation of BlobPut) roll it back, as PostgreSQL
// aborts a transaction whose statement failed.
//
// Methods that read in one snapshot on the store (QueueMeasure,
// QueueSeries) read in a Tx's snapshots instead: one per statement in a
// PostgreSQL transaction at READ COMMITTED, its default.
type Executor interface {
	// Begin opens a transaction: on a [Store], a new one; on a [Tx], a
	// nested one (a savepoint), whose Commit makes its writes the outer
	// transaction's and whose Rollback undoes only them. ctx bounds the
	// opening; on SQLite, whose transactions database/sql ties to the
	// context they began with, the transaction is rolled back if ctx ends
	// before it does, so give it a context that lives as long.
	//
	// A Tx holds a connection until it ends. On SQLite it holds the
	// store's one connection and its write lock: every other call on the
	// store waits for it to end, so the goroutine that holds a Tx must
	// not call the store (only the Tx) before it commits or rolls back.
	Begin(ctx context.Context) (Tx, error)

	// Tasks: start, read, list.
	TaskStart(ctx context.Context, p *TaskStartParams) (TaskStartResult, error)
	TaskStartMany(ctx context.Context, ps []*TaskStartParams) ([]TaskStartResult, error)
	// TaskGet returns the task p names, by id or by idempotency key, in
	// p.Namespace, or an error marked [ErrNotFound].
	TaskGet(ctx context.Context, p *TaskGetParams) (*Task, error)
	// TaskGetMany returns the tasks of p.IDs that exist (of p.Namespace,
	// or of any when it is ""), in no particular order.
	TaskGetMany(ctx context.Context, p *TaskGetManyParams) ([]*Task, error)
	TaskList(ctx context.Context, p *TaskListParams) ([]*Task, error)
	// EventList returns, by task id, the events of each task of p.After
	// with a seq above its value there (0: the whole log), in order: a
	// task's history, several at once, or what was appended to a task
	// since a state of it, read without its whole history (an append
	// that lost a race to a signal, a cancel request or a child's end
	// catches up this way). A task with none, unknown, or not in
	// p.Namespace (when set) has no entry.
	EventList(ctx context.Context, p *EventListParams) (map[uuid.UUID][]history.Event, error)
	// EventListPage returns a page of a task's events after p.After, in
	// order, bounded in events and bytes ([EventPageParams]); empty past
	// the last event, or when the task is not in p.Namespace.
	EventListPage(ctx context.Context, p *EventPageParams) ([]history.Event, error)

	// The execution path: claims, fenced appends, leases.
	// TaskClaim claims up to p.Max due tasks in one statement and says
	// what held the rest back and when more is due ([ClaimResult]).
	TaskClaim(ctx context.Context, p *TaskClaimParams) (ClaimResult, error)
	EventAppend(ctx context.Context, p *EventAppendParams) (history.State, error)
	EventAppendMany(ctx context.Context, ps []*EventAppendParams) ([]AppendResult, error)
	// LeaseExtendMany extends the leases of p still held, and says of
	// each whether its cancel was requested; a lease it does not return
	// is lost.
	LeaseExtendMany(ctx context.Context, p *LeaseExtendParams) (map[uuid.UUID]LeaseRenewal, error)

	// SignalLookup reads what a signal to a task depends on in its
	// history (see [SignalLookupParams]), by the history's indexes: a
	// signal (engine.SignalTask) is decided from these and the task's row,
	// not from its whole history.
	SignalLookup(ctx context.Context, p *SignalLookupParams) (SignalFacts, error)

	// Children are started above the seam ([ChildStartParams]: the
	// children's TaskStartMany and the parent's fenced EventAppend of
	// child_started, in one transaction). A child's terminal append,
	// through EventAppend or EventAppendMany, writes child_finished into
	// its parent's log in the same transaction (nothing when the parent
	// has finished, or already has the child's outcome), which makes a
	// parent awaiting the child due at once.

	// Dead letters.
	DeadLetterList(ctx context.Context, p *DeadLetterListParams) ([]*Task, error)

	// What the rescue and the leader's singleton work read and write:
	// tasks whose lease expired and when the next one does (both by the
	// store's clock: see [LeaseExpiryParams]), tasks past their start
	// deadline, the leader lease.
	// TaskLeaseNextExpiry returns how long until the next running task's
	// lease that TaskListLeaseExpired would not list yet will be listed
	// (0 or more: a duration by the store's clock, so the caller's clock
	// need not agree with it); ok is false when no such lease exists.
	TaskListLeaseExpired(ctx context.Context, p *LeaseExpiryParams) ([]uuid.UUID, error)
	TaskLeaseNextExpiry(ctx context.Context, p *LeaseExpiryParams) (in time.Duration, ok bool, err error)
	TaskListStartExpired(ctx context.Context, p *TaskListStartExpiredParams) ([]uuid.UUID, error)
	// LeaderAttempt takes or renews a leader lease ([LeaderAttemptParams])
	// and reports whether p.Owner holds it afterwards; LeaderResign gives
	// it up, if p.Owner holds it.
	LeaderAttempt(ctx context.Context, p *LeaderAttemptParams) (bool, error)
	LeaderResign(ctx context.Context, p *LeaderResignParams) error
	// IndexSummarize brings the store's range indexes up to date and
	// returns how many ranges it summarized: on PostgreSQL the BRIN
	// index of the events' times (events_at_brin_idx, which the audit's
	// time ranges walk), whose page ranges filled since the last call
	// get their summaries; the embedded store has no such index (0). The
	// leader calls it at its passes (migration 0026 turned the index's
	// autosummarize off: its requests overflowed autovacuum's queue under
	// a steady rate of appends, each logged with its statement). A
	// summary already being written elsewhere (VACUUM) is not waited for:
	// 0. A role that may not summarize (PostgreSQL: without EXECUTE on
	// the schema's summarize_event_ranges) is refused with an error
	// marked [ErrUnsupported].
	IndexSummarize(ctx context.Context) (int, error)

	// Retention's statements; the removal is written once above the
	// seam (engine/internal/maintenance.RemoveFinished), in a [Tx]:
	// RetiredKeyDeleteExpired, TaskRemovableList with Lock, TaskRemoveMany.
	//
	// TaskRemovableList lists up to p.Max tasks of p.Namespace that
	// finished before p.Before, oldest first ([TaskRemovableListParams]);
	// with p.Lock it locks them (skipping those another transaction
	// holds) and reads what their removal retires.
	TaskRemovableList(ctx context.Context, p *TaskRemovableListParams) ([]RemovableTask, error)
	// TaskRemoveMany removes the tasks of p, each with its whole log and
	// its blobs, and keeps their idempotency keys taken until
	// p.KeysUntil; it returns what it removed.
	TaskRemoveMany(ctx context.Context, p *TaskRemoveManyParams) (RemoveResult, error)
	// RetiredKeyDeleteExpired drops up to p.Max retired idempotency keys
	// past their time by the store's clock, skipping those a start holds,
	// and returns how many it dropped.
	RetiredKeyDeleteExpired(ctx context.Context, p *RetiredKeyDeleteExpiredParams) (int, error)
	// BlobPut writes a blob (a key is written once: a second put of it is
	// marked ErrConflict). BlobGet reads one (ErrNotFound when there is
	// none); the caller checks its digest. TaskRemoveMany removes a
	// task's blobs with it.
	BlobPut(ctx context.Context, p *BlobPutParams) error
	BlobGet(ctx context.Context, p *BlobGetParams) (*Blob, error)
	// BlobKeysByTasks returns the keys of the blobs each task of p.IDs
	// wrote in p.Namespace (what archival copies before the removal).
	BlobKeysByTasks(ctx context.Context, p *BlobKeysByTasksParams) (map[uuid.UUID][]string, error)
	// Data keys (payload/seal's encryption at rest). TaskDataKeys returns
	// the wrapped data keys of the tasks of p.IDs that have one (a start
	// writes it, [TaskStartParams.DataKey]; task_erased clears it in the
	// append that writes the event). TaskDataKeySet gives p.DataKey to a
	// task still to finish that has none (one a schedule started, or
	// started before its namespace was encrypted) and returns the key the
	// task holds then: p.DataKey, the one it had, or nil (finished without
	// one, erased, or gone).
	TaskDataKeys(ctx context.Context, p *TaskDataKeysParams) (map[uuid.UUID][]byte, error)
	TaskDataKeySet(ctx context.Context, p *TaskDataKeySetParams) ([]byte, error)
	// NamespaceSet writes a namespace's settings. NamespaceList returns
	// every namespace that has settings or finished tasks, by name (a
	// namespace without settings has zero durations), or only
	// p.Namespace.
	NamespaceSet(ctx context.Context, p *NamespaceSetParams) error
	NamespaceList(ctx context.Context, p *NamespaceListParams) ([]NamespaceConfig, error)

	// Streams (the stream_entries beside a task's history).
	// StreamAppend writes entries to a running task's streams, numbered
	// after its last, fenced by p.Epoch (the task running under another
	// epoch, or not running, is [ErrFenced], nothing written), and
	// announces the task ([Notification.Streams]); it returns the seq of
	// the last entry written. StreamRead returns a page of a task's
	// entries after p.After, in order (empty past the last, or for a task
	// not in p.Namespace). StreamOpenList lists the chunks of attempts
	// before p.Before that no end or rewind closed. StreamRemove removes
	// a task's entries (an erasure); TaskRemoveMany removes them with the
	// task. StreamRemoveExpired removes up to p.Max entries of a
	// namespace written before p.Before (its stream TTL) and returns how
	// many.
	StreamAppend(ctx context.Context, p *StreamAppendParams) (int64, error)
	StreamRead(ctx context.Context, p *StreamReadParams) ([]StreamEntry, error)
	StreamOpenList(ctx context.Context, p *StreamOpenListParams) ([]StreamOpen, error)
	StreamRemove(ctx context.Context, p *StreamRemoveParams) (int, error)
	StreamRemoveExpired(ctx context.Context, p *StreamRemoveExpiredParams) (int, error)

	// Schedules. ScheduleCreate writes a new schedule (its first tick the
	// first after now; a name taken in the namespace is [ErrConflict]),
	// ScheduleList lists a namespace's by name, SchedulePause pauses or
	// resumes one and ScheduleDelete removes one (an unknown one is
	// [ErrNotFound]; tasks it started are not touched).
	ScheduleCreate(ctx context.Context, p *ScheduleCreateParams) error
	ScheduleList(ctx context.Context, p *ScheduleListParams) ([]Schedule, error)
	SchedulePause(ctx context.Context, p *SchedulePauseParams) error
	ScheduleDelete(ctx context.Context, p *ScheduleDeleteParams) error
	// What the cron service's firing (engine/internal/maintenance's
	// FireSchedules) runs, in a Tx: ScheduleListDue lists the due active
	// schedules (due at their retry time while skipped, else at their
	// next run), earliest first, up to p.Max, locked until the Tx ends
	// (another firer's list skips them: FOR UPDATE SKIP LOCKED on
	// PostgreSQL, the single writer on SQLite); ScheduleMarkFired and
	// ScheduleMarkSkipped record what became of a schedule's tick (a
	// skip is counted into the store's [Observer] once it commits).
	// ScheduleNextDue returns when the next active schedule is due; ok
	// is false when there is none.
	ScheduleListDue(ctx context.Context, p *ScheduleListDueParams) ([]Schedule, error)
	ScheduleMarkFired(ctx context.Context, p *ScheduleMarkFiredParams) error
	ScheduleMarkSkipped(ctx context.Context, p *ScheduleMarkSkippedParams) error
	ScheduleNextDue(ctx context.Context, p *ScheduleNextDueParams) (at time.Time, ok bool, err error)

	// Queue settings, rate limits, registered types. RateLimitSet and
	// RateLimitDelete stay two methods, each one statement: a set refuses
	// a limit of no starts ([RateLimitSetParams.Validate]) rather than
	// reading a zero as a removal, which would lift a limit a caller
	// forgot to fill in.
	QueueSet(ctx context.Context, p *QueueSetParams) error
	QueueList(ctx context.Context, p *QueueListParams) ([]QueueInfo, error)
	QueueWaitList(ctx context.Context, p *QueueWaitListParams) ([]QueueWait, error)
	RateLimitSet(ctx context.Context, p *RateLimitSetParams) error
	RateLimitDelete(ctx context.Context, p *RateLimitDeleteParams) error
	TaskTypeRegister(ctx context.Context, p *TaskTypeRegisterParams) error
	TaskTypeList(ctx context.Context, p *TaskTypeListParams) ([]TaskType, error)
	// Deploy-check findings: a worker replaces its findings of a type
	// (one statement: a delete and an insert), operators list them.
	StrandedReplace(ctx context.Context, p *StrandedReplaceParams) error
	StrandedList(ctx context.Context, p *StrandedListParams) ([]StrandedTask, error)

	// Inquiries (inquiry.go): a client's question for a worker with a
	// task's code (a query, an update's validator), and its answer.
	// InquiryCreate writes a pending one and announces it
	// (Notification.Inquiries); InquiryTake holds up to p.Max pending ones
	// of p's types for a worker, skipping those another take holds;
	// InquiryAnswer answers a pending one and announces it
	// (Notification.Answered); InquiryGet reads one; InquiryRemoveExpired
	// removes those answered or past their deadline more than p.Keep ago
	// and returns how many.
	InquiryCreate(ctx context.Context, p *InquiryCreateParams) error
	InquiryTake(ctx context.Context, p *InquiryTakeParams) ([]*Inquiry, error)
	InquiryAnswer(ctx context.Context, p *InquiryAnswerParams) error
	InquiryGet(ctx context.Context, p *InquiryGetParams) (*Inquiry, error)
	InquiryRemoveExpired(ctx context.Context, p *InquiryRemoveExpiredParams) (int, error)

	// Remote steps (remote.go): the rows workers outside the process
	// claim. RemoteStepInsert writes those a dispatch made and announces
	// their queues (Notification.Remote); RemoteStepClaim claims up to
	// p.Max of a queue for a worker, each under a new nonce and lease;
	// RemoteStepHeartbeat extends a claim's lease; RemoteStepTake
	// removes and returns the step a claim holds (with its outcome's
	// append, in one transaction); RemoteStepRelease hands it back
	// unclaimed, announced; RemoteStepListExpired lists claims whose
	// lease ended; RemoteStepRemoveFinished removes (and returns) the rows
	// of tasks finished or gone. RemoteStreamAppend writes chunks under a claim
	// (announced as StreamAppend's; over MaxRemoteStreamBytes, refused
	// with ErrStreamFull); RemoteStreamClose ends or rewinds what a step's
	// attempt left open, in the transaction that took or released its
	// claim, and returns how many streams it closed. A claim that no
	// longer holds its step is refused with ErrNotFound.
	RemoteStepInsert(ctx context.Context, p *RemoteStepInsertParams) error
	RemoteStepClaim(ctx context.Context, p *RemoteStepClaimParams) ([]*RemoteStep, error)
	RemoteStepHeartbeat(ctx context.Context, p *RemoteStepRef) (RemoteRenewal, error)
	RemoteStepTake(ctx context.Context, p *RemoteStepRef) (*RemoteStep, error)
	RemoteStepRelease(ctx context.Context, p *RemoteStepRef) error
	RemoteStepListExpired(ctx context.Context, p *RemoteStepExpiredParams) ([]*RemoteStep, error)
	RemoteStepRemoveFinished(ctx context.Context, p *RemoteStepExpiredParams) ([]*RemoteStep, error)
	RemoteStreamAppend(ctx context.Context, p *RemoteStreamAppendParams) (int64, error)
	RemoteStreamClose(ctx context.Context, p *RemoteStreamCloseParams) (int, error)

	// Model rate limits (modellimit.go): a namespace's tokens and
	// requests per minute per model, shared by every worker.
	// ModelLimitSet makes or replaces one, ModelLimitList lists a
	// namespace's by model, ModelLimitDelete removes one with its
	// waiting tickets; each announces the model (Notification.Models).
	// ModelAdmit admits a step in its turn when it fits the sliding
	// window, else makes or renews its waiting ticket (announcing an
	// admission); ModelSettle replaces an admission's reservation by
	// what its step spent; ModelTicketDrop drops a waiting ticket;
	// ModelAdmissionRemoveOld removes admissions out of every window
	// and tickets long expired, and returns how many admissions.
	ModelLimitSet(ctx context.Context, p *ModelLimitSetParams) error
	ModelLimitList(ctx context.Context, p *ModelLimitListParams) ([]ModelLimit, error)
	ModelLimitDelete(ctx context.Context, p *ModelLimitDeleteParams) error
	ModelAdmit(ctx context.Context, p *ModelAdmitParams) (ModelAdmission, error)
	ModelSettle(ctx context.Context, p *ModelSettleParams) error
	ModelTicketDrop(ctx context.Context, p *ModelTicketDropParams) error
	ModelAdmissionRemoveOld(ctx context.Context, p *ModelAdmissionRemoveOldParams) (int, error)

	// Operators' reads. QueueMeasure measures a queue over a window; the
	// causes are judged above the seam (engine.DiagnoseQueue).
	// QueueGaugeList is the metrics collector's read of every namespace
	// (see [QueueGaugeListParams]).
	QueueStatsList(ctx context.Context, p *QueueStatsListParams) ([]QueueStats, error)
	QueueGaugeList(ctx context.Context, p *QueueGaugeListParams) ([]*QueueGauge, error)
	QueueMeasure(ctx context.Context, p *QueueDiagnoseParams) (*QueueDiagnosis, error)
	// QueueSeries folds the window's events into bucketed time series per
	// queue (the console's charts); the fold is shared by the drivers.
	QueueSeries(ctx context.Context, p *QueueSeriesParams) ([]QueueSeries, error)
	EventScan(ctx context.Context, p *EventScanParams) ([]AuditEvent, error)

	// Usage roll-ups' reads (usage.go), from the histories alone.
	// TaskUsageList reads, for each task of p.IDs in p.Namespace, its
	// usage reports, the children it started and the run it continued
	// as ([TaskUsageFacts]), in no particular order; the roll-up of a
	// task with its children is composed above the seam. UsageSeries
	// sums the usage reports of p.Namespace's events in p's window by
	// key and bucket (cells with nothing are left out), bounded like a
	// diagnosis: a read that takes over its time is refused marked
	// [ErrDiagnosisTooSlow].
	TaskUsageList(ctx context.Context, p *TaskUsageListParams) ([]TaskUsageFacts, error)
	UsageSeries(ctx context.Context, p *UsageSeriesParams) ([]UsageCell, error)

	// Budgets (budget.go): scope budgets' definitions, the windows that
	// count what budgets spent and hold, open reservations, waiting tasks.
	budgetExecutor
}

// Tx is a transaction on a store, from [Executor.Begin] (or pgstore's
// WithTx over a caller's pgx transaction). Its statements see its own
// writes; nothing else sees them before Commit, and Rollback undoes them.
//
// What its writes announce (work ready, tasks finished, cancels requested:
// see [Listener]) is delivered after Commit, as PostgreSQL delivers a
// NOTIFY at commit, and never after Rollback; the store's [Observer]
// counts its writes after Commit as well. A nested Tx's announcements and
// counts wait for the outermost commit.
//
// On PostgreSQL the database clock of a Tx's statements (now(), which
// leases, claims and timers read) is the time the transaction began: a
// task it starts due at once by the writer's clock is not due yet to a
// claim in the same Tx. Keep a Tx short.
//
// A Tx is not safe for concurrent use: one goroutine at a time. After
// Commit or Rollback it may not be used again, except that Rollback after
// either returns nil, so a deferred Rollback is safe.
type Tx interface {
	Executor

	// Commit commits the transaction (on a nested Tx, releases its
	// savepoint into the outer one). An error means nothing was
	// committed.
	Commit(ctx context.Context) error
	// Rollback rolls the transaction back (on a nested Tx, to its
	// savepoint). It returns nil on a Tx already committed or rolled back.
	Rollback(ctx context.Context) error
}

// Listener receives a store's notifications after its commits: work became
// ready, tasks finished, cancels of running tasks were requested, tasks'
// streams have new entries. On
// PostgreSQL it is a dedicated connection that runs LISTEN; on SQLite, a
// subscription to the store's in-process announcements.
//
// Notifications only make the runtime react sooner. They can be lost (a
// dropped connection), so the runtime polls as well and is correct without
// them.
type Listener interface {
	// Connect starts listening. After an error from WaitForNotification
	// the listener is closed; Connect may be called again.
	Connect(ctx context.Context) error
	// WaitForNotification blocks until the next notification, ctx is
	// done, or the listener fails.
	WaitForNotification(ctx context.Context) (Notification, error)
	// Close stops listening. It is safe to call on a listener that is not
	// connected.
	Close(ctx context.Context) error
	// Probe sends this listener, the way writers send their notifications,
	// a notification whose Probes holds token, to check that notifications
	// arrive. It may be called while WaitForNotification waits.
	Probe(ctx context.Context, token string) error
}

// Notification is what a store announces after a commit. A driver may
// merge several commits' announcements into one.
type Notification struct {
	Ready  bool        // work became ready in some queue
	Done   []uuid.UUID // tasks that finished
	Cancel []uuid.UUID // running tasks whose cancel was requested
	// Streams are tasks whose streams have new entries
	// ([Executor.StreamAppend]).
	Streams []uuid.UUID
	Probes  []string // the tokens of this listener's probes (Listener.Probe) that came back
	// Inquiries: pending inquiries were made (InquiryCreate); workers
	// that answer them take.
	Inquiries bool
	// Answered are inquiries answered (InquiryAnswer), by id.
	Answered []uuid.UUID
	// Models are model limits whose waiters may go now: a limit set or
	// deleted, a step admitted or settled below its reservation, a
	// ticket dropped.
	Models []ModelKey
	// Remote are queues where remote steps were dispatched or handed
	// back, each as namespace/queue ([RemoteQueueKey]).
	Remote []string
}

// Observer counts what a store writes, after the write has committed:
// engine.Metrics implements it. Drivers call it, through their
// [ObserverSlot].
type Observer interface {
	// ObserveAppended is called for each append that was written, with the
	// state it replayed to.
	ObserveAppended(p *EventAppendParams, next history.State)
	// ObserveClaimed is called with each batch of claimed tasks.
	ObserveClaimed(claimed []*ClaimedTask)
	// ObserveScheduleSkipped is called for each schedule tick skipped
	// (ScheduleMarkSkipped recorded the skip), with the schedule, the
	// tick, the reason and the retry time.
	ObserveScheduleSkipped(f ScheduleFiring)
	// ObserveRemoved is called for each TaskRemoveMany that removed
	// tasks, with what it removed from namespace.
	ObserveRemoved(namespace string, res RemoveResult)
}

// ObserverSlot holds the observer a driver counts its committed writes
// into: the one it was made with (its Config.Metrics), or one attached
// later ([Store.ObserverAttach]), once. Its Observe methods pass each
// write on, and do nothing while it holds none. It is safe for concurrent
// use.
type ObserverSlot struct {
	o atomic.Pointer[Observer]
}

// NewObserverSlot returns a slot holding o: none when o is nil, or a nil
// pointer (a nil *engine.Metrics counts nothing).
func NewObserverSlot(o Observer) *ObserverSlot {
	s := &ObserverSlot{}
	if !nilObserver(o) {
		s.o.Store(&o)
	}
	return s
}

// nilObserver reports whether o is nil, or a nil pointer in an interface.
func nilObserver(o Observer) bool {
	if o == nil {
		return true
	}
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Observer returns the observer the slot holds, nil when none.
func (s *ObserverSlot) Observer() Observer {
	if p := s.o.Load(); p != nil {
		return *p
	}
	return nil
}

// Attach makes o the slot's observer when it holds none, and returns the
// one it holds then (see [Store.ObserverAttach]).
func (s *ObserverSlot) Attach(o Observer) Observer {
	if !nilObserver(o) && s.o.CompareAndSwap(nil, &o) {
		return o
	}
	return s.Observer()
}

// ObserveAppended implements [Observer].
func (s *ObserverSlot) ObserveAppended(p *EventAppendParams, next history.State) {
	if o := s.Observer(); o != nil {
		o.ObserveAppended(p, next)
	}
}

// ObserveClaimed implements [Observer].
func (s *ObserverSlot) ObserveClaimed(claimed []*ClaimedTask) {
	if o := s.Observer(); o != nil {
		o.ObserveClaimed(claimed)
	}
}

// ObserveScheduleSkipped implements [Observer].
func (s *ObserverSlot) ObserveScheduleSkipped(f ScheduleFiring) {
	if o := s.Observer(); o != nil {
		o.ObserveScheduleSkipped(f)
	}
}

// ObserveRemoved implements [Observer].
func (s *ObserverSlot) ObserveRemoved(namespace string, res RemoveResult) {
	if o := s.Observer(); o != nil {
		o.ObserveRemoved(namespace, res)
	}
}
