package interpreter

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Futures run several steps of one attempt at once (what workflow.Go and
// workflow.Map are made of). Determinism comes from positions: a future
// takes its position when Go is called, on the body's goroutine, so a
// replay assigns the same positions whatever order the steps finished in.
//
// A future's completion is recorded as soon as it finishes (one record at
// a time, under recMu, so appends never overlap), whatever the positions
// before it: the history keeps steps on record ahead of a position not on
// record (history.State.Ahead), so a step that finished is never run again
// because one before it ran on, failed, or was cut off by a crash.
//
// When the body returns, futures still running are waited for, and
// recorded when they finish, unless the run succeeded: an attempt that
// ends otherwise (a step failed, a stop, a wait) keeps what its running
// steps finish, as their effects have happened; their timeouts bound the
// wait, and a cancel, a lost lease or a hard stop end their contexts. A
// run that succeeded cancels them (errAbandoned) and records nothing more:
// the task's result does not depend on them.

// errAbandoned is the cause a future's step context ends with when the
// workflow body returned, successfully, while the step was still running.
var errAbandoned = errors.New("cairn/workflow: the workflow returned before this step finished")

// futureSet is the run's bookkeeping of its futures. Fields are guarded by
// runState.mu, except recMu and wg.
type futureSet struct {
	recMu    sync.Mutex                      // held while a completion is being recorded
	wg       sync.WaitGroup                  // the futures' goroutines
	inFlight map[int]context.CancelCauseFunc // running futures, by position
	returned bool                            // the body returned: a step's failure no longer aborts the run
	closed   bool                            // the run ended: nothing more is recorded
	broken   bool                            // a record failed: nothing more is recorded
}

func (f *futureSet) init() {
	f.inFlight = map[int]context.CancelCauseFunc{}
}

// Future is a step running concurrently with the workflow body (see [Go]).
type Future[Out any] struct {
	done chan struct{}
	out  Out
	err  error
	pos  int // its step's position; -1 for a call refused before it took one
}

func resolved[Out any](out Out, err error) *Future[Out] {
	f := &Future[Out]{done: make(chan struct{}), out: out, err: err, pos: -1}
	close(f.done)
	return f
}

// Get waits for the future's step and returns its output or its error:
// what workflow's Future.Get does.
func (f *Future[Out]) Get(ctx Context) (Out, error) {
	// Not enter: a future is joined for its own result even after
	// another step aborted the run, so what it finished is recorded.
	if err := ctx.run().checkGoroutine("Future.Get"); err != nil {
		var zero Out
		return zero, err
	}
	<-f.done
	return f.out, f.err
}

// Go starts fn as the step called name at the current position of ctx's
// run and returns at once; the step's result is the future's. A step the
// history recorded is not run: the future holds its recorded output. The
// step's failure ends the attempt as [Step]'s does (the run is aborted with
// it, and Get returns it).
func Go[Out any](ctx Context, name string, fn func(context.Context) (Out, error), opts *StepOptions) *Future[Out] {
	var zero Out
	s := ctx.run()
	if err := s.enter("Go"); err != nil {
		return resolved(zero, err)
	}
	if err := s.yield("step"); err != nil {
		return resolved(zero, err)
	}
	pos, rec, err := s.claim(name, opts, false)
	if err != nil {
		return resolved(zero, err)
	}
	if rec != nil {
		f := resolved(decodeRecorded[Out](s, pos, name, rec))
		f.pos = pos
		return f
	}
	info, stepCtx, err := s.prepare(pos, name, opts)
	if err != nil {
		return resolved(zero, err)
	}
	info.Future = true
	stepCtx, cancel := context.WithCancelCause(stepCtx)
	f := &Future[Out]{done: make(chan struct{}), pos: pos}
	s.mu.Lock()
	s.futures.inFlight[pos] = cancel
	s.mu.Unlock()
	s.futures.wg.Add(1)
	go func() {
		defer s.futures.wg.Done()
		defer close(f.done)
		defer cancel(nil)
		out, done, err := execute(s, stepCtx, info, fn, opts)
		s.mu.Lock()
		delete(s.futures.inFlight, pos)
		record := err == nil && !s.futures.closed
		if record {
			s.visited[pos] = opts
		}
		s.mu.Unlock()
		f.out, f.err = out, err
		if record {
			// Before f.done: Get returns once the step is on record.
			s.record(done)
		}
	}()
	return f
}

// record records a completed step at once, behind the records under way,
// unless nothing more may be recorded. A failed record aborts the run.
func (s *runState) record(done history.Payload) {
	f := &s.futures
	f.recMu.Lock()
	defer f.recMu.Unlock()
	s.mu.Lock()
	skip := f.closed || f.broken
	s.mu.Unlock()
	if skip {
		return
	}
	if err := s.p.Record(done); err != nil {
		s.mu.Lock()
		f.broken = true
		s.abortLocked(recordFailed(done, err), nil)
		s.mu.Unlock()
	}
}

// awaitFutures waits until every future started so far has finished (and,
// if it could be, is on record).
func (s *runState) awaitFutures() { s.futures.wg.Wait() }

// endFutures settles the futures still running when the body returned:
// after a successful run their contexts are cancelled and nothing they
// produce is recorded; otherwise they run to their end and what they
// finish is recorded (see the comment at the top of this file). It
// returns once their goroutines have.
func (s *runState) endFutures(succeeded bool) {
	s.mu.Lock()
	s.futures.returned = true
	if succeeded {
		s.futures.closed = true
		for _, cancel := range s.futures.inFlight {
			cancel(errAbandoned)
		}
	}
	s.mu.Unlock()
	s.futures.wg.Wait()
	s.mu.Lock()
	s.futures.closed = true
	s.mu.Unlock()
}

// enter admits a call of the workflow API (api names it) from the body's
// goroutine only. Any other goroutine is one the workflow started itself:
// its calls would take positions in whatever order the scheduler ran them,
// so replay could not assign them again; the run fails as
// non-deterministic instead. It returns the run's abort, if any.
func (s *runState) enter(api string) error {
	if err := s.inUpdate(api); err != nil {
		return err
	}
	if err := s.checkGoroutine(api); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// checkGoroutine aborts the run, and returns the abort, when api is called
// from a goroutine other than the body's.
func (s *runState) checkGoroutine(api string) error {
	if s.readOnly.Load() {
		return errReadOnly(api)
	}
	if onBodyGoroutine() {
		return nil
	}
	err := errors.Newf("workflow.%s called from a goroutine the workflow did not start with workflow.Go; use workflow.Go or workflow.Map", api)
	err = errors.WithHint(err, "a workflow body's calls of Step, Sleep, Receive, Go and Future.Get must come from the goroutine that runs it; "+
		"workflow.Go runs steps concurrently with positions in call order")
	return s.abort(errmark.Mark(err, ErrNondeterministic), nil)
}

// runBody calls the workflow body. Its frame on a goroutine's stack marks
// the body's goroutine: a goroutine's stack holds only the frames of what
// it started with, so one the body (or a future) started has none.
//
//go:noinline
func runBody(fn Func, ctx Context, input json.RawMessage) (json.RawMessage, error) {
	return fn(ctx, input)
}

// bodyReturnPC is the return address of runBody's call of the body, the
// program counter its frame has on every body goroutine's stack; found
// once, by calling runBody with a body that reads it.
var bodyReturnPC = func() uintptr {
	var pc [1]uintptr
	_, _ = runBody(func(Context, json.RawMessage) (json.RawMessage, error) {
		runtime.Callers(2, pc[:]) // 0: Callers, 1: this body, 2: runBody
		return nil, nil
	}, nil, nil)
	return pc[0]
}()

// onBodyGoroutine reports whether the caller runs on a workflow body's
// goroutine: whether runBody's frame is on its stack. It reads return
// addresses only (runtime.Callers), a page at a time; the goroutine id a
// stack trace would give costs a formatted traceback per workflow call.
//
// A call from the body itself finds runBody a few frames up, so the first
// look reads those few alone: unwinding the frames below runBody (the
// worker's) was half of the check's cost, paid at every call of the
// workflow API. Only a miss reads the whole stack.
func onBodyGoroutine() bool {
	var near [8]uintptr
	if n := runtime.Callers(2, near[:]); slices.Contains(near[:n], bodyReturnPC) {
		return true
	}
	var pcs [64]uintptr
	for skip := 2; ; skip += len(pcs) {
		n := runtime.Callers(skip, pcs[:])
		for _, pc := range pcs[:n] {
			if pc == bodyReturnPC {
				return true
			}
		}
		if n < len(pcs) {
			return false
		}
	}
}
