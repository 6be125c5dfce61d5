package plan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQueueFullRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		need, running int
		meanAge       time.Duration
		want          time.Duration
	}{
		{need: 1, running: 0, meanAge: 0, want: 30 * time.Second},                        // nobody serves the queue
		{need: 1, running: 10, meanAge: 5 * time.Second, want: time.Second},              // 10 per 10 s: one a second
		{need: 20, running: 10, meanAge: 5 * time.Second, want: 20 * time.Second},        // twenty of them
		{need: 1, running: 100, meanAge: time.Millisecond, want: 100 * time.Millisecond}, // floor
		{need: 1000, running: 1, meanAge: time.Hour, want: 5 * time.Minute},              // ceiling
	} {
		require.Equal(t, c.want, QueueFullRetryAfter(c.need, c.running, c.meanAge), "%+v", c)
	}
}
