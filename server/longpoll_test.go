package server

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
)

// readCountingStore counts the reads of one task's row.
type readCountingStore struct {
	store.Store
	id    uuid.UUID
	reads atomic.Int64
}

func (s *readCountingStore) TaskGet(ctx context.Context, p *store.TaskGetParams) (*store.Task, error) {
	if p.ID == s.id {
		s.reads.Add(1)
	}
	return s.Store.TaskGet(ctx, p)
}

// startedServer is a started server on st with cfg's other settings,
// whose notifier is live (notifications are arriving).
func startedServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	srv, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop(context.Background())) })
	require.Eventually(t, srv.notifiers[""].Live, 30*time.Second, 10*time.Millisecond)
	return srv
}

// Probe finding: each long poll re-read its task every second even while
// the notifier was live (8,000 polls: ~7,000 transactions a second). A
// poll now reads its task when it starts and when its timeout passes,
// and in between only when notified. (On main a 3 s poll read it 7
// times.)
func TestLongPollReadsItsTaskOnlyWhenNotified(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, ns.Store, "default")
			id := startDoc(t, testServer(t, ns.Store), "")
			counting := &readCountingStore{Store: ns.Store, id: id}
			srv := startedServer(t, Config{Store: counting})
			a := servertest.Send(t, srv.Handler(), "GET", "/v1/tasks/"+id.String()+"/wait?timeout=3s", nil)
			require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
			require.Contains(t, string(a.Body), `"status":"pending"`)
			require.LessOrEqual(t, counting.reads.Load(), int64(2), "one read to start, one when the timeout passed")
		})
	}
}

// Long polls open at once are bounded (Config.MaxLongPolls): one past
// the bound is 429 too_many_long_polls with Retry-After, at once, and a
// poll that ended makes room.
func TestLongPollsAreCapped(t *testing.T) {
	t.Parallel()
	st := servertest.BothStores(t)[1].Store
	servertest.RegisterDoc(t, st, "default")
	id := startDoc(t, testServer(t, st), "")
	srv := startedServer(t, Config{Store: st, MaxLongPolls: 1})
	h := srv.Handler()
	done := make(chan servertest.Answer, 1)
	go func() { done <- servertest.Send(t, h, "GET", "/v1/tasks/"+id.String()+"/wait?timeout=1m", nil) }()
	require.Eventually(t, func() bool { return srv.longPolls.Load() == 1 }, 30*time.Second, time.Millisecond)

	a := servertest.Send(t, h, "GET", "/v1/tasks/"+id.String()+"/wait?timeout=1m", nil)
	require.Equal(t, http.StatusTooManyRequests, a.Status, "%s", a.Body)
	require.Equal(t, web.CodeTooManyWaits, a.Problem.Code)
	require.Equal(t, 1, a.Problem.RetryAfterSeconds)

	srv.Drain() // answers the open poll at once
	first := <-done
	require.Equal(t, http.StatusOK, first.Status, "%s", first.Body)
	require.Zero(t, srv.longPolls.Load())
}
