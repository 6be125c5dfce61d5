package processor_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// lostAckStore commits the first append of a step and then answers with
// a dropped connection, as a primary that fails over after its commit and
// before its reply does.
type lostAckStore struct {
	store.Store
	lost atomic.Bool
}

func (s *lostAckStore) EventAppendMany(ctx context.Context, ps []*store.EventAppendParams) ([]store.AppendResult, error) {
	res, err := s.Store.EventAppendMany(ctx, ps)
	if err == nil && hasStep(ps) && s.lost.CompareAndSwap(false, true) {
		return nil, errmark.Mark(errors.New("unexpected EOF: the connection dropped after the commit"), store.ErrUnavailable)
	}
	return res, err
}

func hasStep(ps []*store.EventAppendParams) bool {
	for _, p := range ps {
		for _, pl := range p.Payloads {
			if _, ok := pl.(history.StepCompletedData); ok {
				return true
			}
		}
	}
	return false
}

// An append that committed though its answer was lost is recognized as
// the attempt's own when it is tried again and refused: the attempt goes
// on and completes, rather than waiting out its (hour-long) lease for the
// rescuer, and the step is recorded once.
func TestAppendWhoseCommitWentUnansweredGoesOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := enginetest.Store(t)
	s := &lostAckStore{Store: pg}
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		// An object whose keys jsonb stores in another order: read back,
		// it is not the bytes written.
		output := json.RawMessage(`{"text": "scanned page", "id": 1, "pages": [1, 2]}`)
		if err := a.Append(ctx, history.StepCompletedData{Position: 0, Name: "ocr", Output: output}); err != nil {
			return nil, err
		}
		return []history.Payload{history.TaskCompletedData{Output: json.RawMessage(`"done"`)}}, nil
	}}
	p, err := processor.New(processor.Config{Store: s, Handler: h, Types: []store.TypeKey{enginetest.TestKey},
		LeaseTTL: time.Hour, PollInterval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	id := enginetest.StartTask(t, pg, nil)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() { stopProcessor(t, p) })
	enginetest.WaitStatus(t, pg, id, history.StatusCompleted)
	require.True(t, s.lost.Load(), "the step's commit went unanswered")

	events, err := pg.EventList(ctx, store.EventListAll("", id))
	require.NoError(t, err)
	var types []history.Type
	for _, e := range events[id] {
		types = append(types, e.Type())
	}
	require.Equal(t, []history.Type{history.TaskScheduled, history.AttemptStarted, history.StepCompleted, history.TaskCompleted}, types)
	require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, pg))
}

// busyStore answers every heartbeat that the lease is held but its row
// was busy, as PostgreSQL's does when another writer holds the row.
type busyStore struct{ store.Store }

func (s *busyStore) LeaseExtendMany(_ context.Context, p *store.LeaseExtendParams) (map[uuid.UUID]store.LeaseRenewal, error) {
	held := map[uuid.UUID]store.LeaseRenewal{}
	for _, l := range p.Leases {
		held[l.TaskID] = store.LeaseRenewal{Busy: true}
	}
	return held, nil
}

// A busy lease is held but not renewed: heartbeats that keep finding the
// row busy stop the attempt, as missed ones do, before the database could
// let its lease expire (were busy taken for renewed, it would run on).
func TestBusyHeartbeatsAreMissedRenewals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := enginetest.Store(t)
	s := &busyStore{Store: pg}
	stopped := make(chan error, 1)
	h := &testHandler{fn: func(ctx context.Context, a *processor.Attempt) ([]history.Payload, error) {
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}}
	p, err := processor.New(processor.Config{Store: s, Handler: h, Types: []store.TypeKey{enginetest.TestKey},
		LeaseTTL: 600 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	enginetest.StartTask(t, pg, nil)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() { stopProcessor(t, p) })
	require.ErrorIs(t, recv(t, stopped, "the attempt to stop"), processor.ErrLeaseLost)
}
