package maintenance_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/internal/maintenance"
	"github.com/cairnflow/cairn/engine/store"
)

// summaryCounter is a store that counts the leader's IndexSummarize
// calls and the ranges they summarized, or refuses them with refuse.
type summaryCounter struct {
	store.Store
	refuse error
	calls  atomic.Int32
	ranges atomic.Int32
}

func (s *summaryCounter) IndexSummarize(ctx context.Context) (int, error) {
	s.calls.Add(1)
	if s.refuse != nil {
		return 0, s.refuse
	}
	n, err := s.Store.IndexSummarize(ctx)
	s.ranges.Add(int32(n))
	return n, err
}

// TestLeaderSummarizesEventRanges: the leader summarizes the events'
// BRIN ranges (autosummarize is off since migration 0026), and keeps
// doing so at its passes.
func TestLeaderSummarizesEventRanges(t *testing.T) {
	t.Parallel()
	s := enginetest.Store(t)
	ranges := enginetest.FillEventRanges(t, s)

	counted := &summaryCounter{Store: s}
	m, err := maintenance.New(maintenance.Config{Store: counted, Owner: "leader", Interval: 10 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	t.Cleanup(m.Stop)
	enginetest.WaitFor(t, "the leader to summarize the filled ranges", func() bool { return int(counted.ranges.Load()) == ranges })
	enginetest.WaitFor(t, "a later pass", func() bool { return counted.calls.Load() >= 2 })
	require.Equal(t, ranges, int(counted.ranges.Load()), "each range once")
}

// TestLeaderLeavesSummariesToVacuumWhenRefused: a role the store refuses
// summaries to (not the index's owner) is told once; the leader does not
// ask again at every pass.
func TestLeaderLeavesSummariesToVacuumWhenRefused(t *testing.T) {
	t.Parallel()
	counted := &summaryCounter{Store: enginetest.Store(t), refuse: errors.Mark(errors.New("not the owner"), store.ErrUnsupported)}
	m, err := maintenance.New(maintenance.Config{Store: counted, Owner: "leader", Interval: 10 * time.Millisecond, Logger: enginetest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	t.Cleanup(m.Stop)
	enginetest.WaitFor(t, "the leader's first summary", func() bool { return counted.calls.Load() >= 1 })
	time.Sleep(10 * 12 * 10 * time.Millisecond) // ten summary intervals
	require.Equal(t, int32(1), counted.calls.Load(), "refused once, not asked again")
}
