package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// untouchable is a store whose every method panics (a nil embedded
// interface): what New may not call.
type untouchable struct{ store.Store }

// New is pure: it reads nothing from its store and starts no goroutine,
// and its handler serves nothing from the store until asked.
func TestServerNewIsPure(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv, err := server.New(server.Config{Store: untouchable{}})
	require.NoError(t, err)
	require.NotNil(t, srv.Handler())
	goleak.VerifyNone(t, before)
	require.NoError(t, srv.Stop(context.Background()), "Stop before Start")
	goleak.VerifyNone(t, before)
}

// Start and Stop follow the service rules: Stop is safe before Start and
// idempotent, a server starts once, and Stop leaves nothing running.
func TestServerStartStop(t *testing.T) {
	ctx := context.Background()
	store := enginetest.Store(t)

	srv, err := server.New(server.Config{Store: store})
	require.NoError(t, err)
	require.NoError(t, srv.Stop(ctx))
	require.Error(t, srv.Start(ctx), "a stopped server does not start")

	srv, err = server.New(server.Config{Store: store})
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	require.Error(t, srv.Start(ctx), "a server starts once")
	require.NoError(t, srv.Stop(ctx))
	require.NoError(t, srv.Stop(ctx), "Stop is idempotent")
	require.Error(t, srv.Start(ctx), "a stopped server does not start again")
}

// Start and Stop called at once from several goroutines neither race nor
// leave the notifier running (TestMain checks for goroutines left).
func TestServerStartStopStress(t *testing.T) {
	ctx := context.Background()
	store := enginetest.Store(t)
	for range 20 {
		srv, err := server.New(server.Config{Store: store})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				if i%2 == 0 {
					_ = srv.Start(ctx) // may come after a Stop: then an error
					return
				}
				assert.NoError(t, srv.Stop(ctx))
			})
		}
		wg.Wait()
		require.NoError(t, srv.Stop(ctx))
	}
}

// Stop answers open long polls at once with the task as it is (Drain), so
// the http.Server's shutdown does not wait for them.
func TestServerStopAnswersLongPolls(t *testing.T) {
	ctx := context.Background()
	store := enginetest.Store(t)
	srv, err := server.New(server.Config{Store: store})
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	id := enginetest.StartTask(t, store, nil)

	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(hs.URL + "/v1/tasks/" + id.String() + "/wait?timeout=5m")
		if err != nil {
			t.Error(err)
			resp = nil
		}
		answered <- resp
	}()
	require.NoError(t, srv.Stop(ctx))
	resp := <-answered // without the drain, five minutes from now
	require.NotNil(t, resp)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var task struct{ Status string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&task))
	require.Equal(t, "pending", task.Status)

	ready, err := http.Get(hs.URL + "/readyz")
	require.NoError(t, err)
	defer ready.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, ready.StatusCode, "a stopped server is not ready")
	require.True(t, strings.HasPrefix(ready.Header.Get("Content-Type"), "application/problem+json"))
}
