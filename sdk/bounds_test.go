package sdk_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/sdk"
)

// TestBoundsAreTheStores holds the sdk's bounds, written as numbers so its
// documentation names no seam, to the seam's own.
func TestBoundsAreTheStores(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, store.DefaultEventPageLimit, sdk.DefaultHistoryPageLimit)
	require.EqualValues(t, store.MaxEventPageLimit, sdk.MaxHistoryPageLimit)
	require.EqualValues(t, store.DefaultEventPageBytes, sdk.DefaultHistoryPageBytes)
	require.Equal(t, store.MinDiagnoseWindow, sdk.MinDiagnoseWindow)
	require.Equal(t, store.MaxDiagnoseWindow, sdk.MaxDiagnoseWindow)
}
