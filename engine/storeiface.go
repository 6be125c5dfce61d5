package engine

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
)

// Store is what the engine, the SDK and the server need of a database: the
// event log and its projection, claims under leases with fencing, timers,
// schedules, queue settings and the reads operators make. Two
// implementations keep the same semantics: [PGStore] (PostgreSQL, any
// number of processes) and the embedded store of package
// engine/sqlitestore (one process, one file). The conformance suite in
// engine/storetest runs against both.
//
// What only one store can do is outside the interface (PGStore's
// TaskStartTx takes a pgx transaction); a caller that needs it and has the
// other store returns an error marked [ErrUnsupported].
type Store interface {
	// Tasks: start, read, list.
	TaskStart(ctx context.Context, p *TaskStartParams) (TaskStartResult, error)
	TaskStartMany(ctx context.Context, ps []*TaskStartParams) ([]TaskStartResult, error)
	TaskGetByID(ctx context.Context, namespace string, id uuid.UUID) (*Task, error)
	TaskGetManyByID(ctx context.Context, ids []uuid.UUID) ([]*Task, error)
	TaskList(ctx context.Context, p *TaskListParams) ([]*Task, error)
	TaskIDListAll(ctx context.Context) ([]uuid.UUID, error)
	EventListByTask(ctx context.Context, id uuid.UUID) ([]history.Event, error)
	EventListByTasks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]history.Event, error)

	// The execution path: claims, fenced appends, leases.
	TaskClaimMany(ctx context.Context, p *TaskClaimManyParams) ([]*ClaimedTask, error)
	EventAppend(ctx context.Context, p *EventAppendParams) (history.State, error)
	EventAppendMany(ctx context.Context, ps []*EventAppendParams) ([]AppendResult, error)
	LeaseExtendMany(ctx context.Context, leases []LeaseRef, ttl time.Duration) (map[uuid.UUID]LeaseRenewal, error)

	// Requests on a task, and dead letters.
	TaskCancel(ctx context.Context, p *TaskRequestParams) (TaskCancelResult, error)
	TaskCompensate(ctx context.Context, p *TaskRequestParams) (history.State, error)
	TaskRequeue(ctx context.Context, p *TaskRequeueParams) ([]RequeueResult, error)
	DeadLetterList(ctx context.Context, p *DeadLetterListParams) ([]*Task, error)

	// The leader's singleton work.
	RescueExpired(ctx context.Context, max int) (int, error)
	ExpireStartDeadlines(ctx context.Context, max int) (int, error)
	LeaderAttempt(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	LeaderResign(ctx context.Context, name, owner string) error
	ScheduleFireDue(ctx context.Context, max int) (int, error)
	ScheduleNextDue(ctx context.Context) (at time.Time, ok bool, err error)

	// Schedules.
	ScheduleCreate(ctx context.Context, sc Schedule) error
	ScheduleList(ctx context.Context, namespace string) ([]Schedule, error)
	SchedulePause(ctx context.Context, namespace, name string, paused bool) error
	ScheduleDelete(ctx context.Context, namespace, name string) error

	// Queue settings, rate limits, registered types.
	QueueSet(ctx context.Context, c QueueConfig) error
	QueueList(ctx context.Context, namespace string) ([]QueueInfo, error)
	QueueWaits(ctx context.Context, namespace string) ([]QueueWait, error)
	RateLimitSet(ctx context.Context, namespace, taskType string, maxStarts int, per time.Duration) error
	RateLimitDelete(ctx context.Context, namespace, taskType string) error
	TaskTypeRegister(ctx context.Context, namespace, worker string, types []TaskType) error
	TaskTypeList(ctx context.Context, namespace string) ([]TaskType, error)

	// Operators' reads.
	QueueStatsList(ctx context.Context, namespace string, window time.Duration) ([]QueueStats, error)
	QueueGaugeList(ctx context.Context) ([]*QueueGauge, error)
	QueueDiagnose(ctx context.Context, p *QueueDiagnoseParams) (*QueueDiagnosis, error)
	EventScan(ctx context.Context, p *EventScanParams) ([]AuditEvent, error)

	// Ping checks that the database answers.
	Ping(ctx context.Context) error
}

var _ Store = (*PGStore)(nil)
