package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/processor"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/stretchr/testify/require"
)

// claimRecorder decorates a store and keeps the parameters of every claim.
type claimRecorder struct {
	store.Store
	mu     sync.Mutex
	claims []store.TaskClaimParams
}

func (s *claimRecorder) TaskClaim(ctx context.Context, p *store.TaskClaimParams) (store.ClaimResult, error) {
	s.mu.Lock()
	s.claims = append(s.claims, *p)
	s.mu.Unlock()
	return s.Store.TaskClaim(ctx, p)
}

// ProcessorConfig.StrictPriority reaches every claim the processor makes;
// left unset, the claims age.
func TestProcessorClaimsWithStrictPriority(t *testing.T) {
	t.Parallel()
	for _, strict := range []bool{false, true} {
		pg := enginetest.Store(t)
		s := &claimRecorder{Store: pg}
		p, err := processor.New(processor.Config{Store: s, Handler: completeHandler(), StrictPriority: strict,
			Types: []store.TypeKey{enginetest.TestKey}, PollInterval: time.Hour, Logger: enginetest.Logger(t)})
		require.NoError(t, err)
		id := enginetest.StartTask(t, pg, nil)
		require.NoError(t, p.Start(context.Background()))
		enginetest.WaitStatus(t, pg, id, history.StatusCompleted)
		require.NoError(t, p.Stop(context.Background()))
		s.mu.Lock()
		require.NotEmpty(t, s.claims)
		for _, c := range s.claims {
			require.Equal(t, strict, c.StrictPriority)
		}
		s.mu.Unlock()
	}
}
