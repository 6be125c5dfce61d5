package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
	"github.com/cairnflow/cairn/internal/errmark"
)

// StepOptions are a step's options as the interpreter and the attempt
// executor use them: workflow.StepOpts (whose fields document them for
// authors), translated by workflow.Step. A nil *StepOptions takes every
// default.
type StepOptions struct {
	// Retry overrides the workflow type's retry policy for this step's
	// failures.
	Retry *activities.RetryPolicy
	// Timeouts bound one run of the step (and of its compensator).
	Timeouts activity.Timeouts
	// Irreversible: once started, the step runs to completion even when
	// the task's cancel arrives.
	Irreversible bool
	// Compensate undoes the step, given its recorded output.
	Compensate func(ctx context.Context, output json.RawMessage) error
	// CompensationRetry is the retry policy of the compensator. Default:
	// Retry, else the workflow type's.
	CompensationRetry *activities.RetryPolicy
	// Spend is what the step declares it may spend, for the run's Gate.
	Spend *history.Spend
}

func (o *StepOptions) validate() error {
	if o == nil {
		return nil
	}
	for _, r := range []*activities.RetryPolicy{o.Retry, o.CompensationRetry} {
		if r == nil {
			continue
		}
		if err := r.Validate(); err != nil {
			return err
		}
	}
	if o.Spend != nil {
		if err := o.Spend.Validate(); err != nil {
			return err
		}
	}
	if o.Irreversible && o.Timeouts != (activity.Timeouts{}) {
		return errors.New("an irreversible step runs to completion: it takes no StartToClose or HeartbeatTimeout")
	}
	return o.Timeouts.Validate()
}

func (o *StepOptions) spend() *history.Spend {
	if o == nil {
		return nil
	}
	return o.Spend
}

func (o *StepOptions) timeouts() activity.Timeouts {
	if o == nil {
		return activity.Timeouts{}
	}
	return o.Timeouts
}

// Step runs fn as the step called name at the current position of ctx's
// run, or, if the history already recorded that step, returns its recorded
// output without running fn: what workflow.Step does (its documentation
// holds the contract for authors).
//
// A step's error ends the run: Step returns it, and every later Step or
// [Sleep] call in the run returns it too without running anything.
func Step[Out any](ctx Context, name string, fn func(context.Context) (Out, error), opts *StepOptions) (Out, error) {
	var zero Out
	s := ctx.run()
	if err := s.enter("Step"); err != nil {
		return zero, err
	}
	if err := s.yield("step"); err != nil {
		return zero, err
	}
	pos, rec, err := s.claim(name, opts, false)
	if err != nil {
		return zero, err
	}
	if rec != nil {
		return decodeRecorded[Out](s, pos, name, rec)
	}
	info, stepCtx, err := s.prepare(pos, name, opts)
	if err != nil {
		return zero, err
	}
	out, done, err := execute(s, stepCtx, info, fn, opts)
	if err != nil {
		return zero, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.visited[pos] = opts
	// Kept for the next call's flush, or for the caller's outcome append.
	s.pending = done
	return out, nil
}

// claim takes the next position for the step (or future, or remote step:
// remote) called name. It returns the step the history recorded there, if
// any (nil: the step is new and must run), or the error that refuses the
// call.
func (s *runState) claim(name string, opts *StepOptions, remote bool) (int, *history.Step, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted != nil {
		return 0, nil, s.aborted
	}
	pos := s.next
	if rec, ok := s.recorded(pos); ok {
		if rec.Name != name {
			return pos, nil, s.abortLocked(nondeterministic(pos, rec.Name, name), nil)
		}
		s.visited[pos] = opts
		s.next++
		return pos, &rec, nil
	}
	if t := s.p.Timer; t != nil && t.Position == pos {
		// The history has the workflow asleep here: a step in its place
		// is a different sequence, not a step to run.
		return pos, nil, s.abortLocked(nondeterministic(pos, "sleep", name), nil)
	}
	if r, ok := s.remoteAt(pos); ok {
		if !remote {
			// A remote step dispatched here: a Go step in its place is a
			// different sequence too.
			return pos, nil, s.abortLocked(nondeterministic(pos, r.Name, name), nil)
		}
		s.next++
		return pos, nil, nil // the remote call reads what the history has of it
	}
	if s.p.CollectOnly {
		if pos < s.recordedEnd() {
			// A gap before steps on record ahead: this call fails, and the
			// run goes on so their options are collected too.
			s.next++
			return pos, nil, ErrCollected
		}
		return pos, nil, s.abortLocked(s.collectLocked(fmt.Sprintf("step %d %q", pos, name), "step"), nil)
	}
	s.next++
	return pos, nil, nil
}

// recorded returns the step the history recorded at pos, in Steps or
// ahead of them.
func (s *runState) recorded(pos int) (history.Step, bool) {
	if pos < len(s.p.Steps) {
		return s.p.Steps[pos], true
	}
	i, ok := slices.BinarySearchFunc(s.p.Ahead, pos, func(st history.Step, pos int) int { return st.Position - pos })
	if !ok {
		return history.Step{}, false
	}
	return s.p.Ahead[i], true
}

// recordedEnd is the position after the last step on record.
func (s *runState) recordedEnd() int {
	if n := len(s.p.Ahead); n > 0 {
		return max(len(s.p.Steps), s.p.Ahead[n-1].Position+1)
	}
	return len(s.p.Steps)
}

// decodeRecorded is the recorded output of the step at pos.
func decodeRecorded[Out any](s *runState, pos int, name string, rec *history.Step) (Out, error) {
	var out, zero Out
	if history.MaybeSealed(rec.Output) {
		return zero, s.abort(errSealed(fmt.Sprintf("step %d (%s)'s recorded output", pos, name)), nil)
	}
	if len(rec.Output) > 0 {
		if err := json.Unmarshal(rec.Output, &out); err != nil {
			err = errors.Wrapf(err, "step %d (%s): decode recorded output", pos, name)
			return zero, s.abort(errmark.Mark(err, ErrNondeterministic), nil)
		}
	}
	return out, nil
}

// prepare readies a new step at pos to run: the step before it is
// recorded, the run has not been stopped, its options are valid. It
// returns the step's context.
func (s *runState) prepare(pos int, name string, opts *StepOptions) (StepInfo, context.Context, error) {
	info := StepInfo{Position: pos, Name: name, Irreversible: opts != nil && opts.Irreversible}
	if err := s.flush(); err != nil {
		return info, nil, err
	}
	if err := s.checkpoint(); err != nil {
		return info, nil, err
	}
	// Remote steps and children called before the step go out before it
	// runs: a long step must not hold them back.
	if err := s.dispatchQueued(); err != nil {
		return info, nil, err
	}
	if err := s.startQueued(); err != nil {
		return info, nil, err
	}
	if err := opts.validate(); err != nil {
		err = errmark.Mark(errors.Wrapf(err, "%s", info), ErrBadStepOpts)
		return info, nil, s.abort(err, &info)
	}
	stepCtx := s.p.Context
	if s.p.StepContext != nil {
		stepCtx = s.p.StepContext(info)
	}
	return info, stepCtx, nil
}

// execute runs a new step and returns its output and its completion. Its
// failure aborts the run, unless the body has already returned (the run's
// end is the body's: see endFutures).
func execute[Out any](s *runState, stepCtx context.Context, info StepInfo, fn func(context.Context) (Out, error), opts *StepOptions) (Out, history.StepCompletedData, error) {
	var zero Out
	settle, err := s.gate(stepCtx, info, opts)
	if err != nil {
		return zero, history.StepCompletedData{}, err
	}
	usage := activity.NewUsageRecorder()
	stepCtx = activity.WithUsageRecorder(stepCtx, usage)
	started := time.Now()
	out, err := activity.RunStep(stepCtx, opts.timeouts(), func(ctx context.Context) (Out, error) {
		return callStep(ctx, fn)
	})
	ran := time.Since(started)
	if s.p.StepDone != nil {
		s.p.StepDone(info, err)
	}
	if settle != nil {
		if serr := settle(usage.Usage(), err); serr != nil && err == nil {
			// The step ran but what it spent is not settled: the run
			// stops as when its record fails, and the step runs again.
			err = errmark.Mark(errors.Wrapf(serr, "%s: settle its spend", info), ErrRecordFailed)
			opts = nil
		}
	}
	var encoded []byte
	if err == nil {
		encoded, err = json.Marshal(out)
		if err == nil && HasNULEscape(encoded) {
			err = errmark.Mark(errors.New("output contains the character U+0000, which PostgreSQL cannot store in JSON"), ErrUnstorable)
		}
		if err != nil {
			opts = nil // the step ran; its retry policy is not what failed
			err = errors.Wrapf(err, "step %d (%s): encode output", info.Position, info.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executed++
	if err != nil {
		if s.aborted == nil && !s.futures.returned {
			s.failedOp, s.failedUsage = opts, usage.Usage()
			s.abortLocked(err, &info)
		}
		return zero, history.StepCompletedData{}, err
	}
	return out, history.StepCompletedData{
		Position: info.Position, Name: info.Name, Output: encoded, Compensable: opts != nil && opts.Compensate != nil,
		DurationMillis: ran.Milliseconds(), Usage: usage.Usage(),
	}, nil
}

// gate asks the run's Gate about the step about to run (see
// [RunParams.Gate]); a refusal aborts the run as the step's own failure
// would, before it ran.
func (s *runState) gate(ctx context.Context, info StepInfo, opts *StepOptions) (func([]history.Usage, error) error, error) {
	if s.p.Gate == nil {
		return nil, nil
	}
	var settle func([]history.Usage, error) error
	err := context.Cause(ctx)
	if err == nil {
		// A step whose context has ended (a future the body left
		// running, cancelled at its return) does not run: it must not
		// reserve, nor be refused in a way that ends the attempt.
		settle, err = s.p.Gate(ctx, info, opts.spend())
	}
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.executed++
		if s.aborted == nil && !s.futures.returned && !(info.Future && errors.Is(err, ErrFutureOnly)) {
			s.failedOp = opts
			s.abortLocked(err, &info)
		}
		return nil, err
	}
	return settle, nil
}

// ErrFutureOnly marks a Gate's refusal that fails a future's step alone,
// not the run: the body decides, by returning the future's error or not
// (see [RunParams.Gate]).
var ErrFutureOnly = errors.New("the refusal fails the future's step only")

// flush records the step executed last, if it is not on record yet.
func (s *runState) flush() error {
	s.mu.Lock()
	if s.pending == nil {
		s.mu.Unlock()
		return nil
	}
	if timedOut, ok := s.pending.(history.WaitTimedOutData); ok {
		// A receive's record takes no step position: it is recorded now,
		// outside the positional queue of steps and timers.
		s.pending = nil
		s.mu.Unlock()
		return s.recordNow(timedOut)
	}
	done := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.record(done)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// recordFailed is the abort of a run whose completion done could not be
// recorded.
func recordFailed(done history.Payload, err error) error {
	what := string(done.EventType())
	if step, ok := done.(history.StepCompletedData); ok {
		what = fmt.Sprintf("step %d (%s)", step.Position, step.Name)
	}
	return errmark.Mark(errors.Wrapf(err, "record %s", what), ErrRecordFailed)
}

// checkpoint stops the run before a new step when the worker is stopping or
// the attempt is over.
// recordNow records p, which has no step position, behind the
// completions being recorded.
func (s *runState) recordNow(p history.Payload) error {
	s.futures.recMu.Lock()
	defer s.futures.recMu.Unlock()
	err := s.p.Record(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.futures.broken = true
		return s.abortLocked(recordFailed(p, err), nil)
	}
	return s.aborted
}

// now is the clock Sleep and Receive read: RunParams.Now, else time.Now.
func (s *runState) now() time.Time {
	if s.p.Now != nil {
		return s.p.Now()
	}
	return time.Now()
}

// waitOut waits d (nothing when d is not positive): what a worker whose
// clock trails the database's waits before a timer or deadline the claim
// found due. A stop or the attempt's end cuts it short with the run's
// abort.
func (s *runState) waitOut(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.p.Stopping:
		return s.abort(ErrStopping, nil)
	case <-s.p.Context.Done():
		return s.abort(context.Cause(s.p.Context), nil)
	}
}

func (s *runState) checkpoint() error {
	select {
	case <-s.p.Stopping:
		return s.abort(ErrStopping, nil)
	default:
	}
	if err := context.Cause(s.p.Context); err != nil {
		return s.abort(err, nil)
	}
	return nil
}

func (s *runState) abort(err error, step *StepInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abortLocked(err, step)
}

// abortLocked is abort with s.mu held.
func (s *runState) abortLocked(err error, step *StepInfo) error {
	if s.aborted == nil {
		s.aborted, s.failed = err, step
	}
	return s.aborted
}

func callStep[Out any](ctx context.Context, fn func(context.Context) (Out, error)) (out Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.Newf("step panicked: %v", r)
		}
	}()
	return fn(ctx)
}

// SleepRequest is the error a run ends with when the workflow sleeps on a
// new durable timer: the caller records timer_started, which ends the
// attempt; the task is due again at FireAt.
type SleepRequest struct {
	Position int
	FireAt   time.Time
}

func (r *SleepRequest) Error() string {
	return fmt.Sprintf("sleeping at step %d until %s", r.Position, r.FireAt.Format(time.RFC3339Nano))
}

// Sleep pauses ctx's run for d, durably: what workflow.Sleep does (its
// documentation holds the contract for authors). The first time it is
// reached, the run ends with a [*SleepRequest]; run again with the task's
// [RunParams.Timer] at this position, it fires the timer (Result.Pending is
// then timer_fired) and goes on.
func Sleep(ctx Context, d time.Duration) error {
	s := ctx.run()
	if err := s.enter("Sleep"); err != nil {
		return err
	}
	if err := s.yield("sleep"); err != nil {
		return err
	}
	pos, recorded, err := s.claimSleep()
	if err != nil || recorded {
		return err
	}
	// The timer is recorded at its position, after every step before it:
	// settled first (see settle).
	if err := s.settle(); err != nil {
		return err
	}
	if t := s.p.Timer; t != nil && t.Position == pos {
		left := t.FireAt.Sub(s.now())
		if left > maxClockSkewWait {
			// Woken early (an update was applied): sleep again, to the
			// same time.
			return s.abort(&SleepRequest{Position: pos, FireAt: t.FireAt}, nil)
		}
		// Woken by the timer. The claim went by the database clock; if
		// this worker's clock is behind, wait out the difference.
		if err := s.waitOut(left); err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.pending = history.TimerFiredData{Position: pos}
		return s.aborted
	}
	return s.abort(&SleepRequest{Position: pos, FireAt: s.now().Add(max(d, 0))}, nil)
}

// claimSleep takes the next position for a sleep; recorded says the
// history has it done already.
func (s *runState) claimSleep() (pos int, recorded bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted != nil {
		return 0, false, s.aborted
	}
	pos = s.next
	if rec, ok := s.recorded(pos); ok {
		if rec.Name != history.SleepStepName {
			return pos, false, s.abortLocked(nondeterministic(pos, rec.Name, history.SleepStepName), nil)
		}
		s.next++
		return pos, true, nil
	}
	if r, ok := s.remoteAt(pos); ok {
		return pos, false, s.abortLocked(nondeterministic(pos, r.Name, history.SleepStepName), nil)
	}
	if s.p.CollectOnly {
		return pos, false, s.abortLocked(s.collectLocked(fmt.Sprintf("sleep at step %d", pos), "sleep"), nil)
	}
	s.next++
	return pos, false, nil
}

// nextRecorded is the first step on record at s.next or after.
func (s *runState) nextRecorded() history.Step {
	if rec, ok := s.recorded(s.next); ok {
		return rec
	}
	for _, rec := range s.p.Ahead {
		if rec.Position >= s.next {
			return rec
		}
	}
	return history.Step{}
}
