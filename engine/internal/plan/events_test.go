package plan

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
)

func TestEventGroupsGatherEachTasksHistory(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	ev := func(seq int64) history.Event { return history.Event{Seq: seq} }
	var g EventGroups
	g.Add(a, ev(1))
	g.Add(a, ev(2))
	g.Add(b, ev(1))
	g.Add(a, ev(3)) // a task met again, out of order, is appended to
	got := g.ByTask()
	require.Equal(t, []history.Event{ev(1), ev(2), ev(3)}, got[a])
	require.Equal(t, []history.Event{ev(1)}, got[b])
	require.Len(t, got, 2)

	var none EventGroups
	require.NotNil(t, none.ByTask(), "no rows: an empty map, as the stores returned before")
	require.Empty(t, none.ByTask())
}

func TestEventTypeNamesEveryTypeAndPassesOthersOn(t *testing.T) {
	for _, typ := range history.Types {
		require.Equal(t, typ, EventType([]byte(typ)))
	}
	require.Equal(t, history.Type("no_such_event"), EventType([]byte("no_such_event")))
	_, err := history.Decode(EventType([]byte("no_such_event")), []byte(`{"v":1}`))
	require.Error(t, err, "an unknown type is still refused by Decode")
}
