package storetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
)

// testEventPages: EventListPage reads a history page by page, keyset by
// seq, each page within its bounds in events and in bytes (but never
// empty while events remain), and the pages together are the history.
func testEventPages(t *testing.T, s store.Store) {
	ctx := testContext(t)
	id := start(t, s, spec{})
	big := `"` + strings.Repeat("x", 5000) + `"`
	for i := range 9 {
		payload := `{"i":1}`
		if i%3 == 0 {
			payload = big
		}
		_, err := signal(t, s, id, "note", payload, "")
		require.NoError(t, err)
	}
	all := events(t, s, id)
	require.Len(t, all, 10)

	read := func(limit int, maxBytes int64) (pages [][]history.Event) {
		t.Helper()
		var after int64
		for {
			page, err := s.EventListPage(ctx, &store.EventPageParams{
				Namespace: store.DefaultNamespace, TaskID: id, After: after, Limit: limit, MaxBytes: maxBytes,
			})
			require.NoError(t, err)
			if len(page) == 0 {
				return pages
			}
			require.LessOrEqual(t, len(page), max(limit, 1))
			pages = append(pages, page)
			after = page[len(page)-1].Seq
		}
	}
	concat := func(pages [][]history.Event) (out []history.Event) {
		for _, p := range pages {
			out = append(out, p...)
		}
		return out
	}
	byRows := read(3, 0)
	require.Len(t, byRows, 4, "10 events, 3 a page")
	require.Equal(t, all, concat(byRows))

	// 6,000 bytes a page: a 5,000-byte signal fills one with the small
	// events beside it; none is left out, none is empty. The bound counts
	// the payloads as the store holds them (encoded, under the payload
	// codecs: a large signal is then a small reference).
	size := map[int64]int{}
	large := 0
	for _, e := range events(t, stored(s), id) {
		if sig, ok := e.Data.(history.SignalReceivedData); ok {
			size[e.Seq] = len(sig.Payload)
			if len(sig.Payload) > 3000 {
				large++
			}
		}
	}
	byBytes := read(100, 6000)
	require.Equal(t, all, concat(byBytes))
	for _, page := range byBytes {
		var n int
		for _, e := range page {
			n += size[e.Seq]
		}
		require.LessOrEqual(t, n, 6000)
	}
	require.GreaterOrEqual(t, len(byBytes), large, "the large signals are on pages of their own")
	// Below one event's size, each page holds one event.
	require.Len(t, read(100, 10), 10)

	page, err := s.EventListPage(ctx, &store.EventPageParams{Namespace: "other", TaskID: id})
	require.NoError(t, err)
	require.Empty(t, page, "the task is in another namespace")
	for _, p := range []*store.EventPageParams{
		{TaskID: id},
		{Namespace: store.DefaultNamespace, TaskID: id, Limit: store.MaxEventPageLimit + 1},
		{Namespace: store.DefaultNamespace, TaskID: id, Limit: -1},
		{Namespace: store.DefaultNamespace, TaskID: id, After: -1},
		{Namespace: store.DefaultNamespace, TaskID: id, MaxBytes: -1},
	} {
		_, err := s.EventListPage(ctx, p)
		require.Error(t, err, "%+v", p)
	}
}
