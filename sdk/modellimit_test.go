package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// engineStore is the bundle's store as the engine sees it, for a test
// that looks under the SDK.
func (b *testBundle) engineStore(t *testing.T) store.Store {
	t.Helper()
	if b.store != nil {
		return b.store
	}
	st, err := pgstore.New(pgstore.Config{Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	return st
}

// TestModelLimitWaitsItsTurn: a step over its model's tokens per minute
// waits, holding its slot, until the step before it settles below its
// reservation; it runs then (woken, not at the window's end), and its
// history says it waited. What the steps reported replaces what they
// reserved.
func TestModelLimitWaitsItsTurn(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{Concurrency: 4})
		ctx := t.Context()
		require.NoError(t, b.client.SetModelLimit(ctx, "gpt-test", sdk.ModelLimit{TokensPerMinute: 1000}))
		running, release := make(chan struct{}), make(chan struct{})
		wf := sdk.NewWorkflow("llm.call", 1, func(ctx workflow.Context, in string) (string, error) {
			return workflow.Step(ctx, "complete", func(ctx context.Context) (string, error) {
				if in == "first" {
					close(running)
					<-release
				}
				spent := map[string]int64{"first": 100, "second": 200}[in]
				activities.RecordUsage(ctx, activities.Usage{Model: "gpt-test", InputTokens: spent / 2, OutputTokens: spent / 2})
				return in, nil
			}, &workflow.StepOpts{Spend: &workflow.Spend{Model: "gpt-test", Tokens: 600}})
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		first, err := sdk.Start(ctx, b.client, wf, "first", nil)
		require.NoError(t, err)
		st := b.engineStore(t)
		// A probe asks for no tokens: admitted (writing a request of no
		// tokens) unless a ticket is ahead, then its own is dropped.
		probe := func() store.ModelAdmission {
			ticket := uuid.New()
			got, err := st.ModelAdmit(ctx, &store.ModelAdmitParams{Namespace: store.DefaultNamespace, Model: "gpt-test", Ticket: ticket,
				TaskID: uuid.New(), Owner: "probe", TicketTTL: time.Second})
			require.NoError(t, err)
			if !got.Admitted {
				require.NoError(t, st.ModelTicketDrop(ctx, &store.ModelTicketDropParams{Namespace: store.DefaultNamespace, Ticket: ticket}))
			}
			return got
		}
		<-running // admitted: it holds 600 of the 1000
		second, err := sdk.Start(ctx, b.client, wf, "second", nil)
		require.NoError(t, err)
		// The second waits once a probe of no tokens finds a ticket
		// ahead of it (the first holds 600 of the 1000).
		waitUntil(t, func() bool { return probe().Ahead > 0 })
		close(release)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, first.ID).Status)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, second.ID).Status)

		require.Empty(t, eventsOf[history.ModelLimitWaitedData](taskHistory(t, b.client, first.ID)))
		waited := eventsOf[history.ModelLimitWaitedData](taskHistory(t, b.client, second.ID))
		require.Len(t, waited, 1)
		require.Equal(t, history.ModelLimitWaitedData{Position: 0, Step: "complete", Model: "gpt-test", WaitedMS: waited[0].WaitedMS,
			Tokens: 600, Ahead: 0}, waited[0])
		require.Less(t, waited[0].WaitedMS, int64(55_000), "woken by the settlement, not by the window's end")
		require.Equal(t, int64(300), probe().UsedTokens, "the window holds what the steps spent, not what they reserved")

		limits, err := b.client.ModelLimits(ctx)
		require.NoError(t, err)
		require.Len(t, limits, 1)
		require.Equal(t, sdk.ModelLimit{TokensPerMinute: 1000}, limits[0].ModelLimit)
		require.NoError(t, b.client.DeleteModelLimit(ctx, "gpt-test"))
		require.ErrorIs(t, b.client.DeleteModelLimit(ctx, "gpt-test"), sdk.ErrNotFound)
	})
}

// waitUntil polls cond until it holds, failing the test after
// testTimeout.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within %s", testTimeout)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestModelLimitRefusesBadLimits: the SDK says what is wrong.
func TestModelLimitRefusesBadLimits(t *testing.T) {
	t.Parallel()
	b := setupEmbedded(t, sdk.WorkerConfig{})
	ctx := t.Context()
	for _, tc := range []struct {
		model string
		limit sdk.ModelLimit
		want  string
	}{
		{"", sdk.ModelLimit{TokensPerMinute: 1}, "a model name is 1 to 200 bytes"},
		{"m", sdk.ModelLimit{}, "set TokensPerMinute, RequestsPerMinute or both"},
		{"m", sdk.ModelLimit{TokensPerMinute: -1}, "TokensPerMinute -1 is outside 0..1000000000000"},
		{"m", sdk.ModelLimit{RequestsPerMinute: sdk.MaxModelRequestsPerMinute + 1}, "RequestsPerMinute 10000001 is outside 0..10000000"},
	} {
		err := b.client.SetModelLimit(ctx, tc.model, tc.limit)
		require.ErrorIs(t, err, sdk.ErrInvalid, tc.want)
		require.ErrorContains(t, err, tc.want)
	}
}
