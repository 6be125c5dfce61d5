package activity

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
)

// Timeouts bound one run of a step: workflow.StepOpts' StartToClose and
// HeartbeatTimeout, as the interpreter hands them to [RunStep]. Zero values
// mean no limit.
type Timeouts struct {
	// StartToClose is how long one run of the step may take.
	StartToClose time.Duration
	// Heartbeat is how long the step may go without calling [Heartbeat]
	// (activities.Heartbeat). Set for long steps (a large OCR job, a
	// streamed LLM response) so a step that hangs is noticed long before
	// StartToClose.
	Heartbeat time.Duration
}

// Validate reports what is wrong with t, if anything.
func (t Timeouts) Validate() error {
	if t.StartToClose < 0 || t.Heartbeat < 0 {
		return errors.New("step timeouts must not be negative")
	}
	return nil
}

// Kinds of the timeout errors [RunStep] returns. Both are transient.
// activities re-exports them: step authors match on them in policies.
const (
	KindStartToCloseTimeout = "start_to_close_timeout"
	KindHeartbeatTimeout    = "heartbeat_timeout"
)

// abandonGrace is how long RunStep waits for a step that ignores its
// cancelled context before giving up on it.
const abandonGrace = time.Second

var (
	errStartToClose = errors.New("step exceeded its start-to-close timeout")
	errNoHeartbeat  = errors.New("step stopped heartbeating")
)

type heartbeatKey struct{}

// heartbeatState is when a step last beat, as time since start, so the
// monotonic clock measures it and a wall-clock step cannot fake a timeout.
type heartbeatState struct {
	start time.Time
	last  atomic.Int64 // nanoseconds since start
}

// Heartbeat tells [RunStep] that the step running under ctx is alive:
// what activities.Heartbeat does. It does nothing outside a step with a
// heartbeat timeout.
func Heartbeat(ctx context.Context) {
	if hb, ok := ctx.Value(heartbeatKey{}).(*heartbeatState); ok {
		hb.last.Store(int64(time.Since(hb.start)))
	}
}

// RunStep runs fn under t. When a limit is hit, fn's context is cancelled
// and RunStep returns a transient error of kind [KindStartToCloseTimeout]
// or [KindHeartbeatTimeout], whatever fn returned. A step that ignores its
// context is abandoned a second after that (its goroutine runs on, its
// result is dropped), so a hung call cannot hold the task forever.
func RunStep[Out any](ctx context.Context, t Timeouts, fn func(context.Context) (Out, error)) (Out, error) {
	if t.StartToClose <= 0 && t.Heartbeat <= 0 {
		return fn(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if t.StartToClose > 0 {
		timer := time.AfterFunc(t.StartToClose, func() { cancel(errStartToClose) })
		defer timer.Stop()
	}
	if t.Heartbeat > 0 {
		hb := &heartbeatState{start: time.Now()}
		ctx = context.WithValue(ctx, heartbeatKey{}, hb)
		stop := watchHeartbeat(hb, t.Heartbeat, func() { cancel(errNoHeartbeat) })
		defer stop()
	}
	type result struct {
		out Out
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.err = errors.Newf("step panicked: %v", p)
			}
			done <- r
		}()
		r.out, r.err = fn(ctx)
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done:
		case <-time.After(abandonGrace):
			r.err = errors.Wrap(context.Cause(ctx), "step abandoned: it did not return after its context was cancelled")
		}
	}
	if r.err == nil {
		// It finished, even if a limit fired as it returned: keep the
		// result rather than run the step again.
		return r.out, nil
	}
	return r.out, timeoutError(ctx, t, r.err)
}

// timeoutError turns a step's error into a timeout error if one of
// RunStep's limits cancelled ctx; otherwise it returns err unchanged.
func timeoutError(ctx context.Context, t Timeouts, err error) error {
	cause := context.Cause(ctx)
	var kind string
	var msg error
	switch {
	case errors.Is(cause, errStartToClose):
		kind, msg = KindStartToCloseTimeout, errors.Newf("step timed out after %s (start-to-close)", t.StartToClose)
	case errors.Is(cause, errNoHeartbeat):
		kind, msg = KindHeartbeatTimeout, errors.Newf("step sent no heartbeat for %s", t.Heartbeat)
	default:
		return err
	}
	return Transient(WithKind(errors.WithSecondaryError(msg, err), kind))
}

// watchHeartbeat calls expire once hb has gone quiet for timeout, checking
// when the last beat would expire rather than polling. It returns a stop
// function.
func watchHeartbeat(hb *heartbeatState, timeout time.Duration, expire func()) (stop func()) {
	var mu sync.Mutex // guards timer and stopped; held while the timer is set up
	var timer *time.Timer
	stopped := false
	mu.Lock()
	defer mu.Unlock()
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		left := timeout - (time.Since(hb.start) - time.Duration(hb.last.Load()))
		if left <= 0 {
			expire()
			return
		}
		timer.Reset(left)
	}
	timer = time.AfterFunc(timeout, check)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}
