package maintenance_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/internal/metrics"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// firingCounter is a store that counts the leader's firings of schedules
// (each lists the due schedules once, in its transaction) and the skips
// they record.
type firingCounter struct {
	store.Store
	calls, skips atomic.Int64
}

func (c *firingCounter) Begin(ctx context.Context) (store.Tx, error) {
	tx, err := c.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, c: c}, nil
}

// countingTx is a transaction of a firingCounter, and its nested ones.
type countingTx struct {
	store.Tx
	c *firingCounter
}

func (t *countingTx) Begin(ctx context.Context) (store.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, c: t.c}, nil
}

func (t *countingTx) ScheduleListDue(ctx context.Context, p *store.ScheduleListDueParams) ([]store.Schedule, error) {
	t.c.calls.Add(1)
	return t.Tx.ScheduleListDue(ctx, p)
}

func (t *countingTx) ScheduleMarkSkipped(ctx context.Context, p *store.ScheduleMarkSkippedParams) error {
	err := t.Tx.ScheduleMarkSkipped(ctx, p)
	if err == nil {
		t.c.skips.Add(1)
	}
	return err
}

// logRecorder keeps the messages logged at each level, and passes them on.
type logRecorder struct {
	slog.Handler
	mu       *sync.Mutex
	messages map[slog.Level][]string
}

func newLogRecorder(t *testing.T) *logRecorder {
	return &logRecorder{Handler: enginetest.Logger(t).Handler(), mu: new(sync.Mutex), messages: map[slog.Level][]string{}}
}

func (l *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	l.mu.Lock()
	l.messages[r.Level] = append(l.messages[r.Level], r.Message)
	l.mu.Unlock()
	return l.Handler.Handle(ctx, r)
}

func (l *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRecorder{Handler: l.Handler.WithAttrs(attrs), mu: l.mu, messages: l.messages}
}

// count returns how many messages at level contain text.
func (l *logRecorder) count(level slog.Level, text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.messages[level] {
		if strings.Contains(m, text) {
			n++
		}
	}
	return n
}

// One schedule whose queue is full does not stop another: the healthy one
// fires at each tick, the full one is skipped (one warning, however many
// ticks; each counted in cairn_schedule_skipped_total), the leader fires
// about once per tick rather than spinning, and the full schedule fires
// again (one info line) once the queue has room.
func TestFullQueueScheduleDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, reg := metricsStore(t)
	s := &firingCounter{Store: pg}
	require.NoError(t, s.QueueSet(ctx, &store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "full", MaxWaiting: 1}))
	filler := enginetest.StartTask(t, s, &enginetest.TaskOpts{Queue: "full"})
	for _, sc := range []*store.ScheduleCreateParams{
		{Namespace: store.DefaultNamespace, Name: "blocked", Cron: "@every 1s", TaskType: "test", TypeVersion: 1, Queue: "full", Input: json.RawMessage(`{}`)},
		{Namespace: store.DefaultNamespace, Name: "healthy", Cron: "@every 1s", TaskType: "test", TypeVersion: 1, Queue: "reports", Input: json.RawMessage(`{}`)},
	} {
		require.NoError(t, s.ScheduleCreate(ctx, sc))
	}

	logs := newLogRecorder(t)
	// An hour between passes: every firing below is the leader's wait for
	// the next schedule tick.
	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "leader", Interval: time.Hour, Logger: slog.New(logs)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)

	const ticks = 3
	tasksIn := func(queue string) int {
		tasks, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Queue: queue})
		require.NoError(t, err)
		return len(tasks)
	}
	enginetest.WaitFor(t, "the healthy schedule to fire while the other's queue is full", func() bool {
		return tasksIn("reports") >= ticks && s.skips.Load() >= ticks
	})
	require.Equal(t, 1, tasksIn("full"), "nothing started into the full queue")
	require.Equal(t, 1, logs.count(slog.LevelWarn, "schedule skipped"), "one warning when skipping starts, not one per tick")
	require.Zero(t, logs.count(slog.LevelWarn, "fire cron schedules"), "a full queue is no failure")

	// Room in the queue: the blocked schedule fires again, logged once.
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: store.DefaultNamespace, Queues: []string{"full"},
		Types: []store.TypeKey{{Type: "test", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, filler, claimed[0].Task.ID)
	enginetest.WaitFor(t, "the blocked schedule to fire once its queue has room", func() bool { return tasksIn("full") == 2 })
	r.Stop()

	require.Equal(t, 1, logs.count(slog.LevelInfo, "schedule fired again"))
	require.Equal(t, 1, logs.count(slog.LevelWarn, "schedule skipped"))
	// Both schedules tick together each second; a firing or two more per
	// tick is allowed for a timer that woke a moment before the
	// database's clock reached the tick. Spinning made a hundred a second.
	healthyTicks := tasksIn("reports")
	t.Logf("%d firings for %d ticks", s.calls.Load(), healthyTicks)
	require.LessOrEqual(t, s.calls.Load(), int64(3*healthyTicks+3), "the leader fired %d times for %d ticks", s.calls.Load(), healthyTicks)

	g := enginetest.Gather(t, reg)
	require.Equal(t, float64(s.skips.Load()),
		g.Value("cairn_schedule_skipped_total", "namespace", store.DefaultNamespace, "schedule", "blocked", "reason", store.ScheduleSkipQueueFull))
	require.Zero(t, g.Value("cairn_schedule_skipped_total", "schedule", "healthy"))
}

// metricsStore returns a store over a fresh schema that counts into a
// fresh registry.
func metricsStore(t *testing.T) (*pgstore.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Opts{})
	require.NoError(t, err)
	s, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t), Metrics: m})
	require.NoError(t, err)
	return s, reg
}

// A schedule another firer holds (listed due in its transaction, not yet
// committed) is skipped, not fired twice nor waited for; once that firer
// rolls back, the next firing fires it.
func TestFiringSkipsSchedulesAnotherFirerHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := metricsStore(t)
	require.NoError(t, s.ScheduleCreate(ctx, &store.ScheduleCreateParams{Namespace: store.DefaultNamespace, Name: "often",
		Cron: "@every 1s", TaskType: "test", TypeVersion: 1, Queue: "reports", Input: json.RawMessage(`{}`)}))

	var held store.Tx
	enginetest.WaitFor(t, "the schedule to be due", func() bool {
		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		due, err := tx.ScheduleListDue(ctx, &store.ScheduleListDueParams{Max: 10})
		require.NoError(t, err)
		if len(due) == 0 {
			require.NoError(t, tx.Rollback(ctx))
			return false
		}
		held = tx
		return true
	})
	firings, err := maintenance.FireSchedules(ctx, s, nil, 100)
	require.NoError(t, err)
	require.Empty(t, firings, "the held schedule is skipped")
	require.NoError(t, held.Rollback(ctx))

	firings, err = maintenance.FireSchedules(ctx, s, nil, 100)
	require.NoError(t, err)
	require.Len(t, firings, 1)
	require.True(t, firings[0].Started)
}

// A schedule of a namespace that has moved to another cell, left active in
// the old one (created there by a process on the old map), fails alone:
// its start is refused by the move's fence, and the other schedules of
// the cell go on firing.
func TestMovedNamespaceScheduleDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := metricsStore(t)
	_, err := pgstore.MoveNamespace(ctx, s, enginetest.Store(t), pgstore.MoveParams{Namespace: "acme", ToCell: "us"})
	require.NoError(t, err)
	for _, sc := range []*store.ScheduleCreateParams{
		{Namespace: "acme", Name: "moved", Cron: "@every 1s", TaskType: "test", TypeVersion: 1, Queue: "reports", Input: json.RawMessage(`{}`)},
		{Namespace: store.DefaultNamespace, Name: "healthy", Cron: "@every 1s", TaskType: "test", TypeVersion: 1, Queue: "reports", Input: json.RawMessage(`{}`)},
	} {
		require.NoError(t, s.ScheduleCreate(ctx, sc))
	}
	r, err := maintenance.New(maintenance.Config{Store: s, Owner: "leader", Interval: time.Hour, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	enginetest.WaitFor(t, "the healthy schedule to fire twice beside the moved one", func() bool {
		tasks, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Queue: "reports"})
		return err == nil && len(tasks) >= 2
	})
}
