package bench

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPaddedInputIsAsLongAsAsked(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 5, 20, 21, 200, 4096} {
		in, err := json.Marshal(paddedInput(3, n))
		require.NoError(t, err)
		if n > len(`{"steps":3,"pad":""}`) { // shorter than a padded input: the bare one
			require.Len(t, in, n, "--input-bytes %d", n)
		} else {
			require.JSONEq(t, `{"steps":3}`, string(in), "--input-bytes %d leaves the bare input", n)
		}
		var back benchInput
		require.NoError(t, json.Unmarshal(in, &back))
		require.Equal(t, 3, back.Steps)
	}
}
