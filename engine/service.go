package engine

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

// service is the start/stop bookkeeping shared by long-lived components:
// Start runs the loop in one goroutine; stop is idempotent, safe before
// start, and waits for the loop to return.
type service struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (s *service) start(ctx context.Context, run func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return errors.New("service already started")
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		run(runCtx)
	}()
	return nil
}

func (s *service) stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	cancel(ErrStopped)
	<-done
}

// errAttr logs an error by its message. slog would print a cockroachdb
// error with %+v, stack trace and all, on every line.
func errAttr(err error) slog.Attr { return slog.String("err", err.Error()) }
