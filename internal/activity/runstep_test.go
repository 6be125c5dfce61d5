package activity_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
)

func TestRunStepTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("HeartbeatTimeout", func(t *testing.T) {
		t.Parallel()
		_, err := activity.RunStep(ctx, activity.Timeouts{Heartbeat: 50 * time.Millisecond}, func(ctx context.Context) (int, error) {
			<-ctx.Done() // hangs without heartbeating
			return 0, ctx.Err()
		})
		require.Error(t, err)
		info := activity.Describe(err, history.Permanent)
		require.Equal(t, history.Transient, info.Class)
		require.Equal(t, activities.KindHeartbeatTimeout, info.Kind)
		require.Contains(t, info.Message, "no heartbeat for 50ms")
	})

	t.Run("HeartbeatsKeepAStepAlive", func(t *testing.T) {
		t.Parallel()
		out, err := activity.RunStep(ctx, activity.Timeouts{Heartbeat: 100 * time.Millisecond}, func(ctx context.Context) (int, error) {
			for range 10 { // 300ms in all: three heartbeat timeouts, each beaten
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(30 * time.Millisecond):
					activities.Heartbeat(ctx)
				}
			}
			return 7, nil
		})
		require.NoError(t, err)
		require.Equal(t, 7, out)
	})

	t.Run("StartToClose", func(t *testing.T) {
		t.Parallel()
		_, err := activity.RunStep(ctx, activity.Timeouts{StartToClose: 50 * time.Millisecond}, func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, errors.Wrap(ctx.Err(), "call model")
		})
		info := activity.Describe(err, history.Permanent)
		require.Equal(t, history.Transient, info.Class)
		require.Equal(t, activities.KindStartToCloseTimeout, info.Kind)
	})

	t.Run("AStepIgnoringItsContextIsAbandoned", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		_, err := activity.RunStep(ctx, activity.Timeouts{StartToClose: 20 * time.Millisecond}, func(context.Context) (int, error) {
			<-release // ignores its context
			return 1, nil
		})
		info := activity.Describe(err, history.Permanent)
		require.Equal(t, activities.KindStartToCloseTimeout, info.Kind)
		require.Contains(t, err.Error(), "timed out")
	})

	t.Run("NoLimits", func(t *testing.T) {
		t.Parallel()
		out, err := activity.RunStep(ctx, activity.Timeouts{}, func(context.Context) (string, error) { return "ok", nil })
		require.NoError(t, err)
		require.Equal(t, "ok", out)
		activities.Heartbeat(ctx) // outside a step with a heartbeat timeout: nothing happens
	})

	t.Run("PanicIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := activity.RunStep(ctx, activity.Timeouts{StartToClose: time.Second}, func(context.Context) (int, error) {
			panic("kaboom")
		})
		require.ErrorContains(t, err, "step panicked: kaboom")
	})
}
