package sdk

import (
	"cmp"
	"context"
	"fmt"
	"github.com/cockroachdb/errors"
	"slices"
	"strings"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// ErrQueueFull is returned (marked) by a start refused because a bounded
// queue holds its maximum of waiting tasks; errors.As finds an
// [*cairntype.QueueFullError] with the queue and a retry-after hint.
// Nothing of the start was written.
var ErrQueueFull = cairntype.ErrQueueFull

// ErrHistoryFull is returned (marked) by a signal refused because the
// task's history is at its bound (the store's HistoryLimits, as its
// driver's Config sets them: by default 50,000 events or 64 MiB of event
// data); errors.As finds a [*cairntype.HistoryFullError] saying which.
// Nothing was written.
var ErrHistoryFull = cairntype.ErrHistoryFull

// QueueSettings are a queue's limits. Zero values mean no limit.
type QueueSettings struct {
	// MaxWaiting bounds the tasks waiting (pending or retrying) in the
	// queue; a start beyond it fails with ErrQueueFull.
	MaxWaiting int
	// Concurrency bounds the queue's tasks running at once, across all
	// workers.
	Concurrency int
}

// SetQueue sets the limits of queue in the client's namespace. They take
// effect for starts and claims from then on.
func (c *Client) SetQueue(ctx context.Context, queue string, s QueueSettings) error {
	if err := validateName("queue", queue); err != nil {
		return err
	}
	return c.store.QueueSet(ctx, &store.QueueSetParams{Namespace: c.namespace, Name: queue, MaxWaiting: s.MaxWaiting, Concurrency: s.Concurrency})
}

// Queues returns the queues with settings in the client's namespace, with
// how many tasks wait and run in each.
func (c *Client) Queues(ctx context.Context) ([]cairntype.QueueInfo, error) {
	return c.store.QueueList(ctx, &store.QueueListParams{Namespace: c.namespace})
}

// QueueWaits returns, per queue and priority, how many due tasks wait and
// the run time of the one waiting longest.
func (c *Client) QueueWaits(ctx context.Context) ([]cairntype.QueueWait, error) {
	return c.store.QueueWaitList(ctx, &store.QueueWaitListParams{Namespace: c.namespace})
}

// SetRateLimit limits how many attempts of the workflow type (every
// version) start per interval in the client's namespace, across all
// workers: a token bucket of maxStarts, refilled continuously. Claims take
// no more than it holds; the rest wait.
func (c *Client) SetRateLimit(ctx context.Context, typeName string, maxStarts int, per time.Duration) error {
	if err := validateTypeName(typeName); err != nil {
		return err
	}
	return c.store.RateLimitSet(ctx, &store.RateLimitSetParams{Namespace: c.namespace, TaskType: typeName, MaxStarts: maxStarts, Per: per})
}

// RemoveRateLimit removes the workflow type's rate limit.
func (c *Client) RemoveRateLimit(ctx context.Context, typeName string) error {
	return c.store.RateLimitDelete(ctx, &store.RateLimitDeleteParams{Namespace: c.namespace, TaskType: typeName})
}

// QueueStats returns every queue of the client's namespace that has
// unfinished tasks, settings, or tasks finished within window: load now,
// throughput and failures over the window.
func (c *Client) QueueStats(ctx context.Context, window time.Duration) ([]cairntype.QueueStats, error) {
	return c.store.QueueStatsList(ctx, &store.QueueStatsListParams{Namespace: c.namespace, Window: window})
}

// NamespaceSettings are a namespace's retention settings. A zero duration
// takes the default of the process that runs the rescuer
// (WorkerConfig.DefaultRetention, DefaultKeyRetention; `cairn server
// --default-retention`).
type NamespaceSettings struct {
	// Retention is how long after it finished a task is removed, whole,
	// with its history (at least 1ms).
	Retention time.Duration
	// KeyRetention is how long after its removal a task's idempotency key
	// stays taken: a start with it meanwhile returns the removed task's id.
	KeyRetention time.Duration
	// Archive is where retention writes the namespace's histories before
	// removing them: file:///absolute/dir or s3://bucket/prefix (see
	// [CheckArchive]). Empty: the leader's default
	// ([WorkerConfig.DefaultArchive]), or none.
	Archive string
	// TypeRetention gives task types a retention of their own, in place
	// of Retention for their tasks (at least 1ms each; at most
	// [cairntype.MaxTypeRetentions] types): a type listed keeps its tasks that
	// long even when the namespace keeps its own forever.
	TypeRetention map[string]time.Duration
	// StreamTTL is how long the namespace keeps its tasks' stream entries
	// (docs/streams.md) after they were written; 0: as long as their
	// tasks. The leader's retention removes them.
	StreamTTL time.Duration
}

// SetNamespace sets the retention settings of namespace (any namespace,
// not only the client's; with [ClientConfig.Cells], any of its cell's).
// They apply from the rescuer's next pass.
func (c *Client) SetNamespace(ctx context.Context, namespace string, s NamespaceSettings) error {
	if err := validateName("namespace", namespace); err != nil {
		return err
	}
	if err := c.inCell(namespace); err != nil {
		return err
	}
	if s.Archive != "" {
		if err := CheckArchive(s.Archive); err != nil {
			return errmark.Mark(err, ErrInvalid)
		}
	}
	for typ := range s.TypeRetention {
		if err := validateTypeName(typ); err != nil {
			return errmark.Mark(errors.Wrap(err, "type retention"), ErrInvalid)
		}
	}
	p := &store.NamespaceSetParams{Namespace: namespace, Retention: s.Retention, KeyRetention: s.KeyRetention, Archive: s.Archive, TypeRetention: s.TypeRetention,
		StreamTTL: s.StreamTTL}
	if err := p.Config().Validate(); err != nil {
		return errmark.Mark(err, ErrInvalid)
	}
	return c.store.NamespaceSet(ctx, p)
}

// NamespaceConfig returns namespace's settings and oldest finished task;
// a namespace without either has only its name set.
func (c *Client) NamespaceConfig(ctx context.Context, namespace string) (cairntype.NamespaceConfig, error) {
	if err := c.inCell(namespace); err != nil {
		return cairntype.NamespaceConfig{}, err
	}
	all, err := namespacesIn(ctx, c.store, c.cell)
	if err != nil {
		return cairntype.NamespaceConfig{}, err
	}
	for _, ns := range all {
		if ns.Name == namespace {
			return ns, nil
		}
	}
	return cairntype.NamespaceConfig{Name: namespace, Cell: c.cell}, nil
}

// Namespaces returns every namespace with settings or finished tasks, by
// name, with its settings (zero: the default). With [ClientConfig.Cells]
// it lists every cell's, each with its Cell, sorted by name and cell, and
// adds the namespaces the placement map places in a cell that has
// neither yet; a namespace listed in a cell the map does not place it in
// is a leftover there. A cell that does not answer is named in the error
// ([cairntype.ErrUnavailable]), returned with the other cells' namespaces.
func (c *Client) Namespaces(ctx context.Context) ([]cairntype.NamespaceConfig, error) {
	if c.cells == nil {
		return namespacesIn(ctx, c.store, "")
	}
	return c.cells.ListNamespaces(ctx)
}

// ListNamespaces lists every cell's namespaces, as [Client.Namespaces]
// does over cells: each with its Cell, sorted by name and cell, the
// placed namespaces that have no row yet included, a cell that does not
// answer named in the error (on one line) with the others' returned.
func (c *Cells) ListNamespaces(ctx context.Context) ([]cairntype.NamespaceConfig, error) {
	var all []cairntype.NamespaceConfig
	var errs []error
	for _, cell := range c.Names() {
		in, err := namespacesIn(ctx, c.Store(cell), cell)
		if err != nil {
			errs = append(errs, errors.Wrapf(err, "cell %q", cell))
			continue
		}
		for _, ns := range c.Namespaces(cell) {
			if !slices.ContainsFunc(in, func(got cairntype.NamespaceConfig) bool { return got.Name == ns }) {
				in = append(in, cairntype.NamespaceConfig{Name: ns, Cell: cell})
			}
		}
		all = append(all, in...)
	}
	slices.SortFunc(all, func(a, b cairntype.NamespaceConfig) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Cell, b.Cell))
	})
	return all, joinCellErrors(errs)
}

// namespaceLister is what namespacesIn needs of a store: the client's own
// (its edge) or another cell's.
type namespaceLister interface {
	NamespaceList(context.Context, *store.NamespaceListParams) ([]cairntype.NamespaceConfig, error)
}

// namespacesIn lists the namespaces of one store, each with cell.
func namespacesIn(ctx context.Context, st namespaceLister, cell string) ([]cairntype.NamespaceConfig, error) {
	all, err := st.NamespaceList(ctx, &store.NamespaceListParams{})
	all = slices.DeleteFunc(all, func(ns cairntype.NamespaceConfig) bool { return ns.Name == store.DefaultsRow })
	for i := range all {
		all[i].Cell = cell
	}
	return all, err
}

// joinCellErrors is one error for the cells that failed, on one line
// (errors.Join puts each on a line of its own), each cell's error beneath
// it for errors.Is and errors.As.
func joinCellErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return cellErrors(errs)
}

// cellErrors is several cells' errors as one.
type cellErrors []error

func (e cellErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("%d cells failed: %s", len(e), strings.Join(msgs, "; "))
}

func (e cellErrors) Unwrap() []error { return e }

// inCell refuses a namespace of another cell than the client's: its
// settings live in that cell's database, which this client does not reach.
func (c *Client) inCell(namespace string) error {
	if c.cells == nil || namespace == store.DefaultsRow {
		return nil
	}
	cell, _, err := c.cells.Of(namespace)
	if err != nil {
		return errmark.Mark(err, ErrInvalid)
	}
	if cell != c.cell {
		return errmark.Mark(errors.Newf("namespace %q is in cell %q, this client's %q is in cell %q: use a client of %q",
			namespace, cell, c.namespace, c.cell, namespace), ErrInvalid)
	}
	return nil
}
