package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// A start's input over MaxPayloadBytes is refused with ErrPayloadTooLarge
// (and ErrInvalid), naming its size and the limit, and nothing is
// written; an input of exactly the limit is accepted. The default is 1 MiB.
func TestStartRefusesAnInputOverMaxPayloadBytes(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		ctx := context.Background()
		small, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), MaxPayloadBytes: 100})
		require.NoError(t, err)
		defer small.Close()

		exact := json.RawMessage(`"` + strings.Repeat("x", 98) + `"`) // 100 bytes
		_, err = small.StartDynamic(ctx, echo, exact, nil)
		require.NoError(t, err, "an input of exactly the limit is accepted")
		over := json.RawMessage(`"` + strings.Repeat("x", 99) + `"`)
		for name, start := range map[string]func() error{
			"Start": func() error { _, err := small.StartDynamic(ctx, echo, over, nil); return err },
			"StartMany": func() error {
				_, err := small.StartMany(ctx, []sdk.StartParams{{Workflow: echo, Input: over}})
				return err
			},
			"CreateSchedule": func() error {
				return small.CreateSchedule(ctx, sdk.ScheduleParams{Name: "s", Cron: "* * * * *", Workflow: echo, Input: over})
			},
		} {
			err := start()
			require.True(t, errors.Is(err, sdk.ErrPayloadTooLarge), "%s: %v", name, err)
			require.True(t, errors.Is(err, sdk.ErrInvalid), "%s: %v", name, err)
			var tooLarge *sdk.PayloadTooLargeError
			require.True(t, errors.As(err, &tooLarge), name)
			require.Equal(t, sdk.PayloadTooLargeError{What: "input", Size: 101, Limit: 100}, *tooLarge, name)
			require.ErrorContains(t, err, "input is 101 bytes of JSON, over the limit of 100 bytes (MaxPayloadBytes)", name)
		}
		require.Equal(t, 1, enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client)), "only the accepted start was written")

		// The default: 1 MiB of JSON in place; with inputs kept by
		// reference turned off, what is over it is refused.
		inPlace, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), BlobThreshold: -1})
		require.NoError(t, err)
		defer inPlace.Close()
		_, err = inPlace.StartDynamic(ctx, echo, strings.Repeat("x", sdk.DefaultMaxPayloadBytes-2), nil)
		require.NoError(t, err)
		_, err = inPlace.StartDynamic(ctx, echo, strings.Repeat("x", sdk.DefaultMaxPayloadBytes-1), nil)
		require.True(t, errors.Is(err, sdk.ErrPayloadTooLarge), "%v", err)
		require.Equal(t, 1<<20, sdk.DefaultMaxPayloadBytes, "the README and the API's docs say 1 MiB")
		// By default an input over the blob threshold goes by reference, up
		// to what a blob holds; a schedule's stays in place, bounded.
		_, err = b.client.StartDynamic(ctx, echo, strings.Repeat("x", sdk.DefaultMaxPayloadBytes+10), nil)
		require.NoError(t, err)
		err = b.client.CreateSchedule(ctx, sdk.ScheduleParams{Name: "big", Cron: "* * * * *", Workflow: echo, Input: strings.Repeat("x", sdk.DefaultMaxPayloadBytes)})
		require.True(t, errors.Is(err, sdk.ErrPayloadTooLarge), "%v", err)

		_, err = sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), MaxPayloadBytes: -1})
		require.ErrorContains(t, err, "MaxPayloadBytes -1 must not be negative")
	})
}

// bigOutputs is a workflow whose input says which output is too large for
// a worker with MaxPayloadBytes 64: "first" a step followed by another
// (refused when it is recorded), "last" the last step (recorded with the
// outcome), "output" the workflow's own; "none" fits.
var bigOutputs = sdk.NewWorkflow("payload.big", 1, func(ctx workflow.Context, which string) (string, error) {
	big := strings.Repeat("y", 100)
	size := func(name string) string {
		if which == name {
			return big
		}
		return "ok"
	}
	if _, err := workflow.Step(ctx, "first", func(context.Context) (string, error) { return size("first"), nil }, nil); err != nil {
		return "", err
	}
	if _, err := workflow.Step(ctx, "last", func(context.Context) (string, error) { return size("last"), nil }, nil); err != nil {
		return "", err
	}
	return size("output"), nil
}, &sdk.WorkflowOpts{Retry: fastRetry(3)})

// An output over the worker's MaxPayloadBytes is not recorded: the attempt
// fails permanently (kind payload_too_large) and the task is dead-lettered,
// naming the step, the size and the limit.
func TestOutputsOverMaxPayloadBytesFailPermanently(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{MaxPayloadBytes: 64})
		sdk.Register(b.worker, bigOutputs)
		startWorker(t, b.worker)
		ctx := context.Background()
		for _, tc := range []struct {
			which, step string
			steps       int // steps on record
			what        string
		}{
			{"first", "first", 0, "the output of step 0 (first) is 102 bytes"},
			{"last", "last", 1, "the output of step 1 (last) is 102 bytes"},
			{"output", "", 2, "the workflow's output is 102 bytes"},
		} {
			res, err := sdk.Start(ctx, b.client, bigOutputs, tc.which, nil)
			require.NoError(t, err)
			info := waitTask(t, b.client, res.ID)
			require.Equal(t, history.StatusDeadLettered, info.Status, tc.which)
			require.Equal(t, 1, info.Attempt, "%s: permanent, not retried", tc.which)
			e := info.LastError
			require.NotNil(t, e, tc.which)
			require.Equal(t, history.Permanent, e.Class, tc.which)
			require.Equal(t, "payload_too_large", e.Kind, tc.which)
			require.Equal(t, "rule:payload_too_large", e.ClassifiedBy, tc.which)
			require.Equal(t, tc.step, e.Step, tc.which)
			require.Contains(t, e.Message, tc.what+" of JSON, over the limit of 64 bytes (MaxPayloadBytes)", tc.which)
			completed := eventsOf[history.StepCompletedData](taskHistory(t, b.client, res.ID))
			require.Len(t, completed, tc.steps, "%s: the oversized output is not recorded", tc.which)
		}
		res, err := sdk.Start(ctx, b.client, bigOutputs, "none", nil)
		require.NoError(t, err)
		require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)
	})
}

// A task whose history reaches the worker's MaxHistoryEvents ends for good
// (kind history_too_large, naming the limit) instead of growing on; below
// it nothing changes. On both stores.
func TestHistoryOverMaxHistoryEventsEndsTheTask(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{MaxHistoryEvents: 8})
		wf := sdk.NewWorkflow("loop.forever", 1, func(ctx workflow.Context, steps int) (int, error) {
			for i := range steps {
				if _, err := workflow.Step(ctx, fmt.Sprintf("s%d", i), func(context.Context) (int, error) { return i, nil }, nil); err != nil {
					return 0, err
				}
			}
			return steps, nil
		}, nil)
		sdk.Register(b.worker, wf)
		startWorker(t, b.worker)
		ctx := context.Background()

		short, err := sdk.Start(ctx, b.client, wf, 3, nil)
		require.NoError(t, err)
		n, err := short.Result(ctx)
		require.NoError(t, err, "3 steps stay under 8 events")
		require.Equal(t, 3, n)

		long, err := sdk.Start(ctx, b.client, wf, 50, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, long.ID)
		require.Equal(t, history.StatusDeadLettered, info.Status)
		require.NotNil(t, info.LastError)
		require.Equal(t, "history_too_large", info.LastError.Kind)
		require.Equal(t, history.Permanent, info.LastError.Class)
		require.Contains(t, info.LastError.Message, "at the limit of 8 (MaxHistoryEvents)")
		events := taskHistory(t, b.client, long.ID)
		require.LessOrEqual(t, len(events), 8+2, "the history stopped at the limit (and its end)")
		_, err = sdk.NewWorker(sdk.WorkerConfig{Store: sdk.ClientStore(b.client), MaxHistoryEvents: -1})
		require.NoError(t, err, "negative: no bound")
	})
}
