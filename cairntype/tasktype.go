package cairntype

import (
	"encoding/json"
	"time"
)

// TaskType is a task type at one version that a worker has registered in a
// namespace, with the defaults its definition gives: what a producer that
// does not link the workflow code (the HTTP API) may start, and how.
type TaskType struct {
	Namespace       string        `json:"namespace"`
	Type            string        `json:"type"`
	Version         int           `json:"version"`
	Queue           string        `json:"queue"`
	MaxAttempts     int           `json:"max_attempts"`                // 0: history.DefaultMaxAttempts
	ScheduleToClose time.Duration `json:"schedule_to_close,omitempty"` // 0: none
	RegisteredBy    string        `json:"registered_by"`
	RegisteredAt    time.Time     `json:"registered_at"`
	// Signals are the signals the type declares it receives, each name
	// with the JSON Schema of its payload (sdk.WorkflowOpts.Signals): a
	// signal of another name, or whose payload the schema refuses, is
	// refused when sent. Nil: the type declares none, and takes any
	// signal; empty but not nil: it takes none.
	Signals map[string]json.RawMessage `json:"signals"`
}
