package activity_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/internal/activity"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	id := "0190f5a4-7c1e-7b3a-9f00-000000000001"
	require.Equal(t, id+"/0/ocr", activity.IdempotencyKey(id, 0, "ocr"))
	require.Equal(t, id+"/12/send.reply", activity.IdempotencyKey(id, 12, "send.reply"))
	require.Equal(t, activity.IdempotencyKey(id, 3, "x"), activity.IdempotencyKey(id, 3, "x"), "stable")
	require.NotEqual(t, activity.IdempotencyKey(id, 3, "x"), activity.IdempotencyKey(id, 4, "x"))
	require.NotEqual(t, activity.IdempotencyKey(id, 3, "x"), activity.IdempotencyKey(id, 3, "y"))
}

func TestWithInfoGetInfo(t *testing.T) {
	t.Parallel()
	_, ok := activities.GetInfo(context.Background())
	require.False(t, ok, "a plain context carries no info")

	info := activities.Info{
		TaskID: "task-1", TaskType: "doc.process", Attempt: 2, WorkerID: "w-1", Step: "ocr", Position: 0,
		IdempotencyKey: activity.IdempotencyKey("task-1", 0, "ocr"),
	}
	type otherKey struct{}
	ctx := context.WithValue(activity.WithInfo(context.Background(), info), otherKey{}, "x")
	got, ok := activities.GetInfo(ctx)
	require.True(t, ok)
	require.Equal(t, info, got)

	next := info
	next.Step, next.Position, next.IdempotencyKey = "extract", 1, activity.IdempotencyKey("task-1", 1, "extract")
	inner := activity.WithInfo(ctx, next)
	got, ok = activities.GetInfo(inner)
	require.True(t, ok)
	require.Equal(t, next, got, "the innermost info wins")
	got, _ = activities.GetInfo(ctx)
	require.Equal(t, info, got, "the parent context is unchanged")

	cancelled, cancel := context.WithCancel(inner)
	cancel()
	got, ok = activities.GetInfo(cancelled)
	require.True(t, ok, "derived contexts keep the info")
	require.Equal(t, next, got)
}
