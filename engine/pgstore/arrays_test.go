package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
)

// TestValuerArraysRoundTrip: the arrays the hot statements take without
// an allocation per element arrive as the slices they hold would: every
// element in order, an empty array empty (not NULL), a zero time NULL
// where the array says so.
func TestValuerArraysRoundTrip(t *testing.T) {
	t.Parallel()
	pool := enginetest.Pool(t)
	at := time.Date(2026, 12, 6, 21, 0, 0, 123456000, time.UTC)
	ids := [][16]byte{{1}, {2, 3}, {0xff}}
	ints := []int32{0, -7, 1 << 30}
	texts := []string{"", "pending", "ünïcode"}
	times := []time.Time{at, {}, at.Add(-time.Hour).In(time.FixedZone("x", 3600))}
	for _, n := range []int{3, 0} {
		args := pgstore.ValuerArrays(ids[:n], ints[:n], texts[:n], times[:n])
		var (
			gotIDs     [][16]byte
			got8       []int64
			got4       []int32
			gotTexts   []string
			gotTimes   []time.Time
			gotNulls   []*time.Time
			dims, null int
		)
		err := pool.QueryRow(context.Background(), `SELECT $1::uuid[], $2::bigint[], $3::integer[], $4::text[], $5::timestamptz[],
			$6::timestamptz[], coalesce(array_length($1::uuid[], 1), 0), ($1::uuid[] IS NULL)::int`, args...).
			Scan(&gotIDs, &got8, &got4, &gotTexts, &gotTimes, &gotNulls, &dims, &null)
		require.NoError(t, err)
		require.Equal(t, 0, null, "%d elements: an array, not NULL", n)
		require.Equal(t, n, dims)
		require.Len(t, gotIDs, n)
		for i := range n {
			require.Equal(t, ids[i], gotIDs[i])
			require.EqualValues(t, ints[i], got8[i])
			require.Equal(t, ints[i], got4[i])
			require.Equal(t, texts[i], gotTexts[i])
			require.True(t, times[i].Equal(gotTimes[i]), "%v, %v", times[i], gotTimes[i])
			if times[i].IsZero() {
				require.Nil(t, gotNulls[i], "a zero time is NULL")
			} else {
				require.True(t, times[i].Equal(*gotNulls[i]))
			}
		}
	}
}
