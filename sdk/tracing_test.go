package sdk_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// With a tracer provider, each attempt is a span under the trace the task
// was started with, each step a span under its attempt, and a failed
// step's span says so. The trace id reaches the activity context.
func TestAttemptsAndStepsAreSpansUnderTheTasksTrace(t *testing.T) {
	t.Parallel()
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	b := setup(t, sdk.WorkerConfig{TracerProvider: provider})
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var failures atomic.Int32
	var seenTrace atomic.Value
	wf := sdk.NewWorkflow("trace.doc", 1, func(ctx workflow.Context, _ string) (string, error) {
		if _, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
			info, _ := activities.GetInfo(ctx)
			seenTrace.Store(info.TraceID)
			return "text", nil
		}, nil); err != nil {
			return "", err
		}
		return workflow.Step(ctx, "extract", func(context.Context) (string, error) {
			if failures.Add(1) == 1 {
				return "", activities.Transient(errors.New("model overloaded"))
			}
			return "fields", nil
		}, nil)
	}, &sdk.WorkflowOpts{Retry: fastRetry(3)})
	sdk.Register(b.worker, wf)
	startWorker(t, b.worker)
	res, err := sdk.Start(context.Background(), b.client, wf, "doc", &sdk.StartOpts{TraceID: traceparent})
	require.NoError(t, err)
	require.Equal(t, history.StatusCompleted, waitTask(t, b.client, res.ID).Status)
	stopWorker(t, b.worker)
	require.NoError(t, provider.ForceFlush(context.Background()))
	require.Equal(t, traceparent, seenTrace.Load())

	attempts := map[string]sdktrace.ReadOnlySpan{}
	var steps []sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext().TraceID().String(), s.Name())
		switch s.Name() {
		case "cairn.attempt trace.doc":
			require.Equal(t, "00f067aa0ba902b7", s.Parent().SpanID().String(), "the submitter's span is the parent")
			attempts[s.SpanContext().SpanID().String()] = s
		default:
			steps = append(steps, s)
		}
	}
	require.Len(t, attempts, 2, "one span per attempt")
	failedAttempts := 0
	for _, a := range attempts {
		if a.Status().Code == codes.Error {
			failedAttempts++
			require.Contains(t, a.Status().Description, "model overloaded")
		}
	}
	require.Equal(t, 1, failedAttempts, "the attempt that ended in a retry says so")
	var names []string
	failed := 0
	for _, s := range steps {
		names = append(names, s.Name())
		require.Contains(t, attempts, s.Parent().SpanID().String(), "%s is under an attempt", s.Name())
		if s.Status().Code == codes.Error {
			failed++
			require.Equal(t, "cairn.step extract", s.Name())
			require.Contains(t, s.Status().Description, "model overloaded")
		}
	}
	require.Equal(t, 1, failed, "the failed step's span says so")
	// Attempt 1: ocr, extract (fails); attempt 2 replays ocr and runs extract.
	require.ElementsMatch(t, []string{"cairn.step ocr", "cairn.step extract", "cairn.step extract"}, names)
	enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
}
