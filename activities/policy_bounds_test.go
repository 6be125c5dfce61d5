package activities_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
)

// formatBomb is finding 1's expression as a policy: its output grows
// tenfold a level while cel-go v0.33.2's own estimate of format stays at
// a tenth of the format string.
func formatBomb(levels int) string {
	f := `"aaaaaaaaaa"`
	for range levels {
		f = "[" + f + `].map(x, "%s%s%s%s%s%s%s%s%s%s".format([x,x,x,x,x,x,x,x,x,x]))[0]`
	}
	return f + ".size() > 0"
}

// TestNewPolicyEstimatesFormatByItsOutput: registration refuses the bomb,
// and any format whose output may be long, by the estimate alone.
func TestNewPolicyEstimatesFormatByItsOutput(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		formatBomb(8),
		formatBomb(4),
		`"%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s".format([error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message, error.message]).contains("x")`,
	} {
		_, err := activities.NewPolicy("bomb", expr)
		require.True(t, errors.Is(err, activities.ErrBadPolicy), "%.60s: %v", expr, err)
		require.Contains(t, err.Error(), "may cost up to")
	}
	// A short format stays within the estimate.
	p, err := activities.NewPolicy("short", `"%d".format([error.status]) == "503"`)
	require.NoError(t, err)
	class, err := p.Classify(activities.PolicyInput{Error: activities.PolicyError{Status: 503}})
	require.NoError(t, err)
	require.Equal(t, history.Transient, class)
}

// TestClassifyIsBoundedInTime: an evaluation is bounded in time besides
// cost. Under a deadline already past, a policy of 200 iterations stops at
// its first interrupt check and counts as permanent. Not parallel: it
// shortens the package's policy timeout.
func TestClassifyIsBoundedInTime(t *testing.T) {
	var l []string
	for i := range 200 {
		l = append(l, strconv.Itoa(i))
	}
	p, err := activities.NewPolicy("iterates", "["+strings.Join(l, ",")+"].all(x, x >= 0)")
	require.NoError(t, err)
	class, err := p.Classify(activities.PolicyInput{})
	require.NoError(t, err)
	require.Equal(t, history.Transient, class)

	defer activities.SetPolicyTimeout(time.Nanosecond)()
	class, err = p.Classify(activities.PolicyInput{})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.Equal(t, history.Permanent, class)
}
