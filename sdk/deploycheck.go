package sdk

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
)

// DeployPolicy is what a worker does with in-flight tasks its code cannot
// replay (see [DeployCheckConfig]).
type DeployPolicy string

const (
	// DeploySkip runs the rest and never claims the stranded tasks: they
	// are left for a worker whose code replays them (the previous
	// release, still running, or a fixed one). A task this worker finds
	// non-deterministic while running it is released (task_released), not
	// dead-lettered, and not claimed again by this worker. The default.
	DeploySkip DeployPolicy = "skip"
	// DeployRefuse makes [Worker.Start] (and Run) fail with an error
	// marked [ErrStranded] naming the tasks, before anything is claimed.
	DeployRefuse DeployPolicy = "refuse"
	// DeployIgnore logs the stranded tasks and goes on: they are claimed,
	// fail as non-deterministic and are dead-lettered, as without a check.
	DeployIgnore DeployPolicy = "ignore"
	// DeployOff makes no check.
	DeployOff DeployPolicy = "off"
)

// DefaultDeployCheckSample is [DeployCheckConfig.Sample]'s default: the
// newest 1,000 in-flight tasks of each registered type and version.
const DefaultDeployCheckSample = 1000

// DeployCheckConfig configures the check a worker makes when it starts,
// before it claims anything: it replays the in-flight tasks of its
// registered types (pending, running or retrying, with an attempt
// started) against the code it carries, as a [Replayer] does, and
// reports those that would not replay ("stranded": their next attempt
// would fail as non-deterministic). Each is logged (task id, type,
// version, position, recorded and called), counted in the gauge
// cairn_stranded_tasks{namespace, type, version} of
// [WorkerConfig.Metrics], and handled as Policy says.
//
// The zero value checks up to 1,000 tasks per type and version and skips
// the stranded ones: a deploy with an incompatible change then neither
// fails the tasks in flight (as ignoring would, dead-lettering them) nor
// stops the deploy (as refusing would); the old release, or a fixed one,
// finishes them.
type DeployCheckConfig struct {
	// Sample is how many in-flight tasks per type and version are
	// replayed, newest first. Default [DefaultDeployCheckSample]; at most
	// [MaxReplayTasks] (100,000): a start replays that many histories
	// (see docs/replay.md for the cost).
	Sample int
	// Policy is what to do with stranded tasks. Default [DeploySkip].
	Policy DeployPolicy
}

// ErrStranded marks the error of a worker that refused to start
// ([DeployRefuse]) because in-flight tasks would not replay.
var ErrStranded = errors.New("in-flight tasks would not replay on this worker's code")

// StrandedTask is an in-flight task a worker's deploy check found its
// code cannot replay.
type StrandedTask struct {
	Namespace string `json:"namespace"`
	Divergence
	// WorkerID, FoundAt and RunAt are set in [Client.StrandedTasks]'
	// listing: the worker that found the task, when, and the task's run
	// time (since when it has been due, once past).
	WorkerID string    `json:"worker_id,omitempty"`
	FoundAt  time.Time `json:"found_at,omitzero"`
	RunAt    time.Time `json:"run_at,omitzero"`
}

// StrandedOpts filter [Client.StrandedTasks]; nil lists every type's.
type StrandedOpts struct {
	Type  string
	Limit int // default 100, at most 1,000
}

// StrandedTasks lists what workers' deploy checks found in the client's
// namespace (see [DeployCheckConfig]): in-flight tasks some worker's code
// cannot replay, with where the code parts from the history, oldest found
// first. Tasks that finished since are left out. A task found by several
// workers is listed once per worker.
func (c *Client) StrandedTasks(ctx context.Context, opts *StrandedOpts) ([]StrandedTask, error) {
	o := orZero(opts)
	rows, err := c.store.StrandedList(ctx, &store.StrandedListParams{Namespace: c.namespace, Type: o.Type, Limit: o.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]StrandedTask, len(rows))
	for i, r := range rows {
		out[i] = StrandedTask{Namespace: r.Namespace, WorkerID: r.WorkerID, FoundAt: r.FoundAt, RunAt: r.RunAt,
			Divergence: Divergence{TaskID: r.TaskID.String(), Type: r.Type, TypeVersion: r.Version, Status: r.Status,
				Kind: r.Kind, Position: r.Position, Recorded: r.Recorded, Called: r.Called, Error: r.Error}}
	}
	return out, nil
}

func (c *DeployCheckConfig) validate() error {
	switch c.Policy {
	case "":
		c.Policy = DeploySkip
	case DeploySkip, DeployRefuse, DeployIgnore, DeployOff:
	default:
		return errors.Newf("worker: DeployCheck.Policy %q is not one of skip, refuse, ignore, off", c.Policy)
	}
	switch {
	case c.Sample < 0 || c.Sample > MaxReplayTasks:
		return errors.Newf("worker: DeployCheck.Sample %d is outside 1..%d (0: %d)", c.Sample, MaxReplayTasks, DefaultDeployCheckSample)
	case c.Sample == 0:
		c.Sample = DefaultDeployCheckSample
	}
	return nil
}

// strandSet is the tasks a worker's claims leave (the skip policy), read
// by every claim: a copy-on-write slice, so a claim reads it without a
// lock held for long.
type strandSet struct {
	mu  sync.Mutex
	ids []uuid.UUID // never written in place: replaced
	set map[uuid.UUID]bool
}

// add adds id unless the set is full (store.MaxClaimExclude); ok says
// whether it is in the set now.
func (s *strandSet) add(id uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set[id] {
		return true
	}
	if len(s.ids) >= store.MaxClaimExclude {
		return false
	}
	if s.set == nil {
		s.set = map[uuid.UUID]bool{}
	}
	s.set[id] = true
	s.ids = append(slices.Clip(s.ids), id)
	return true
}

func (s *strandSet) list() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids
}

// Stranded returns what the worker's deploy check found at its last
// Start: the in-flight tasks its code cannot replay.
func (w *Worker) Stranded() []StrandedTask {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.stranded)
}

// deployCheck replays the in-flight tasks of the worker's types in every
// cell and namespace, and returns what would not replay; under the
// refuse policy, an error naming them.
func (w *Worker) deployCheck(ctx context.Context) ([]StrandedTask, error) {
	cfg := w.cfg.DeployCheck
	w.checkedAt = time.Now()
	if cfg.Policy == DeployOff {
		return nil, nil
	}
	r := NewReplayer()
	for k, reg := range w.types {
		r.types[k] = reg.fn
	}
	keys := r.Types()
	var stranded []StrandedTask
	for _, c := range w.cells {
		found, err := w.checkCell(ctx, r, c, keys, cfg.Sample)
		if err != nil {
			if ctx.Err() != nil {
				return nil, errors.Wrap(err, "worker: deploy check")
			}
			// A store out of reach holds up nothing: the check of its
			// namespaces is left out, and the runtime still fails (or,
			// under skip, releases) what turns out non-deterministic.
			w.cellLogger(c).Warn("worker: deploy check: could not read the in-flight tasks; they are not checked",
				"namespaces", c.namespaces, "error", err)
		}
		stranded = append(stranded, found...)
	}
	for _, s := range stranded {
		w.cfg.Logger.Warn("worker: deploy check: task would not replay on this code",
			"task_id", s.TaskID, "namespace", s.Namespace, "type", s.Type, "version", s.TypeVersion, "status", s.Status,
			"kind", s.Kind, "position", s.Position, "recorded", s.Recorded, "called", s.Called, "policy", cfg.Policy)
	}
	if len(stranded) > 0 && cfg.Policy == DeployRefuse {
		return stranded, errmark.Mark(strandedError(stranded), ErrStranded)
	}
	return stranded, nil
}

// deployCheckCellTimeout bounds the deploy check of one cell's store when
// the worker runs in cells, so a cell out of reach delays the start by at
// most this.
const deployCheckCellTimeout = 30 * time.Second

// checkCell checks the worker's types in every namespace of cell c,
// returning what it found before an error.
func (w *Worker) checkCell(ctx context.Context, r *Replayer, c *workerCell, keys []store.TypeKey, sample int) ([]StrandedTask, error) {
	if w.cfg.Cells != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deployCheckCellTimeout)
		defer cancel()
	}
	var stranded []StrandedTask
	for _, ns := range c.namespaces {
		client := w.checkClient(c, ns)
		for _, k := range keys {
			found, err := w.checkType(ctx, r, client, ns, k, sample)
			if err != nil {
				return stranded, errors.Wrapf(err, "%s in namespace %q", k, ns)
			}
			w.cfg.Metrics.Stranded(ns, k.Type, k.Version, len(found))
			w.recordStranded(ctx, c, ns, k, found)
			stranded = append(stranded, found...)
		}
	}
	return stranded, nil
}

// strandedError names the stranded tasks, 100 at most.
func strandedError(stranded []StrandedTask) error {
	var b strings.Builder
	fmt.Fprintf(&b, "worker: refusing to start (DeployCheck.Policy refuse): %d in-flight tasks would not replay on this code:", len(stranded))
	for i, s := range stranded {
		if i == 100 {
			fmt.Fprintf(&b, "\n  … and %d more", len(stranded)-i)
			break
		}
		b.WriteString("\n  " + s.String())
	}
	return errors.WithHint(errors.Newf("%s", b.String()),
		"keep the old definition registered for these tasks (a new version for new tasks), or use workflow.Patched; see docs/replay.md")
}

// deployCheckScan bounds the rows the deploy check reads per type and
// status, as a multiple of its sample: the pending tasks not yet started
// (a backlog, which has nothing to replay) are read only to be skipped,
// and a worker's start must not cost what the backlog holds (a check of
// a 100,000-task backlog cost a drain 8 %). A started task deeper than
// that, newest first, is not checked before the start; the runtime
// still meets it under the policy (skip: released, not failed).
const deployCheckScan = 10

// checkType replays up to sample in-flight tasks of k in namespace ns,
// reading at most deployCheckScan × sample tasks of each status.
func (w *Worker) checkType(ctx context.Context, r *Replayer, c *Client, ns string, k store.TypeKey, sample int) ([]StrandedTask, error) {
	inFlight := []history.Status{history.StatusRunning, history.StatusRetrying, history.StatusPending}
	tasks, err := c.tasksWhere(ctx, k.Type, k.Version, inFlight, sample, deployCheckScan*sample,
		func(t *TaskInfo) bool { return t.Attempt > 0 })
	if err != nil {
		return nil, err
	}
	var out []StrandedTask
	for _, t := range tasks {
		d, err := r.replayTask(ctx, c, t)
		if err != nil {
			return nil, err
		}
		switch {
		case d == nil:
		case d.Kind == DivergenceError:
			// Not a question of the code: a history this worker cannot
			// read (no keys, a blob gone). Its attempt will say so.
			w.cfg.Logger.Warn("worker: deploy check: task could not be replayed", "task_id", d.TaskID, "type", d.Type,
				"version", d.TypeVersion, "error", d.Error)
		default:
			out = append(out, StrandedTask{Namespace: ns, Divergence: *d})
		}
	}
	return out, nil
}

// recordStranded replaces the worker's findings of k in the store, for
// the console and `cairn queue diagnose`; a failure is logged, not fatal:
// the findings are also in the log and the metric.
func (w *Worker) recordStranded(ctx context.Context, c *workerCell, ns string, k store.TypeKey, found []StrandedTask) {
	p := &store.StrandedReplaceParams{Namespace: ns, Type: k.Type, Version: k.Version, WorkerID: w.cfg.WorkerID}
	for _, s := range found[:min(len(found), store.MaxStrandedFindings)] {
		id, err := uuid.Parse(s.TaskID)
		if err != nil {
			continue
		}
		p.Tasks = append(p.Tasks, store.StrandedTask{TaskID: id, Kind: s.Kind, Position: s.Position,
			Recorded: storableText(s.Recorded), Called: storableText(s.Called), Error: storableText(s.Error)})
	}
	if err := c.store.Engine().StrandedReplace(ctx, p); err != nil {
		w.cfg.Logger.Warn("worker: deploy check: could not record the findings", "namespace", ns, "type", k.Type,
			"version", k.Version, "error", err)
	}
}

// storableText is s as both stores keep text: valid UTF-8 without NUL.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\\0")
}

// checkClient is a client of namespace ns over the cell's store, as the
// worker's payload stage reads it, for the deploy check's reads.
func (w *Worker) checkClient(c *workerCell, ns string) *Client {
	return &Client{store: c.store, keys: w.cfg.Keys, namespace: ns, identity: w.cfg.WorkerID,
		filterLimits: FilterLimits{}.withDefaults(), maxPayload: w.cfg.MaxPayloadBytes, archives: &Archives{},
		metrics: w.cfg.Metrics}
}

// strand is the handler's question about a task found non-deterministic
// at run time: under the skip policy, a task in flight before the worker
// started (its first attempt began earlier: recorded, at least in part,
// by other code) is released and excluded from this worker's claims from
// then on. A task the worker's own code began and cannot replay is a bug
// in that code: it fails as without the check.
func (w *Worker) strand(id uuid.UUID, k store.TypeKey, firstStarted time.Time, err error) bool {
	if w.cfg.DeployCheck.Policy != DeploySkip || !firstStarted.Before(w.checkedAt) {
		return false
	}
	if !w.excluded.add(id) {
		w.cfg.Logger.Error("worker: task would not replay, and this worker excludes the most it can; it fails",
			"task_id", id, "type", k.Type, "version", k.Version, "max", store.MaxClaimExclude)
		return false
	}
	var nd *interpreter.NondeterminismError
	errors.As(err, &nd)
	attrs := []any{"task_id", id, "type", k.Type, "version", k.Version, "error", err}
	if nd != nil {
		attrs = append(attrs, "kind", nd.Kind, "position", nd.Position, "recorded", nd.Recorded, "called", nd.Called)
	}
	w.cfg.Logger.Warn("worker: task would not replay on this code: released for a compatible worker, and no longer claimed here", attrs...)
	return true
}
