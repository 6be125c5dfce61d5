package store

import "time"

// RemoveFinishedParams selects what [Store.TaskRemoveFinished] removes: up
// to Max tasks of Namespace that finished before Before, each with its
// whole log, oldest first.
type RemoveFinishedParams struct {
	Namespace string
	Before    time.Time
	Max       int
	// KeysUntil is how long the idempotency keys of the removed tasks stay
	// taken (retired_keys): a start with such a key until then is a
	// duplicate of the removed task. Zero: the keys are freed with their
	// tasks.
	KeysUntil time.Time
}

// RemoveResult says what one [Store.TaskRemoveFinished] removed.
type RemoveResult struct {
	Tasks, Events int
}
