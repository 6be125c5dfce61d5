package store

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
)

// StrandedTask is a worker's deploy-check finding (sdk.WorkerConfig's
// DeployCheck): an in-flight task its code cannot replay, and where the
// code parts from the history.
type StrandedTask struct {
	Namespace string
	Type      string
	Version   int
	TaskID    uuid.UUID
	// WorkerID is the worker that found it.
	WorkerID string
	// Kind, Position, Recorded and Called say where the code parts from
	// the history (sdk.Divergence's fields); Error is the full message.
	Kind     string
	Position int
	Recorded string
	Called   string
	Error    string
	FoundAt  time.Time // set by the store
	// Status and RunAt are the task's now, read by [Store.StrandedList]
	// (which lists tasks not finished only): how long it has waited.
	Status history.Status
	RunAt  time.Time
	Queue  string
}

// MaxStrandedFindings bounds the findings of one replace: 10,000, as
// many as a worker's claims can leave ([MaxClaimExclude]).
const MaxStrandedFindings = MaxClaimExclude

// StrandedReplaceParams replaces what one worker found of one type and
// version ([Store.StrandedReplace]): its earlier findings go, Tasks are
// recorded (none: the worker found none).
type StrandedReplaceParams struct {
	Namespace, Type string
	Version         int
	WorkerID        string
	// Tasks are the findings; their Namespace, Type, Version and WorkerID
	// are the params'. At most [MaxStrandedFindings].
	Tasks []StrandedTask
}

// Validate checks the parameters: what every store does first.
func (p *StrandedReplaceParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "" || p.Type == "" || p.WorkerID == "":
		return errors.New("replace stranded tasks: namespace, type and worker are required")
	case p.Version < 1:
		return errors.Newf("replace stranded tasks of %s: version %d must be at least 1", p.Type, p.Version)
	case len(p.Tasks) > MaxStrandedFindings:
		return errors.Newf("replace stranded tasks of %s@%d: %d findings, more than %d", p.Type, p.Version, len(p.Tasks), MaxStrandedFindings)
	}
	seen := make(map[uuid.UUID]bool, len(p.Tasks))
	for _, t := range p.Tasks {
		if t.TaskID == uuid.Nil {
			return errors.New("replace stranded tasks: a finding has no task id")
		}
		if seen[t.TaskID] {
			return errors.Newf("replace stranded tasks: task %s found twice", t.TaskID)
		}
		seen[t.TaskID] = true
		for _, s := range []string{t.Kind, t.Recorded, t.Called, t.Error} {
			if !validText(s) {
				return errors.Newf("replace stranded tasks: task %s: a field is not valid UTF-8 text without NUL characters", t.TaskID)
			}
		}
	}
	return nil
}

// MaxStrandedList bounds [StrandedListParams.Limit]: 1,000 findings.
const MaxStrandedList = 1000

// StrandedListParams lists the findings of a namespace's tasks not
// finished yet ([Store.StrandedList]), oldest found first.
type StrandedListParams struct {
	Namespace string
	Type      string // "": every type
	Queue     string // "": every queue
	// Limit bounds the rows: 1 to [MaxStrandedList]; 0 is 100.
	Limit int
}

// Validate checks the parameters: what every store does first.
func (p *StrandedListParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("list stranded tasks: namespace is required")
	case p.Limit < 0 || p.Limit > MaxStrandedList:
		return errors.Newf("list stranded tasks: limit %d is outside 1..%d (0: 100)", p.Limit, MaxStrandedList)
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	return nil
}

// validText reports whether s is UTF-8 without NUL: what both stores'
// text columns hold alike (PostgreSQL refuses NUL).
func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
