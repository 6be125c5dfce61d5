package engine

import "github.com/cairnflow/cairn/engine/store"

// Transitional aliases while callers move to package store.
type EventScanParams = store.EventScanParams
type EventCursor = store.EventCursor
type AuditEvent = store.AuditEvent
type TypeKey = store.TypeKey
type TaskClaimManyParams = store.TaskClaimManyParams
type ClaimedTask = store.ClaimedTask
type LeaseRef = store.LeaseRef
type LeaseRenewal = store.LeaseRenewal
type QueueDiagnoseParams = store.QueueDiagnoseParams
type Millis = store.Millis
type QueueDiagnosis = store.QueueDiagnosis
type DiagnosisHalf = store.DiagnosisHalf
type DurationStats = store.DurationStats
type TypeStats = store.TypeStats
type StepStats = store.StepStats
type ErrorStats = store.ErrorStats
type QueueDepth = store.QueueDepth
type QueueLimits = store.QueueLimits
type RateLimit = store.RateLimit
type WaitingType = store.WaitingType
type WaitingKey = store.WaitingKey
type DiagnosisCause = store.DiagnosisCause
type QueueFullError = store.QueueFullError
type QueueGauge = store.QueueGauge
type QueueConfig = store.QueueConfig
type QueueInfo = store.QueueInfo
type QueueWait = store.QueueWait
type QueueStats = store.QueueStats
type Schedule = store.Schedule
type Store = store.Store
type EventAppendParams = store.EventAppendParams
type AppendResult = store.AppendResult
type MigrationState = store.MigrationState
type DeadLetterListParams = store.DeadLetterListParams
type DeadLetterCursor = store.DeadLetterCursor
type Task = store.Task
type TaskStartParams = store.TaskStartParams
type TaskStartResult = store.TaskStartResult
type TaskListParams = store.TaskListParams
type TaskType = store.TaskType

const (
	CauseConcurrencyCapped = store.CauseConcurrencyCapped
	CauseHotKey            = store.CauseHotKey
	CauseInflowSpike       = store.CauseInflowSpike
	CauseLostConsumers     = store.CauseLostConsumers
	CausePoisonRetries     = store.CausePoisonRetries
	CauseRateLimited       = store.CauseRateLimited
	CauseSlowerAttempts    = store.CauseSlowerAttempts
	CauseUnservedType      = store.CauseUnservedType
	DefaultEventScanLimit  = store.DefaultEventScanLimit
	MaxDiagnoseWindow      = store.MaxDiagnoseWindow
	MaxEventScanLimit      = store.MaxEventScanLimit
	MinDiagnoseWindow      = store.MinDiagnoseWindow
	DefaultNamespace       = store.DefaultNamespace
	DiagnoseTop            = store.DiagnoseTop
	FairnessQuantum        = store.FairnessQuantum
)

var (
	ErrNotFound         = store.ErrNotFound
	ErrConflict         = store.ErrConflict
	ErrFenced           = store.ErrFenced
	ErrTaskState        = store.ErrTaskState
	ErrRetryable        = store.ErrRetryable
	ErrUnsupported      = store.ErrUnsupported
	ErrDiagnosisTooSlow = store.ErrDiagnosisTooSlow
	ErrQueueFull        = store.ErrQueueFull
	CheckRateLimit      = store.CheckRateLimit
	MillisOf            = store.MillisOf
	ParseCron           = store.ParseCron
)

type (
	Listener     = store.Listener
	Notification = store.Notification
)
