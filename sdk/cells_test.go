package sdk_test

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

var namespacedEcho = sdk.NewWorkflow("cells.echo", 1, func(ctx workflow.Context, in string) (string, error) {
	return workflow.Step(ctx, "echo", func(context.Context) (string, error) { return in, nil }, nil)
}, nil)

// One worker serves several namespaces of one store, each with its own
// claims: every task of each finishes, recorded in its own namespace.
func TestWorkerServesSeveralNamespaces(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		w := b.newWorker(t, sdk.WorkerConfig{Namespaces: []string{"acme", "globex"}})
		sdk.Register(w, namespacedEcho)
		startWorker(t, w)
		for _, ns := range []string{"acme", "globex"} {
			c := namespaceClient(t, b, ns)
			res, err := sdk.Start(context.Background(), c, namespacedEcho, ns, nil)
			require.NoError(t, err)
			info := waitTask(t, c, res.ID)
			require.Equal(t, history.StatusCompleted, info.Status)
			require.Equal(t, ns, info.Namespace)
			require.JSONEq(t, `"`+ns+`"`, string(info.Output))
		}
	})
}

// namespaceClient is a client of b's store in namespace ns.
func namespaceClient(t *testing.T, b *testBundle, ns string) *sdk.Client {
	t.Helper()
	cfg := sdk.ClientConfig{Store: b.store, Namespace: ns}
	if b.store == nil {
		cfg.Pool, cfg.Schema = b.pool, b.schema
	}
	c, err := sdk.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// A worker over cells runs each namespace in its cell's store: a task
// started in acme's cell is invisible in the other cell, and both finish.
func TestWorkerOverCells(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := map[string]store.Store{}
	for _, name := range []string{"eu", "us"} {
		s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), name+".db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		stores[name] = s
	}
	cells, err := sdk.NewCells(stores, map[string]string{"acme": "eu", "globex": "us"})
	require.NoError(t, err)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Cells: cells, Namespaces: []string{"globex", "acme"}, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	sdk.Register(w, namespacedEcho)
	startWorker(t, w)
	for ns, other := range map[string]string{"acme": "us", "globex": "eu"} {
		c, err := sdk.NewClient(sdk.ClientConfig{Cells: cells, Namespace: ns})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		res, err := sdk.Start(ctx, c, namespacedEcho, ns, nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, c, res.ID).Status)
		_, err = stores[other].TaskGet(ctx, &store.TaskGetParams{Namespace: ns, ID: res.ID})
		require.ErrorIs(t, err, store.ErrNotFound, "a task of %s in cell %s", ns, other)
	}
}

// The settings that cannot work are refused when the worker or client is
// made, each with what to change.
func TestNamespacesAndCellsAreChecked(t *testing.T) {
	t.Parallel()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "eu.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	cells, err := sdk.NewCells(map[string]store.Store{"eu": s}, map[string]string{"acme": "eu"})
	require.NoError(t, err)
	for want, cfg := range map[string]sdk.WorkerConfig{
		`Namespace "acme" and Namespaces are both set`:       {Store: s, Namespace: "acme", Namespaces: []string{"globex"}},
		`Namespaces names "acme" twice`:                      {Store: s, Namespaces: []string{"acme", "acme"}},
		`namespace "Bad Name"`:                               {Store: s, Namespaces: []string{"Bad Name"}},
		`Cells is set with Store, Pool, Schema or ListenURL`: {Store: s, Cells: cells, Namespaces: []string{"acme"}},
		`namespace "initech" is in no cell`:                  {Cells: cells, Namespaces: []string{"acme", "initech"}},
	} {
		_, err := sdk.NewWorker(cfg)
		require.ErrorContains(t, err, want)
	}
	_, err = sdk.NewClient(sdk.ClientConfig{Cells: cells, Namespace: "initech"})
	require.ErrorIs(t, err, sdk.ErrInvalid)
	require.ErrorIs(t, err, sdk.ErrNotPlaced)
	_, err = sdk.NewClient(sdk.ClientConfig{Cells: cells})
	require.ErrorContains(t, err, `namespace "default" is in no cell`, "the default namespace is placed like any other")
}

// stuckClaims is a cell cut off mid-claim: once stuck, a claim blocks,
// whatever its context, until released (a connection that neither answers
// nor fails).
type stuckClaims struct {
	store.Store
	stuck   atomic.Bool
	blocked chan struct{} // closed when a claim first blocks
	once    sync.Once
	release chan struct{}
}

func (s *stuckClaims) TaskClaim(ctx context.Context, p *store.TaskClaimParams) (store.ClaimResult, error) {
	if s.stuck.Load() {
		s.once.Do(func() { close(s.blocked) })
		<-s.release
	}
	return s.Store.TaskClaim(ctx, p)
}

// resignations tells when the cell's rescuer gives up its leadership.
type resignations struct {
	store.Store
	resigned chan struct{}
	once     sync.Once
}

func (s *resignations) LeaderResign(ctx context.Context, p *store.LeaderResignParams) error {
	s.once.Do(func() { close(s.resigned) })
	return s.Store.LeaderResign(ctx, p)
}

// A worker stopping over a cell whose claim is stuck stops the other cells
// at once: their rescuers resign while the stuck cell still waits, so
// another process takes their leadership over without waiting for it.
func TestStuckCellDoesNotHoldUpTheOthersStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(name string) store.Store {
		s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), name+".db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	eu := &resignations{Store: open("eu"), resigned: make(chan struct{})}
	us := &stuckClaims{Store: open("us"), blocked: make(chan struct{}), release: make(chan struct{})}
	cells, err := sdk.NewCells(map[string]store.Store{"eu": eu, "us": us}, map[string]string{"acme": "eu", "globex": "us"})
	require.NoError(t, err)
	w, err := sdk.NewWorker(sdk.WorkerConfig{Cells: cells, Namespaces: []string{"acme", "globex"},
		PollInterval: 10 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	sdk.Register(w, namespacedEcho)
	require.NoError(t, w.Start(ctx))
	release := sync.OnceFunc(func() { close(us.release) })
	t.Cleanup(release) // a failed test does not leave the stop hanging
	us.stuck.Store(true)
	<-us.blocked

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(ctx) }()
	select {
	case <-eu.resigned:
	case err := <-stopped:
		t.Fatalf("the stop ended (%v) with cell us's claim still stuck", err)
	case <-time.After(testTimeout):
		t.Fatal("cell eu's rescuer did not resign while cell us's claim was stuck")
	}
	select {
	case err := <-stopped:
		t.Fatalf("the stop ended (%v) with cell us's claim still stuck", err)
	default:
	}
	release()
	require.NoError(t, <-stopped)
}

// A client over cells lists every cell's namespaces, each with its cell:
// the namespaces with settings, those the map places that have none yet,
// and a leftover row in a cell the map does not place it in; the cells
// that do not answer are named in the error, on one line, the others'
// namespaces returned with it.
func TestNamespacesListsEveryCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eu, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "eu.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = eu.Close() })
	us, err := pgstore.New(pgstore.Config{Pool: enginetest.Pool(t), Schema: enginetest.Schema(t)})
	require.NoError(t, err)
	// Two cells nothing answers for (sslmode=prefer: each host tried
	// twice, each error several lines from pgconn).
	downCell := func() store.Store {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		require.NoError(t, ln.Close())
		pool, err := pgxpool.New(ctx, "postgres://postgres@"+ln.Addr().String()+"/postgres?connect_timeout=2")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		down, err := pgstore.New(pgstore.Config{Pool: pool})
		require.NoError(t, err)
		return down
	}
	cells, err := sdk.NewCells(map[string]store.Store{"eu": eu, "us": us, "ap": downCell(), "sa": downCell()},
		map[string]string{"acme": "eu", "hooli": "eu", "globex": "us", "initech": "ap", "umbrella": "sa"})
	require.NoError(t, err)
	client := func(ns string) *sdk.Client {
		c, err := sdk.NewClient(sdk.ClientConfig{Cells: cells, Namespace: ns})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	require.NoError(t, client("acme").SetNamespace(ctx, "acme", sdk.NamespaceSettings{Retention: time.Hour}))
	require.NoError(t, client("globex").SetNamespace(ctx, "globex", sdk.NamespaceSettings{Retention: 2 * time.Hour}))
	// A row of globex left in eu (a move's leftover).
	require.NoError(t, eu.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "globex", Retention: 3 * time.Hour}))

	got, err := client("acme").Namespaces(ctx)
	require.ErrorIs(t, err, cairntype.ErrUnavailable)
	require.ErrorContains(t, err, `cell "ap"`)
	require.ErrorContains(t, err, `cell "sa"`)
	require.NotContains(t, err.Error(), "\n", "one line")
	require.Equal(t, []cairntype.NamespaceConfig{
		{Name: "acme", Cell: "eu", Retention: time.Hour},
		{Name: "globex", Cell: "eu", Retention: 3 * time.Hour},
		{Name: "globex", Cell: "us", Retention: 2 * time.Hour},
		{Name: "hooli", Cell: "eu"},
	}, got)
	one, err := client("globex").NamespaceConfig(ctx, "globex")
	require.NoError(t, err)
	require.Equal(t, cairntype.NamespaceConfig{Name: "globex", Cell: "us", Retention: 2 * time.Hour}, one, "its own cell's settings")
}
