package store

import (
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/cairntype"
)

// RemoveFinishedParams selects what [Store.TaskRemoveFinished] removes: up
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

// RemoveResult says what one [Store.TaskRemoveFinished] removed.
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
}

// Config is p as the namespace's settings, to validate.
func (p *NamespaceSetParams) Config() NamespaceConfig {
	return NamespaceConfig{Name: p.Namespace, Retention: p.Retention, KeyRetention: p.KeyRetention,
		TypeRetention: p.TypeRetention, Archive: p.Archive}
}

// NamespaceListParams select what [Executor.NamespaceList] lists.
type NamespaceListParams struct {
	// Namespace, when set, lists only that namespace (nothing when it has
	// neither settings nor finished tasks); "": every namespace, and the
	// [DefaultsRow].
	Namespace string
}
