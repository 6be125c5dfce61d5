package sdk_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// dbProxy forwards TCP connections to the test database and can cut
// them: down() drops every connection and refuses new ones until up(), as
// a database restart or a network partition looks to a worker.
type dbProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	isUp  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *dbProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &dbProxy{ln: ln, target: target, isUp: true, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *dbProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.isUp
		if up {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if !up {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *dbProxy) forward(c net.Conn) {
	defer p.forget(c)
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	defer p.forget(s)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

func (p *dbProxy) forget(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *dbProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isUp = false
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *dbProxy) up() {
	p.mu.Lock()
	p.isUp = true
	p.mu.Unlock()
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// While the database is out of reach, a worker keeps trying with backoff
// and logs the outage once per component and its end once, not every try;
// afterwards it finishes every task, and stops without leaking goroutines
// (TestMain checks).
func TestWorkerRidesOutADatabaseOutage(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(enginetest.DatabaseURL(t))
	require.NoError(t, err)
	proxy := startProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	b := setup(t, sdk.WorkerConfig{})
	logs := &syncBuffer{}
	w, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: b.schema, Concurrency: 4, LeaseTTL: 3 * time.Second,
		PollInterval: 100 * time.Millisecond, RescueInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	require.NoError(t, err)
	wf := sdk.NewWorkflow("outage.step", 1, func(ctx workflow.Context, _ int) (string, error) {
		return workflow.Step(ctx, "work", func(context.Context) (string, error) {
			time.Sleep(20 * time.Millisecond)
			return "done", nil
		}, nil)
	}, &sdk.WorkflowOpts{Retry: fastRetry(20)})
	sdk.Register(w, wf)
	startWorker(t, w)
	ctx := context.Background()
	var ids []*sdk.Run[string]
	start := func(n int) {
		for i := range n {
			r, err := sdk.Start(ctx, b.client, wf, i, nil) // the client's pool bypasses the proxy
			require.NoError(t, err)
			ids = append(ids, r)
		}
	}
	start(20)
	time.Sleep(100 * time.Millisecond)
	proxy.down()
	start(20) // accepted while the worker cannot reach the database
	time.Sleep(2500 * time.Millisecond)
	proxy.up()
	for _, r := range ids {
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, r.ID).Status)
	}
	// Every component that reported the outage reports its end (the
	// notifier reconnects after its backoff, up to 5 s).
	balanced := func() bool {
		out := logs.String()
		return strings.Count(out, "database unavailable") == strings.Count(out, "database available again")
	}
	for deadline := time.Now().Add(testTimeout); !balanced(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("every outage reported ends; worker log:\n%s", logs.String())
		}
	}
	stopWorker(t, w)

	out := logs.String()
	t.Logf("worker log:\n%s", out)
	unavailable := strings.Count(out, "database unavailable; retrying with backoff")
	require.Positive(t, unavailable, "the outage is reported")
	for _, component := range []string{"processor: claim", "processor: renew leases", "notifier (polling continues)", "rescuer", "appender"} {
		down := strings.Count(out, component+": database unavailable")
		back := strings.Count(out, component+": database available again")
		// Once per change of state: a connection that works for a moment
		// as the outage begins (the proxy cuts connections one by one) is
		// a change of state too, so allow one flap.
		require.LessOrEqual(t, down, 2, "%s reports the outage once per change of state, not every try", component)
		require.Equal(t, down, back, "%s reports the end of the outage it reported", component)
	}
	require.GreaterOrEqual(t, unavailable, 2, "the components that touched the database during the outage reported it")
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
}
