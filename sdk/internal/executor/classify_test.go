package executor

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/internal/interpreter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The classification order: rules that are always permanent, then marks in
// Go code, then the failed step's CEL policy, else the type's, then the
// default (transient for a step's error, permanent for the body's).
func TestClassifyOrder(t *testing.T) {
	t.Parallel()
	typePolicy := activities.MustPolicy("type", `error.message.contains("flaky")`)
	stepPolicy := activities.MustPolicy("step", `error.message.contains("busy")`)
	typ := Type{Retry: activities.DefaultRetryPolicy}
	typ.Retry.Classifier = typePolicy
	stepRetry := activities.DefaultRetryPolicy
	stepRetry.Classifier = stepPolicy
	step := &interpreter.StepInfo{Position: 2, Name: "extract"}
	tests := []struct {
		name     string
		err      error
		step     *interpreter.StepInfo
		opts     *interpreter.StepOptions
		class    history.Class
		by, kind string
	}{
		{name: "RuleBeatsMark", err: activities.Transient(errmark.Mark(errors.New("x"), interpreter.ErrNondeterministic)),
			class: history.Permanent, by: "rule:nondeterminism", kind: "nondeterminism"},
		{name: "BadInput", err: errmark.Mark(errors.New("x"), interpreter.ErrBadInput),
			class: history.Permanent, by: "rule:bad_input", kind: "bad_input"},
		{name: "BadStepOpts", err: errmark.Mark(errors.New("x"), interpreter.ErrBadStepOpts), step: step,
			class: history.Permanent, by: "rule:bad_step_options", kind: "bad_step_options"},
		{name: "Unstorable", err: errmark.Mark(errors.New("x"), interpreter.ErrUnstorable), step: step,
			class: history.Permanent, by: "rule:unstorable_output", kind: "unstorable_output"},
		{name: "Deadline", err: errmark.Mark(context.Canceled, errDeadline), step: step,
			class: history.Permanent, by: "rule:" + kindDeadline, kind: kindDeadline},
		{name: "MarkBeatsPolicy", err: activities.Permanent(errors.New("flaky")), step: step,
			class: history.Permanent, by: "mark:permanent"},
		{name: "TypePolicy", err: errors.New("flaky"), step: step, class: history.Transient, by: "policy:type"},
		{name: "StepPolicyReplacesTypes", err: errors.New("flaky"), step: step, opts: &interpreter.StepOptions{Retry: &stepRetry},
			class: history.Permanent, by: "policy:step"},
		{name: "StepOverrideWithoutClassifierKeepsTypes", err: errors.New("flaky"), step: step,
			opts: &interpreter.StepOptions{Retry: &activities.RetryPolicy{MaxAttempts: 2}}, class: history.Transient, by: "policy:type"},
		{name: "RecordFailedIsTransient", err: errmark.Mark(errors.New("x"), interpreter.ErrRecordFailed),
			class: history.Transient, by: "rule:record_failed", kind: "record_failed"},
		{name: "RecordFailedKeepsAMark", err: activities.Permanent(errmark.Mark(errors.New("x"), interpreter.ErrRecordFailed)),
			class: history.Permanent, by: "mark:permanent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task := &store.Task{Type: "doc", Queue: "default"}
			h := NewHandler(HandlerConfig{})
			res := interpreter.Result{Err: tt.err, Step: tt.step, StepOptions: tt.opts}
			info := h.classify(task, typ, res, 1, time.Second)
			require.Equal(t, tt.class, info.Class)
			require.Equal(t, tt.by, info.ClassifiedBy)
			if tt.kind != "" {
				require.Equal(t, tt.kind, info.Kind)
			}
			if tt.step != nil {
				require.Equal(t, tt.step.Name, info.Step)
				require.Equal(t, tt.step.Position, info.Position)
			}
		})
	}
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		task := &store.Task{Type: "doc", Queue: "default"}
		h := NewHandler(HandlerConfig{})
		plain := Type{Retry: activities.DefaultRetryPolicy}
		info := h.classify(task, plain, interpreter.Result{Err: errors.New("boom"), Step: step}, 1, time.Second)
		require.Equal(t, history.Transient, info.Class, "a step's error is transient by default")
		require.Equal(t, "default:step", info.ClassifiedBy)
		info = h.classify(task, plain, interpreter.Result{Err: errors.New("refused")}, 1, time.Second)
		require.Equal(t, history.Permanent, info.Class, "the body's own error is permanent by default")
		require.Equal(t, "default:workflow", info.ClassifiedBy)
	})
}

// classifyFailure's order, under the rules: a mark in Go code, then the
// policy, then the default.
func TestClassifyFailure(t *testing.T) {
	t.Parallel()
	http := activities.MustPolicy("http", "error.status == 429 || error.status >= 500")
	failed := func(err error) failure {
		return failure{Err: err, Default: history.Transient, DefaultBy: "default:step", Attempt: 1,
			Step: activities.PolicyStep{Name: "push"}}
	}

	// A mark in Go code wins over the policy.
	info := classifyFailure(failed(activities.Permanent(activities.WithStatus(errors.New("503"), 503))), http)
	require.Equal(t, history.Permanent, info.Class)
	require.Equal(t, "mark:permanent", info.ClassifiedBy)
	require.Empty(t, info.Policy)

	// Unmarked: the policy decides, and the evidence names it.
	info = classifyFailure(failed(errors.Wrap(activities.WithStatus(errors.New("bad request"), 400), "push")), http)
	require.Equal(t, history.Permanent, info.Class)
	require.Equal(t, "policy:http", info.ClassifiedBy)
	require.Equal(t, http.Expression(), info.Policy)
	require.Equal(t, 400, info.Status)

	// No policy: the default.
	info = classifyFailure(failed(errors.New("boom")), nil)
	require.Equal(t, history.Transient, info.Class)
	require.Equal(t, "default:step", info.ClassifiedBy)

	// A policy that fails to evaluate counts as permanent, with the reason.
	strict := activities.MustPolicy("strict", `error.attrs["provider"] == "openai"`)
	info = classifyFailure(failed(errors.New("boom")), strict)
	require.Equal(t, history.Permanent, info.Class)
	require.Equal(t, "policy:strict", info.ClassifiedBy)
	require.Contains(t, info.PolicyError, "no such key")

	// Retry-after is a transient mark and carries its hint.
	info = classifyFailure(failed(activities.RetryAfter(activities.WithStatus(errors.New("slow down"), 429), 1500*time.Millisecond)), http)
	require.Equal(t, history.Transient, info.Class)
	require.Equal(t, "mark:retry_after", info.ClassifiedBy)
	require.Equal(t, int64(1500), info.RetryAfterMillis)
	require.Equal(t, 429, info.Status)

	// Kind, status and attributes survive wrapping; outer attributes win.
	err := activities.WithAttrs(errors.Wrap(activities.WithAttrs(activities.WithKind(errors.New("quota"), "rate_limited"),
		map[string]string{"provider": "inner", "model": "m1"}), "call"), map[string]string{"provider": "outer"})
	info = classifyFailure(failed(err), nil)
	require.Equal(t, "rate_limited", info.Kind)
	require.Equal(t, map[string]string{"provider": "outer", "model": "m1"}, info.Attrs)
}
