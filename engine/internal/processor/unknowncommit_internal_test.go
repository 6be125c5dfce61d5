package processor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// TestCommittedAlreadyOnlyUnderItsOwnLease: an append refused after a
// write whose answer was lost is taken for committed only if the events
// were written under its own lease. A claim lost in a failover leaves an
// attempt running whose task the same worker claims again: the new
// attempt has the same number and writes the same step, under another
// epoch, and the stale attempt must not take that for its own.
func TestCommittedAlreadyOnlyUnderItsOwnLease(t *testing.T) {
	t.Parallel()
	step := historytest.Step(1, 0, "fetch")
	state, err := history.Replay(historytest.Build(historytest.Scheduled(), historytest.Started(1, 7)))
	require.NoError(t, err)
	p := &store.EventAppendParams{State: state, Epoch: 7, Attempt: 1, Payloads: []history.Payload{step.Data}}

	own := historytest.Build(historytest.Scheduled(), historytest.Started(1, 7), step)
	next, ok := committedAlready(p, own)
	require.True(t, ok, "written under its lease: its own")
	require.Equal(t, int64(3), next.LastSeq)

	other := historytest.Build(historytest.Scheduled(), historytest.Started(1, 9), step)
	_, ok = committedAlready(p, other)
	require.False(t, ok, "the same step under another epoch is the new attempt's")
}
