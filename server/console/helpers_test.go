package console

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// TestMain fails the test binary if any test leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, enginetest.LeakOptions()...)
}

// newTestConsole is a console over st with cfg, acting through a client
// a namespace as a server's: made on first use, answering payloads kept
// by reference as references.
func newTestConsole(tb testing.TB, st store.Store, cfg Config) *Console {
	tb.Helper()
	var mu sync.Mutex
	clients := map[string]*sdk.Client{}
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range clients {
			c.Close()
		}
	})
	cfg.Client = func(namespace string) (*sdk.Client, error) {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := clients[namespace]; ok {
			return c, nil
		}
		c, err := sdk.NewClient(sdk.ClientConfig{Store: st, Namespace: namespace, Identity: "api",
			MaxPayloadBytes: cfg.MaxPayloadBytes, OutputsByReference: true})
		if err != nil {
			return nil, err
		}
		clients[namespace] = c
		return c, nil
	}
	con, err := New(cfg)
	require.NoError(tb, err)
	return con
}

// testConsole is a console over st, with tokens.
func testConsole(tb testing.TB, st store.Store, tokens ...web.Token) http.Handler {
	tb.Helper()
	return newTestConsole(tb, st, Config{Tokens: tokens})
}

// consoleServer is a console over an empty embedded store, for rendering.
func consoleServer(t *testing.T) (*Console, store.Store) {
	t.Helper()
	lite := servertest.LiteStore(t)
	return newTestConsole(t, lite, Config{}), lite
}

// startDoc starts a "doc" task (registered with servertest.RegisterDoc) in the
// default namespace of st, with an empty input, as POST /v1/tasks would.
func startDoc(t *testing.T, st store.Store) uuid.UUID {
	t.Helper()
	c, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	defer c.Close()
	ref, err := c.RegisteredType(context.Background(), "doc", 0)
	require.NoError(t, err)
	res, err := c.StartDynamic(context.Background(), ref, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	return res.ID
}

// startWaiting starts a doc task and ends its first attempt waiting for
// the signal name for an hour, as a workflow's receive does.
func startWaiting(t *testing.T, s store.Store, name string) uuid.UUID {
	t.Helper()
	id := startDoc(t, s)
	ct := servertest.ClaimDoc(t, s)
	require.Equal(t, id, ct.Task.ID)
	servertest.AppendFor(t, s, ct, history.WaitStartedData{Name: name, Position: 0, Deadline: time.Now().Add(time.Hour)})
	return id
}

// runToCompletion runs wf on in over st, with a worker of its own, and
// waits until it completes: it returns a client of st and the run.
func runToCompletion[In, Out any](t *testing.T, st store.Store, wf *sdk.Workflow[In, Out], in In) (*sdk.Client, *sdk.Run[Out]) {
	t.Helper()
	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Concurrency: 2, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
	require.NoError(t, err)
	sdk.Register(w, wf)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.StopAndCancel(context.Background())) })
	client, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	run, err := sdk.Start(context.Background(), client, wf, in, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := client.Wait(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, info.Status, "%+v", info.LastError)
	return client, run
}
