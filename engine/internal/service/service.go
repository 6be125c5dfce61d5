// Package service is what every long-lived part of the runtime shares:
// the start/stop bookkeeping of a loop run in a goroutine of its own
// ([Base]), the report of a database out of reach once per change of
// state ([Outage]), the backoff between tries, and the error attribute of
// log lines. River keeps the same under rivershared (startstop,
// baseservice).
//
// It imports engine/store only (for [store.ErrUnavailable]).
package service

import (
	"context"
	"log/slog"
	"sync"

	"github.com/cockroachdb/errors"
)

// ErrStopped is the cancellation cause of a service's run context when the
// service is stopped on purpose, telling a controlled stop apart from the
// caller's cancellation.
var ErrStopped = errors.New("service stopped")

// Base is the start/stop bookkeeping shared by long-lived components:
// Start runs the loop in one goroutine; Stop is idempotent, safe before
// Start, and waits for the loop to return. A Start while the loop runs is
// refused; once it has returned (stopped, or its context ended), Start
// runs it again: the leader's maintenance services start and stop with
// each term of leadership. Its zero value is ready to use.
type Base struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the loop returns; nil before the first Start
}

// Start runs run in a goroutine of its own with a context derived from
// ctx, cancelled with cause [ErrStopped] by Stop. It returns at once.
func (b *Base) Start(ctx context.Context, run func(ctx context.Context)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		select {
		case <-b.done:
		default:
			return errors.New("service already started")
		}
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		defer cancel(nil)
		run(runCtx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for the loop to return.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if done == nil {
		return
	}
	cancel(ErrStopped)
	<-done
}

// ErrAttr logs an error by its message. slog would print a cockroachdb
// error with %+v, stack trace and all, on every line.
func ErrAttr(err error) slog.Attr { return slog.String("err", err.Error()) }
