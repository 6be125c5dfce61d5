package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/workflow"
)

// Replayer replays recorded histories against workflow definitions,
// without running a step, and reports each history the definitions would
// not replay: the check Temporal's WorkflowReplayer makes, for CI (a test
// over exported histories, [Replayer.ReplayDir]) and before a deploy
// (over the tasks in a database, [Replayer.ReplayTasks]). A worker makes
// the same check of its in-flight tasks when it starts
// ([WorkerConfig.DeployCheck]).
//
// Make one with [NewReplayer], add definitions with [RegisterReplay],
// then replay. A Replayer is safe for concurrent replays once its
// definitions are added.
type Replayer struct {
	mu    sync.Mutex
	types map[store.TypeKey]interpreter.Func
}

// NewReplayer returns a replayer without definitions.
func NewReplayer() *Replayer { return &Replayer{types: map[store.TypeKey]interpreter.Func{}} }

// RegisterReplay adds wf's definition to r, as [RegisterSafely] adds it to
// a worker: histories of wf's type and version are replayed against it.
// It refuses a type and version already added.
func RegisterReplay[In, Out any](r *Replayer, wf *Workflow[In, Out]) error {
	if wf == nil {
		return errors.New("replayer: workflow is nil")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := store.TypeKey{Type: wf.name, Version: wf.version}
	if _, dup := r.types[key]; dup {
		return errors.Newf("replayer: %s already registered", key)
	}
	r.types[key] = interpreter.Typed(wf.fn)
	return nil
}

// Types are the types and versions r has definitions of, sorted.
func (r *Replayer) Types() []store.TypeKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]store.TypeKey, 0, len(r.types))
	for k := range r.types {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b store.TypeKey) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	return out
}

func (r *Replayer) fn(key store.TypeKey) (interpreter.Func, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn, ok := r.types[key]
	return fn, ok
}

// The kinds of a [Divergence] besides an interpreter's ("step", "receive",
// "child", "end").
const (
	// DivergenceUnknownType: the replayer has no definition of the
	// history's type and version. Such a history is reported, never
	// passed in silence.
	DivergenceUnknownType = "unknown_type"
	// DivergenceError: the history could not be replayed (it does not
	// decode, or the workflow failed or panicked on its recorded data
	// where the history goes on).
	DivergenceError = "error"
)

// Divergence is a history that would not replay: where the workflow and
// its record part, or why it could not be replayed.
type Divergence struct {
	// TaskID is the task's id; for a file, its name without ".json" (the
	// task's id when written by `cairn task history ID -o json > ID.json`).
	TaskID      string         `json:"task_id"`
	Type        string         `json:"type"`
	TypeVersion int            `json:"type_version"`
	Status      history.Status `json:"status"`
	// Kind is what the history recorded where the workflow parted from it:
	// "step" (a step or sleep, Position among steps), "receive" (a receive
	// that waited, among receives), "child" (among children), "end" (a
	// completed history the workflow goes on past), or
	// [DivergenceUnknownType] and [DivergenceError].
	Kind     string `json:"kind"`
	Position int    `json:"position"`
	// Recorded is the name the history has at Position (a step's name or
	// "sleep", a signal's, a child's type); Called what the workflow
	// called there, or a description in parentheses.
	Recorded string `json:"recorded,omitempty"`
	Called   string `json:"called,omitempty"`
	// Error is the error's text.
	Error string `json:"error"`
	// Source is where the history came from: a file's path, or "" for a
	// store.
	Source string `json:"source,omitempty"`
}

// String is a one-line account of d for logs and reports.
func (d Divergence) String() string {
	where := d.TaskID
	if d.Source != "" {
		where = d.Source
	}
	if d.Kind == DivergenceUnknownType || d.Kind == DivergenceError {
		return fmt.Sprintf("%s (%s@%d, %s): %s", where, d.Type, d.TypeVersion, d.Status, d.Error)
	}
	return fmt.Sprintf("%s (%s@%d, %s): %s %d: recorded %s, called %s", where, d.Type, d.TypeVersion, d.Status, d.Kind, d.Position, d.Recorded, d.Called)
}

// ReplayResult is what a replay of many histories found.
type ReplayResult struct {
	// Replayed counts the histories replayed, those that diverged
	// included.
	Replayed int `json:"replayed"`
	// Divergences are the histories that would not replay, in the order
	// replayed.
	Divergences []Divergence `json:"divergences"`
}

// OK reports whether every history replayed.
func (r ReplayResult) OK() bool { return len(r.Divergences) == 0 }

// Err is nil when every history replayed, else an error listing the
// divergences (at most 20, and how many more), marked
// [workflow.ErrNondeterministic].
func (r ReplayResult) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d histories would not replay:", len(r.Divergences), r.Replayed)
	for i, d := range r.Divergences {
		if i == 20 {
			fmt.Fprintf(&b, "\n  … and %d more", len(r.Divergences)-i)
			break
		}
		b.WriteString("\n  " + d.String())
	}
	return errmark.Mark(errors.Newf("%s", b.String()), workflow.ErrNondeterministic)
}

func (r *ReplayResult) add(d *Divergence) {
	r.Replayed++
	if d != nil {
		r.Divergences = append(r.Divergences, *d)
	}
}

// ReplayHistory replays one history, the task taskID's (for reports; it
// may be ""), and returns how it diverges, or nil when it replays. Its
// payloads must be readable as the workflow reads them: a store's history
// read through a [Client] ([Client.History]) is; a raw one
// ([Client.RawHistory]) with outputs kept by reference or encrypted is
// reported as an error.
func (r *Replayer) ReplayHistory(ctx context.Context, taskID string, events []history.Event) *Divergence {
	state, err := history.Replay(events)
	if err != nil {
		d := &Divergence{TaskID: taskID, Kind: DivergenceError, Error: err.Error()}
		if len(events) > 0 {
			if s, ok := events[0].Data.(history.TaskScheduledData); ok {
				d.Type, d.TypeVersion = s.TaskType, s.TypeVersion
			}
		}
		return d
	}
	return r.replayState(ctx, taskID, state)
}

// replayState replays a task in state s.
func (r *Replayer) replayState(ctx context.Context, taskID string, s history.State) *Divergence {
	d := &Divergence{TaskID: taskID, Type: s.Scheduled.TaskType, TypeVersion: s.Scheduled.TypeVersion, Status: s.Status}
	fn, ok := r.fn(store.TypeKey{Type: d.Type, Version: d.TypeVersion})
	if !ok {
		d.Kind, d.Error = DivergenceUnknownType, fmt.Sprintf("the replayer has no definition of %s@%d", d.Type, d.TypeVersion)
		return d
	}
	nd, err := interpreter.Replay(ctx, taskID, s, fn)
	switch {
	case nd != nil:
		d.Kind, d.Position, d.Recorded, d.Called, d.Error = nd.Kind, nd.Position, nd.Recorded, nd.Called, nd.Error()
		return d
	case err != nil:
		d.Kind, d.Error = DivergenceError, err.Error()
		return d
	}
	return nil
}

// ReplayFile replays the history in the file at path, in the form
// `cairn task history ID -o json` writes (a JSON array of events, as
// [history.Event]'s MarshalJSON writes them). The task's id in reports is
// the file's name without ".json".
func (r *Replayer) ReplayFile(ctx context.Context, path string) (ReplayResult, error) {
	var res ReplayResult
	d, err := r.replayFile(ctx, path)
	if err != nil {
		return res, err
	}
	res.add(d)
	return res, nil
}

// MaxReplayFileBytes bounds a history file [Replayer.ReplayFile] and
// [Replayer.ReplayDir] read: 256 MiB, more than a history at the default
// bound of events holds.
const MaxReplayFileBytes = 256 << 20

func (r *Replayer) replayFile(ctx context.Context, path string) (*Divergence, error) {
	id := strings.TrimSuffix(filepath.Base(path), ".json")
	info, err := os.Stat(path)
	if err != nil {
		return nil, errors.Wrap(err, "replay")
	}
	if info.Size() > MaxReplayFileBytes {
		return nil, errors.Newf("replay %s: %d bytes is over the bound of %d", path, info.Size(), MaxReplayFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Wrap(err, "replay")
	}
	var events []history.Event
	var d *Divergence
	if err := json.Unmarshal(b, &events); err != nil {
		d = &Divergence{TaskID: id, Kind: DivergenceError, Error: fmt.Sprintf("not a history written by `cairn task history -o json`: %v", err)}
	} else {
		d = r.ReplayHistory(ctx, id, events)
	}
	if d != nil {
		d.Source = path
	}
	return d, nil
}

// ReplayDir replays every history file (*.json) in dir, not its
// subfolders, in name order: a folder of `cairn task history ID -o json`
// exports.
func (r *Replayer) ReplayDir(ctx context.Context, dir string) (ReplayResult, error) {
	var res ReplayResult
	entries, err := os.ReadDir(dir)
	if err != nil {
		return res, errors.Wrap(err, "replay")
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		d, err := r.replayFile(ctx, filepath.Join(dir, name))
		if err != nil {
			return res, err
		}
		res.add(d)
	}
	return res, nil
}

// ReplayTasksOpts select the tasks [Replayer.ReplayTasks] replays; nil
// takes every default.
type ReplayTasksOpts struct {
	// Type, when set, replays tasks of this type only; Version, with it,
	// of this version only. Default: every type the replayer has a
	// definition of, each at its versions (tasks of other types are not
	// read).
	Type    string
	Version int
	// Statuses, when set, replays tasks in these statuses only. Default
	// every status.
	Statuses []history.Status
	// Limit bounds how many tasks are replayed, newest first, per type
	// (each type of the replayer's, or Type). Default 1,000; at most
	// [MaxReplayTasks].
	Limit int
}

// MaxReplayTasks bounds [ReplayTasksOpts.Limit] and
// [DeployCheckConfig.Sample]: 100,000 tasks per type.
const MaxReplayTasks = 100_000

// ReplayTasks replays the histories of tasks in c's namespace, read from
// its store (histories read back as [Client.History] reads them, archived
// ones included once removed): one replay per task, reported as
// [Replayer.ReplayHistory] reports it.
func (r *Replayer) ReplayTasks(ctx context.Context, c *Client, opts *ReplayTasksOpts) (ReplayResult, error) {
	o := orZero(opts)
	var res ReplayResult
	switch {
	case o.Limit < 0 || o.Limit > MaxReplayTasks:
		return res, errmark.Mark(errors.Newf("replay: limit %d is outside 1..%d (0: 1,000)", o.Limit, MaxReplayTasks), ErrInvalid)
	case o.Limit == 0:
		o.Limit = 1000
	case o.Version < 0:
		return res, errmark.Mark(errors.Newf("replay: version %d is negative", o.Version), ErrInvalid)
	}
	for _, st := range o.Statuses {
		if !slices.Contains(allStatuses, st) {
			return res, errmark.Mark(errors.Newf("replay: status %q is not one of %v", st, allStatuses), ErrInvalid)
		}
	}
	var names []string
	if o.Type != "" {
		names = []string{o.Type}
	} else {
		for _, k := range r.Types() {
			if !slices.Contains(names, k.Type) {
				names = append(names, k.Type)
			}
		}
	}
	for _, name := range names {
		ids, err := c.tasksWhere(ctx, name, o.Version, o.Statuses, o.Limit, 0, nil)
		if err != nil {
			return res, err
		}
		for _, t := range ids {
			d, err := r.replayTask(ctx, c, t)
			if err != nil {
				return res, err
			}
			res.add(d)
		}
	}
	return res, nil
}

var allStatuses = []history.Status{history.StatusPending, history.StatusRunning, history.StatusRetrying, history.StatusCompleted,
	history.StatusFailed, history.StatusCancelled, history.StatusDeadLettered, history.StatusExpired, history.StatusContinued}

// replayTask replays one listed task. A task removed since it was listed
// (and not archived) is not counted.
func (r *Replayer) replayTask(ctx context.Context, c *Client, t *TaskInfo) (*Divergence, error) {
	events, err := c.History(ctx, t.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		return &Divergence{TaskID: t.ID.String(), Type: t.Type, TypeVersion: t.TypeVersion, Status: t.Status,
			Kind: DivergenceError, Error: "read history: " + err.Error()}, nil
	}
	return r.ReplayHistory(ctx, t.ID.String(), events), nil
}

// tasksWhere lists up to limit tasks of type name (at version, when not
// 0) in the given statuses (all when none) that keep accepts (all when
// nil), newest first in each status, reading at most about maxScan tasks
// of each status (0: no bound; a page past it is read whole).
func (c *Client) tasksWhere(ctx context.Context, name string, version int, statuses []history.Status, limit, maxScan int, keep func(*TaskInfo) bool) ([]*TaskInfo, error) {
	if len(statuses) == 0 {
		statuses = []history.Status{""}
	}
	var out []*TaskInfo
	for _, st := range statuses {
		var before uuid.UUID
		for scanned := 0; len(out) < limit && (maxScan == 0 || scanned < maxScan); {
			page, err := c.ListPage(ctx, &ListOpts{Type: name, Status: st, Before: before, Limit: MaxListLimit})
			if err != nil {
				return nil, err
			}
			scanned += len(page.Tasks)
			for _, t := range page.Tasks {
				if (version == 0 || t.TypeVersion == version) && (keep == nil || keep(t)) && len(out) < limit {
					out = append(out, t)
				}
			}
			if page.Next == uuid.Nil {
				break
			}
			before = page.Next
		}
	}
	return out, nil
}

// ExportHistory writes task id's history to w as `cairn task history ID
// -o json` prints it (it is that command's code): a JSON array of events
// in [history.Event]'s JSON form, references (blobs) left as stored, as
// [Client.RawHistory] reads them. Save it as ID.json for
// [Replayer.ReplayFile] and [Replayer.ReplayDir].
func (c *Client) ExportHistory(ctx context.Context, id uuid.UUID, w io.Writer) error {
	events, err := c.RawHistory(ctx, id)
	if err != nil {
		return err
	}
	if events == nil {
		events = []history.Event{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(events)
}

// ReplayArchiveOpts select the archived histories [Replayer.ReplayArchive]
// replays; nil takes every default.
type ReplayArchiveOpts struct {
	// Type, when set, replays tasks of this type only (Version, with it,
	// of this version only).
	Type    string
	Version int
	// Limit bounds how many archived tasks are replayed, in the order the
	// archive holds them (by the hour they were created). Default 1,000;
	// at most [MaxReplayTasks].
	Limit int
}

// ReplayArchive replays the histories retention archived from c's
// namespace (its archive and the client's DefaultArchive, as
// [Client.History] reads them once a task is removed): finished tasks,
// each replayed as [Replayer.ReplayHistory] does, the fullest copy of a
// task archived twice.
func (r *Replayer) ReplayArchive(ctx context.Context, c *Client, opts *ReplayArchiveOpts) (ReplayResult, error) {
	o := orZero(opts)
	var res ReplayResult
	switch {
	case o.Limit < 0 || o.Limit > MaxReplayTasks:
		return res, errmark.Mark(errors.Newf("replay archive: limit %d is outside 1..%d (0: 1,000)", o.Limit, MaxReplayTasks), ErrInvalid)
	case o.Limit == 0:
		o.Limit = 1000
	}
	locations, err := c.archiveLocations(ctx)
	if err != nil {
		return res, errors.Wrap(err, "replay archive")
	}
	fullest := map[uuid.UUID]engine.ArchivedTask{}
	var order []uuid.UUID
	errFull := errors.New("limit reached")
	for _, location := range locations {
		err := c.archives.Scan(ctx, location, c.namespace, time.Time{}, func(t engine.ArchivedTask) error {
			if len(t.Events) == 0 {
				return nil
			}
			if s, ok := t.Events[0].Data.(history.TaskScheduledData); ok &&
				(o.Type != "" && s.TaskType != o.Type || o.Version != 0 && s.TypeVersion != o.Version) {
				return nil
			}
			prev, seen := fullest[t.TaskID]
			if !seen {
				if len(order) == o.Limit {
					return errFull
				}
				order = append(order, t.TaskID)
			}
			if !seen || len(t.Events) > len(prev.Events) {
				fullest[t.TaskID] = t
			}
			return nil
		})
		if err != nil && !errors.Is(err, errFull) {
			return res, errors.Wrap(err, "replay archive")
		}
	}
	for _, id := range order {
		t := fullest[id]
		events, err := c.decodeEvents(ctx, id, t.Events, archivedOf(t), false)
		if err != nil {
			res.add(&Divergence{TaskID: id.String(), Kind: DivergenceError, Error: "read archived history: " + err.Error()})
			continue
		}
		res.add(r.ReplayHistory(ctx, id.String(), events))
	}
	return res, nil
}
