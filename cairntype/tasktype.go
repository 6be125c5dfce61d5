package cairntype

import "time"

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
}
