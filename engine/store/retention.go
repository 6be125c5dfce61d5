package store

import (
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
)

// RemoveFinishedParams selects what retention removes (the composite
// engine/internal/maintenance.RemoveFinished, over [Executor.Begin]): up
// to Max tasks of Namespace that finished before Before, each with its
// whole log, oldest first.
type RemoveFinishedParams struct {
	Namespace string
	Before    time.Time
	// TypeBefore, for the types it names, replaces Before: their tasks
	// go when they finished before its time (a type's own retention).
	TypeBefore map[string]time.Time
	Max        int
	// KeysUntil is how long the idempotency keys of the removed tasks stay
	// taken (retired_keys): a start with such a key until then is a
	// duplicate of the removed task. Zero: the keys are freed with their
	// tasks.
	KeysUntil time.Time
	// Only, when not nil, restricts the removal to these tasks, each at
	// the last seq given (a task that changed since is kept).
	Only map[uuid.UUID]int64
}

// TaskRemovableListParams selects the tasks [Executor.TaskRemovableList]
// lists: up to Max tasks of Namespace that finished before Before
// (completed, failed, cancelled, dead-lettered, expired), oldest first;
// never a task with a child not yet finished, nor a child whose parent has
// not finished.
type TaskRemovableListParams struct {
	// Namespace is the namespace whose tasks are listed. Required.
	Namespace string
	Before    time.Time
	// TypeBefore, for the types it names, replaces Before: their tasks
	// are listed when they finished before its time (a type's own
	// retention).
	TypeBefore map[string]time.Time
	Max        int
	// Lock locks the tasks listed until the transaction ends, skipping
	// those another transaction holds (on SQLite the write transaction is
	// the lock), and reads what [Executor.TaskRemoveMany] retires of each
	// (RemovableTask's IdempotencyKey, Type and InputDigest): the
	// removal's listing, in the [Tx] that removes them. Without it the
	// tasks are not locked and only their ids are read: what archival
	// reads before the removal.
	Lock bool
	// Only, when not nil and with Lock, restricts the listing to these
	// tasks, each at the last seq given (a task that changed since is not
	// listed).
	Only map[uuid.UUID]int64
}

// RemovableTask is a task [Executor.TaskRemovableList] listed. With
// [TaskRemovableListParams.Lock] it holds what [Executor.TaskRemoveMany]
// retires of the task; without, only its ID.
type RemovableTask struct {
	ID uuid.UUID
	// IdempotencyKey is the task's key, "" for none.
	IdempotencyKey string
	Type           string
	// InputDigest identifies the task's input for a start that reuses
	// its key after the removal (the digest retired_keys keeps); nil when
	// it has no key.
	InputDigest []byte
}

// TaskRemoveManyParams are the tasks [Executor.TaskRemoveMany] removes.
type TaskRemoveManyParams struct {
	// Namespace is the tasks' namespace. Required.
	Namespace string
	// Tasks are the tasks to remove, as TaskRemovableList listed them
	// with Lock.
	Tasks []RemovableTask
	// KeysUntil is how long the idempotency keys of the removed tasks stay
	// taken (retired_keys): a start with such a key until then is a
	// duplicate of the removed task. Zero, or a time past: the keys are
	// freed with their tasks.
	KeysUntil time.Time
}

// RetiredKeyDeleteExpiredParams bound [Executor.RetiredKeyDeleteExpired].
type RetiredKeyDeleteExpiredParams struct {
	// Max is how many retired keys past their time are dropped at most.
	Max int
}

// RemoveResult says what one removal ([Executor.TaskRemoveMany], or
// retention's transaction around it) removed.
type RemoveResult struct {
	Tasks, Events int
	// StoredBlobs are the blobs the removal took whose bytes are in a blob
	// store (Location set, no Data): their objects are the caller's to
	// delete.
	StoredBlobs []Blob
}

// DefaultsRow is the name of the namespaces row that holds the defaults
// every process shares (today the default archive, which a leader given
// one records there): not a namespace ("*" is not a valid name), and
// never listed as one by the engine's readers.
const DefaultsRow = "*"

// NamespaceConfig is [cairntype.NamespaceConfig]: the seam reads and
// writes the value users get back, under its seam name until the seam
// names cairntype itself.
type NamespaceConfig = cairntype.NamespaceConfig

// MaxTypeRetentions is [cairntype.MaxTypeRetentions].
const MaxTypeRetentions = cairntype.MaxTypeRetentions

// NamespaceSetParams are the settings [Executor.NamespaceSet] writes for
// a namespace (see [cairntype.NamespaceConfig] for each).
type NamespaceSetParams struct {
	// Namespace names the namespace (or [DefaultsRow]). Required.
	Namespace     string
	Retention     time.Duration
	KeyRetention  time.Duration
	TypeRetention map[string]time.Duration
	Archive       string
	// StreamTTL is how long the namespace keeps its tasks' stream
	// entries; 0: as long as their tasks.
	StreamTTL time.Duration
}

// Config is p as the namespace's settings, to validate.
func (p *NamespaceSetParams) Config() NamespaceConfig {
	return NamespaceConfig{Name: p.Namespace, Retention: p.Retention, KeyRetention: p.KeyRetention,
		TypeRetention: p.TypeRetention, Archive: p.Archive, StreamTTL: p.StreamTTL}
}

// NamespaceListParams select what [Executor.NamespaceList] lists.
type NamespaceListParams struct {
	// Namespace, when set, lists only that namespace (nothing when it has
	// neither settings nor finished tasks); "": every namespace, and the
	// [DefaultsRow].
	Namespace string
}
