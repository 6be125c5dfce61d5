package executor

import (
	"context"
	"strconv"
	"sync"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/interpreter"
	"github.com/cairnflow/cairn/sdk/internal/edge"
	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names cairn's instrumentation in the spans it makes. It is
// the sdk's import path, as before the executor moved out of the sdk:
// samplers and dashboards may select spans by it.
const tracerName = "github.com/cairnflow/cairn/sdk"

// attemptTrace makes an attempt's span and its steps' spans, under the
// trace the task was started with, when a tracer provider is configured;
// without one, every method does nothing.
type attemptTrace struct {
	tracer  trace.Tracer
	attempt trace.Span

	mu    sync.Mutex         // futures begin and end steps on their own goroutines
	steps map[int]trace.Span // the steps running now, by position
}

// startAttemptTrace begins the attempt's span: a child of the task's
// trace context (its trace id, a W3C traceparent or 32 hex digits), or a
// new trace when it has none.
func (h *Handler) startAttemptTrace(ctx context.Context, a *edge.Attempt, attempt int) (context.Context, *attemptTrace) {
	if h.tracerProvider == nil {
		return ctx, &attemptTrace{}
	}
	tracer := h.tracerProvider.Tracer(tracerName)
	if parent, ok := remoteParent(a.Task.TraceID, a.Task.ID); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	ctx, span := tracer.Start(ctx, "cairn.attempt "+a.Task.Type, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("cairn.task.id", a.Task.ID.String()),
			attribute.String("cairn.task.type", a.Task.Type),
			attribute.Int("cairn.task.version", a.Task.TypeVersion),
			attribute.String("cairn.queue", a.Task.Queue),
			attribute.Int("cairn.attempt", attempt),
			attribute.String("cairn.worker.id", h.workerID),
		))
	return ctx, &attemptTrace{tracer: tracer, attempt: span}
}

// stepContext begins a step's span under the attempt's; base is the
// context the step would run with.
func (t *attemptTrace) stepContext(base context.Context, s interpreter.StepInfo) context.Context {
	if t.tracer == nil {
		return base
	}
	ctx, span := t.tracer.Start(trace.ContextWithSpan(base, t.attempt), "cairn.step "+s.Name,
		trace.WithAttributes(attribute.String("cairn.step.name", s.Name), attribute.Int("cairn.step.position", s.Position),
			attribute.Bool("cairn.step.irreversible", s.Irreversible)))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.steps == nil {
		t.steps = map[int]trace.Span{}
	}
	t.steps[s.Position] = span
	return ctx
}

// stepDone ends the step's span.
func (t *attemptTrace) stepDone(s interpreter.StepInfo, err error) {
	t.mu.Lock()
	span, ok := t.steps[s.Position]
	delete(t.steps, s.Position)
	t.mu.Unlock()
	if ok {
		endSpan(span, err)
	}
}

// end ends the attempt's span with the attempt's error, if any, or the
// failure its outcome records (a retry, a failure, a dead letter).
func (t *attemptTrace) end(err error, outcome []history.Payload) {
	t.mu.Lock()
	for _, span := range t.steps { // steps cut short without a StepDone
		endSpan(span, err)
	}
	t.steps = nil
	t.mu.Unlock()
	if t.attempt == nil {
		return
	}
	if err == nil {
		err = outcomeError(outcome)
	}
	endSpan(t.attempt, err)
}

// outcomeError is the failure an attempt's outcome records, if any.
func outcomeError(outcome []history.Payload) error {
	for _, p := range outcome {
		switch p := p.(type) {
		case history.AttemptFailedData:
			return errors.Newf("attempt failed (%s): %s", p.Error.Class, p.Error.Message)
		case history.TaskFailedData:
			return errors.Newf("task failed: %s", p.Error.Message)
		case history.TaskDeadLetteredData:
			return errors.Newf("task dead-lettered: %s", p.Reason)
		}
	}
	return nil
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// remoteParent reads a task's trace id: a W3C traceparent
// ("00-<trace id>-<parent id>-<flags>") gives trace and parent; a bare
// 32-hex trace id gives the trace, under a parent id derived from the task
// id (the submitter's span is unknown).
func remoteParent(traceID string, taskID [16]byte) (trace.SpanContext, bool) {
	var cfg trace.SpanContextConfig
	switch len(traceID) {
	case 55:
		tid, err1 := trace.TraceIDFromHex(traceID[3:35])
		sid, err2 := trace.SpanIDFromHex(traceID[36:52])
		flags, err3 := strconv.ParseUint(traceID[53:55], 16, 8)
		if err1 != nil || err2 != nil || err3 != nil || traceID[2] != '-' || traceID[35] != '-' || traceID[52] != '-' {
			return trace.SpanContext{}, false
		}
		cfg = trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags)}
	case 32:
		tid, err := trace.TraceIDFromHex(traceID)
		if err != nil {
			return trace.SpanContext{}, false
		}
		var sid trace.SpanID
		copy(sid[:], taskID[8:])
		if !sid.IsValid() {
			return trace.SpanContext{}, false
		}
		cfg = trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}
	default:
		return trace.SpanContext{}, false
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}
