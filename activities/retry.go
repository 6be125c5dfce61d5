package activities

import (
	"fmt"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
)

// Jitter says how a backoff delay is drawn below its ceiling.
type Jitter int

const (
	// FullJitter draws the delay uniformly from [0, ceiling]: the spread
	// that best keeps tasks that failed together from returning as a herd.
	// The default.
	FullJitter Jitter = iota
	// EqualJitter draws from [ceiling/2, ceiling].
	EqualJitter
	// NoJitter waits exactly the ceiling.
	NoJitter
)

// RetryPolicy says how often and how soon a failed step is tried again, and
// which of its errors are worth it. Its budget (MaxAttempts, MaxElapsed)
// is per step: it counts from the step's first attempt, and a requeued task
// starts it afresh.
type RetryPolicy struct {
	// MaxAttempts is the most attempts a step gets, the first included.
	MaxAttempts int
	// MaxElapsed, when not 0, is the time budget since the step's first
	// attempt: no attempt is scheduled to start after it.
	MaxElapsed time.Duration
	// InitialInterval is the backoff ceiling after the first failure.
	InitialInterval time.Duration
	// Multiplier grows the ceiling after each further failure.
	Multiplier float64
	// MaxInterval caps the ceiling.
	MaxInterval time.Duration
	// Jitter draws each delay below its ceiling. Default FullJitter.
	Jitter Jitter
	// Classifier decides the class of errors no mark in Go code decided.
	// Optional: a step's policy without one uses the workflow type's;
	// with none at all, a step's errors are transient and the workflow
	// body's permanent.
	Classifier *Policy
}

// DefaultRetryPolicy is used where none is given: 10 attempts, backoff from
// 1s doubling to at most 5m, with full jitter, no time budget.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:     history.DefaultMaxAttempts, // what a task recorded without a budget gets
	InitialInterval: time.Second,
	Multiplier:      2,
	MaxInterval:     5 * time.Minute,
}

// WithDefaults returns p with its zero fields taken from
// [DefaultRetryPolicy], so a policy that sets only what it means
// (RetryPolicy{MaxAttempts: 3}) is whole: MaxAttempts 10, InitialInterval
// 1s, Multiplier 2, MaxInterval 5m or InitialInterval if that is longer.
// Zero Jitter is FullJitter and zero MaxElapsed no time budget, as always.
// Values that are set, wrong ones included, are kept for Validate to judge.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.MaxAttempts == 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = d.InitialInterval
	}
	if p.Multiplier == 0 {
		p.Multiplier = d.Multiplier
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = max(d.MaxInterval, p.InitialInterval)
	}
	return p
}

// Validate reports what is wrong with p, if anything. Zero fields are
// wrong here: take [RetryPolicy.WithDefaults] first, as cairn does with
// every policy it is given.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return errors.Newf("retry policy: MaxAttempts %d must be at least 1", p.MaxAttempts)
	case p.InitialInterval < 0 || p.MaxInterval < 0 || p.MaxElapsed < 0:
		return errors.New("retry policy: intervals and MaxElapsed must not be negative")
	case !(p.Multiplier >= 1): // also refuses NaN
		return errors.Newf("retry policy: Multiplier %g must be at least 1", p.Multiplier)
	case p.MaxInterval < p.InitialInterval:
		return errors.Newf("retry policy: MaxInterval %s is below InitialInterval %s", p.MaxInterval, p.InitialInterval)
	case p.Jitter < FullJitter || p.Jitter > NoJitter:
		return errors.Newf("retry policy: unknown Jitter %d", p.Jitter)
	}
	return nil
}

// Ceiling is the largest backoff after failed attempt number attempt (1
// for the first): InitialInterval × Multiplier^(attempt-1), capped at
// MaxInterval.
func (p RetryPolicy) Ceiling(attempt int) time.Duration {
	d := float64(p.InitialInterval)
	for i := 1; i < attempt && d < float64(p.MaxInterval); i++ {
		d *= p.Multiplier
	}
	if !(d < float64(p.MaxInterval)) {
		return p.MaxInterval
	}
	return time.Duration(d)
}

// Backoff returns the delay before the attempt after failed attempt number
// attempt: below Ceiling(attempt) as Jitter says, drawing from random,
// which returns a number in [0, 1).
func (p RetryPolicy) Backoff(attempt int, random func() float64) time.Duration {
	ceiling := float64(p.Ceiling(attempt))
	switch p.Jitter {
	case NoJitter:
		return time.Duration(ceiling)
	case EqualJitter:
		return time.Duration(ceiling/2 + random()*ceiling/2)
	}
	return time.Duration(random() * ceiling)
}

// Decision is what follows a failed attempt.
type Decision struct {
	Retry bool
	// Delay is how long to wait before the next attempt, when Retry.
	Delay time.Duration
	// Reason says why the task is given up, when not Retry.
	Reason string
}

// Decide says whether the step that failed with info is tried again, and
// when. attempts is how many attempts the step has had (the failed one
// included) and elapsed the time since its first began. A permanent error
// is never retried; a retry-after hint replaces the backoff; no attempt is
// scheduled past MaxAttempts or MaxElapsed.
func (p RetryPolicy) Decide(info history.ErrorInfo, attempts int, elapsed time.Duration, random func() float64) Decision {
	if info.Class == history.Permanent {
		return Decision{Reason: fmt.Sprintf("permanent error (%s)", info.ClassifiedBy)}
	}
	if attempts >= p.MaxAttempts {
		return Decision{Reason: fmt.Sprintf("retries exhausted: attempt %d of %d failed", attempts, p.MaxAttempts)}
	}
	delay := p.Backoff(attempts, random)
	if info.RetryAfterMillis > 0 {
		delay = time.Duration(info.RetryAfterMillis) * time.Millisecond
	}
	if p.MaxElapsed > 0 && elapsed+delay > p.MaxElapsed {
		return Decision{Reason: fmt.Sprintf("retry budget exhausted: the next attempt would start %s after the first, over the budget of %s",
			(elapsed + delay).Round(time.Millisecond), p.MaxElapsed)}
	}
	return Decision{Retry: true, Delay: delay}
}
