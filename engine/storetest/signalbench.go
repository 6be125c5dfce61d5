package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/requests"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// BenchSignalToLongHistory measures a signal (with a dedup id) to a task
// whose history is already long: in bytes (60 signals of 1 MB) and in
// events (20,000 small signals). A signal that reads the whole history
// costs its size each time; one decided from the task's row and indexes
// does not. newStore returns a fresh, empty, migrated store with the
// default history limits.
//
//	go test -run '^$' -bench SignalToLongHistory -benchtime 20x ./engine/pgstore ./engine/sqlitestore
func BenchSignalToLongHistory(b *testing.B, newStore func(tb testing.TB) store.Store) {
	for _, shape := range []struct {
		name          string
		signals, size int
	}{
		{"bytes=60MB", 60, 1 << 20},
		{"events=20k", 20_000, 16},
	} {
		b.Run(shape.name, func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			res, err := s.TaskStart(ctx, spec{}.params())
			require.NoError(b, err)
			id := res.ID
			growHistory(b, s, id, shape.signals, shape.size)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, err := requests.Signal(ctx, s, &store.TaskSignalParams{
					Namespace: store.DefaultNamespace, TaskID: id, Name: "note", Payload: json.RawMessage(`"hello"`),
					Sender: "bench", DedupID: fmt.Sprintf("bench-%d", i),
				})
				require.NoError(b, err)
				i++
			}
		})
	}
}

// growHistory appends n signals of a payload of size bytes to task id, in
// appends of at most 16 MB or 1,000 signals.
func growHistory(tb testing.TB, s store.Store, id uuid.UUID, n, size int) {
	tb.Helper()
	ctx := context.Background()
	payload := json.RawMessage(`"` + strings.Repeat("x", size) + `"`)
	per := max(1, min(1000, (16<<20)/size))
	evs, err := store.TaskEvents(ctx, s, "", id)
	require.NoError(tb, err)
	state, err := history.Replay(evs)
	require.NoError(tb, err)
	for done := 0; done < n; {
		var batch []history.Payload
		for ; done < n && len(batch) < per; done++ {
			batch = append(batch, history.SignalReceivedData{Name: "fill", Payload: payload, Sender: "bench"})
		}
		state, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: id, State: state, Payloads: batch})
		require.NoError(tb, err)
	}
}
