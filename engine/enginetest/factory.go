package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TaskOpts are the options of [StartTask] and [StartTasks]. Zero values take
// the defaults named on each field.
type TaskOpts struct {
	Namespace      string // default store.DefaultNamespace
	Queue          string // default "default"
	Type           string // default "test"
	Version        int    // default 1
	Priority       int
	RunAt          time.Time // default now
	MaxAttempts    int       // 0: history.DefaultMaxAttempts
	IdempotencyKey string
	Input          json.RawMessage
	FairnessKey    string
	FairnessWeight int
}

// Params returns the start parameters opts describe, defaults filled in.
func (o *TaskOpts) Params() *store.TaskStartParams {
	var opts TaskOpts
	if o != nil {
		opts = *o
	}
	if opts.Namespace == "" {
		opts.Namespace = store.DefaultNamespace
	}
	if opts.Queue == "" {
		opts.Queue = "default"
	}
	if opts.Type == "" {
		opts.Type = "test"
	}
	if opts.Version == 0 {
		opts.Version = 1
	}
	return &store.TaskStartParams{Namespace: opts.Namespace, Scheduled: history.TaskScheduledData{
		TaskType: opts.Type, TypeVersion: opts.Version, Queue: opts.Queue, Priority: opts.Priority,
		RunAt: opts.RunAt, MaxAttempts: opts.MaxAttempts, IdempotencyKey: opts.IdempotencyKey, Input: opts.Input,
		FairnessKey: opts.FairnessKey, FairnessWeight: opts.FairnessWeight,
	}}
}

// TypeKey returns the type key of the tasks opts describes.
func (o *TaskOpts) TypeKey() store.TypeKey {
	sc := o.Params().Scheduled
	return store.TypeKey{Type: sc.TaskType, Version: sc.TypeVersion}
}

// StartTask starts one task described by opts (nil for defaults) and
// returns its id.
func StartTask(tb testing.TB, s store.Store, opts *TaskOpts) uuid.UUID {
	tb.Helper()
	res, err := s.TaskStart(context.Background(), opts.Params())
	require.NoError(tb, err)
	return res.ID
}

// StartTasks starts n tasks described by opts (which must not carry an
// idempotency key), a few at a time, and returns their ids in no particular
// order.
func StartTasks(tb testing.TB, s store.Store, n int, opts *TaskOpts) []uuid.UUID {
	tb.Helper()
	if opts != nil {
		require.Empty(tb, opts.IdempotencyKey, "StartTasks: an idempotency key would make the tasks one")
	}
	const workers = 8 // well under the shared pool's 20 connections
	var (
		mu   sync.Mutex
		ids  = make([]uuid.UUID, 0, n)
		errs []error
		next = make(chan struct{}, n) // one token per task, filled before the workers start
		wg   sync.WaitGroup
	)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range min(workers, n) {
		wg.Go(func() {
			for range next {
				res, err := s.TaskStart(context.Background(), opts.Params())
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ids = append(ids, res.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(tb, errs)
	return ids
}

// EventTypes returns the types of a task's events, in order.
func EventTypes(tb testing.TB, s store.Store, id uuid.UUID) []history.Type {
	tb.Helper()
	events, err := store.TaskEvents(context.Background(), s, "", id)
	require.NoError(tb, err)
	out := make([]history.Type, len(events))
	for i, e := range events {
		out[i] = e.Type()
	}
	return out
}

// UnmigratedSchema returns the name of a schema that does not exist yet,
// for tests of the migration runner; it is dropped, if created, when the
// test ends.
func UnmigratedSchema(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "cairn_test_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		_, err := p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if err != nil {
			tb.Logf("drop test schema %s: %v", name, err)
		}
	})
	return name
}

// NewPool returns a pool of its own on the test database, with at most
// maxConns connections, closed when the test ends. Use it where separate
// processes are simulated; otherwise share [Pool].
func NewPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL(tb))
	require.NoError(tb, err)
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(p.Close)
	return p
}
