package history_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// The step's duration and AI usage on the wire: field names and order are
// part of the schema.
func TestEncodeStepTimingAndUsage(t *testing.T) {
	t.Parallel()

	usage := []history.Usage{
		{Model: "claude-haiku", InputTokens: 100, OutputTokens: 50, CostUSD: 0.01},
		{Model: "embed-small", InputTokens: 7},
	}
	tests := []struct {
		name    string
		payload history.Payload
		want    string
	}{
		{
			name: "step_completed",
			payload: history.StepCompletedData{
				Position: 1, Name: "extract", Output: json.RawMessage(`"x"`), DurationMillis: 1234, Usage: usage,
			},
			want: `{"v":1,"position":1,"name":"extract","output":"x","duration_ms":1234,"usage":[` +
				`{"model":"claude-haiku","input_tokens":100,"output_tokens":50,"cost_usd":0.01},` +
				`{"model":"embed-small","input_tokens":7,"output_tokens":0,"cost_usd":0}]}`,
		},
		{
			name: "attempt_failed",
			payload: history.AttemptFailedData{
				Error:     history.ErrorInfo{Class: history.Transient, Message: "model overloaded"},
				NextRunAt: &nextRun,
				Usage:     usage[:1],
			},
			want: `{"v":1,"error":{"class":"transient","message":"model overloaded"},"next_run_at":"2026-01-02T03:05:05.123456Z",` +
				`"usage":[{"model":"claude-haiku","input_tokens":100,"output_tokens":50,"cost_usd":0.01}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := history.Encode(tt.payload)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))

			decoded, err := history.Decode(tt.payload.EventType(), got)
			require.NoError(t, err)
			require.Equal(t, tt.payload, decoded)
		})
	}
}

// Events written before steps were timed and usage recorded decode with
// zero values, and encode as they did.
func TestDecodeWithoutTimingAndUsage(t *testing.T) {
	t.Parallel()

	old := `{"v":1,"position":2,"name":"ship","output":[1,2]}`
	p, err := history.Decode(history.StepCompleted, []byte(old))
	require.NoError(t, err)
	step := p.(history.StepCompletedData)
	require.Zero(t, step.DurationMillis)
	require.Nil(t, step.Usage)
	again, err := history.Encode(step)
	require.NoError(t, err)
	require.Equal(t, old, string(again))

	oldFailure := `{"v":1,"error":{"class":"permanent","message":"no"}}`
	p, err = history.Decode(history.AttemptFailed, []byte(oldFailure))
	require.NoError(t, err)
	require.Nil(t, p.(history.AttemptFailedData).Usage)
	again, err = history.Encode(p)
	require.NoError(t, err)
	require.Equal(t, oldFailure, string(again))
}

// Timing and usage are facts about the step run, not part of the task's
// state: replay keeps the step as before.
func TestReplayStepWithUsage(t *testing.T) {
	t.Parallel()

	events := historytest.Build(
		historytest.Scheduled(),
		historytest.Started(1, 1),
		historytest.E{Attempt: 1, Data: history.StepCompletedData{Name: "extract", Output: json.RawMessage(`1`), DurationMillis: 5,
			Usage: []history.Usage{{Model: "m", InputTokens: 1}}}},
	)
	state, err := history.Replay(events)
	require.NoError(t, err)
	require.Equal(t, []history.Step{{Position: 0, Name: "extract", Output: json.RawMessage(`1`)}}, state.Steps)
}
