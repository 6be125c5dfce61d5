package activities

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Marks that classify an error. They are cockroachdb/errors marks, so they
// survive wrapping with errors.Wrap and friends, and a mark set in Go wins
// over any policy.
var (
	// The messages are unusual on purpose: cockroachdb/errors matches marks
	// by type and message, so an unrelated errors.New("permanent error")
	// must not count as one.
	ErrPermanent = errors.New("cairn/activities: permanent")
	ErrTransient = errors.New("cairn/activities: transient")
)

// Permanent marks err as not worth retrying: the task fails at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return errmark.Mark(err, ErrPermanent)
}

// Transient marks err as worth retrying, within the retry budget.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return errmark.Mark(err, ErrTransient)
}

// KindError lets an error name its kind: a stable code such as "bad_input"
// or "rate_limited" that the history records and policies match on.
type KindError interface {
	error
	ErrorKind() string
}

// StatusError lets an error carry a status code (e.g. an HTTP status).
type StatusError interface {
	error
	ErrorStatus() int
}

// RetryAfter marks err as transient and asks for the next attempt no sooner
// than d from now (an HTTP 429's Retry-After, a provider's quota reset).
// The hint wins over the policy's backoff; the retry budget still applies.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return errmark.Mark(&retryAfterError{cause: err, after: max(d, 0)}, ErrTransient)
}

type retryAfterError struct {
	cause error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.cause.Error() }
func (e *retryAfterError) Unwrap() error { return e.cause }
func (e *retryAfterError) Cause() error  { return e.cause }

// WithKind attaches a kind to err, as [KindError] does: a stable code
// ("rate_limited", "bad_document") the history records and policies match
// on as error.kind.
func WithKind(err error, kind string) error {
	if err == nil {
		return nil
	}
	return &detailError{cause: err, kind: kind}
}

// WithStatus attaches a status code (an HTTP status) to err, as
// [StatusError] does; policies see it as error.status.
func WithStatus(err error, status int) error {
	if err == nil {
		return nil
	}
	return &detailError{cause: err, status: status}
}

// WithAttrs attaches attributes to err: the history records them and
// policies see them as error.attrs. Attributes of outer wrappers win.
func WithAttrs(err error, attrs map[string]string) error {
	if err == nil {
		return nil
	}
	return &detailError{cause: err, attrs: attrs}
}

type detailError struct {
	cause  error
	kind   string
	status int
	attrs  map[string]string
}

func (e *detailError) Error() string { return e.cause.Error() }
func (e *detailError) Unwrap() error { return e.cause }
func (e *detailError) Cause() error  { return e.cause }

// ErrorKind implements [KindError] when a kind was attached; otherwise the
// kind of the wrapped error shows through.
func (e *detailError) ErrorKind() string {
	if e.kind != "" {
		return e.kind
	}
	return kindOf(e.cause)
}

// ErrorStatus implements [StatusError] likewise.
func (e *detailError) ErrorStatus() int {
	if e.status != 0 {
		return e.status
	}
	var se StatusError
	if errors.As(e.cause, &se) {
		return se.ErrorStatus()
	}
	return 0
}

// Describe turns err into failure evidence: class (from the marks; otherwise
// defaultClass), message, kind (the error's own kind, else its Go type),
// status, attributes and a retry-after hint, and ClassifiedBy saying which
// mark or default decided the class. A cancelled or timed-out context is
// transient unless marked otherwise: the attempt was interrupted, not
// refused.
func Describe(err error, defaultClass history.Class) history.ErrorInfo {
	info := history.ErrorInfo{Class: defaultClass, Message: storable(err.Error()), Kind: storable(kindOf(err)),
		ClassifiedBy: "default"}
	var se StatusError
	if errors.As(err, &se) {
		info.Status = se.ErrorStatus()
	}
	info.Attrs = attrsOf(err)
	var ra *retryAfterError
	hasHint := errors.As(err, &ra)
	if hasHint {
		info.RetryAfterMillis = ra.after.Milliseconds()
	}
	switch {
	case errors.Is(err, ErrPermanent):
		info.Class, info.ClassifiedBy = history.Permanent, "mark:permanent"
	case hasHint:
		info.Class, info.ClassifiedBy = history.Transient, "mark:retry_after"
	case errors.Is(err, ErrTransient):
		info.Class, info.ClassifiedBy = history.Transient, "mark:transient"
	case errors.IsAny(err, context.Canceled, context.DeadlineExceeded):
		info.Class, info.ClassifiedBy = history.Transient, "rule:interrupted"
	}
	return info
}

// Marked reports whether a mark in Go code (or an interruption) decided
// info's class, so no policy is consulted.
func Marked(info history.ErrorInfo) bool {
	return strings.HasPrefix(info.ClassifiedBy, "mark:") || strings.HasPrefix(info.ClassifiedBy, "rule:")
}

// Failure is a failed attempt as classification sees it.
type Failure struct {
	Err error
	// Default is the class when neither a mark nor a policy decides, and
	// DefaultBy what ClassifiedBy then says.
	Default   history.Class
	DefaultBy string
	Attempt   int
	Elapsed   time.Duration
	Task      PolicyTask
	Step      PolicyStep
}

// Classify describes f.Err and decides its class: a mark in Go code wins;
// otherwise policy, if not nil; otherwise f.Default. A policy whose
// evaluation fails classifies the error as permanent, and the evaluation
// error is recorded in the evidence.
func Classify(f Failure, policy *Policy) history.ErrorInfo {
	info := Describe(f.Err, f.Default)
	if Marked(info) {
		return info
	}
	info.ClassifiedBy = f.DefaultBy
	if policy == nil {
		return info
	}
	class, err := policy.Classify(PolicyInput{
		Error:   PolicyError{Message: info.Message, Kind: info.Kind, Status: info.Status, Attrs: info.Attrs},
		Attempt: f.Attempt, Elapsed: f.Elapsed, Task: f.Task, Step: f.Step,
	})
	info.Class, info.ClassifiedBy, info.Policy = class, "policy:"+policy.Name(), policy.Expression()
	if err != nil {
		info.PolicyError = storable(err.Error())
	}
	return info
}

// attrsOf merges the attributes attached along err's chain, outer first.
func attrsOf(err error) map[string]string {
	var attrs map[string]string
	for e := err; e != nil; e = errors.UnwrapOnce(e) {
		de, ok := e.(*detailError)
		if !ok || len(de.attrs) == 0 {
			continue
		}
		if attrs == nil {
			attrs = make(map[string]string, len(de.attrs))
		}
		for k, v := range de.attrs {
			if _, set := attrs[storable(k)]; !set {
				attrs[storable(k)] = storable(v)
			}
		}
	}
	return attrs
}

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

// storable replaces U+0000, which PostgreSQL cannot store in text or JSON,
// so evidence of a failure is never lost to the character that caused it.
func storable(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

func kindOf(err error) string {
	var ke KindError
	if errors.As(err, &ke) {
		return ke.ErrorKind()
	}
	// The innermost cause names what actually went wrong, unless it is a
	// plain message from the errors packages, whose type says nothing.
	leaf := errors.UnwrapAll(err)
	t := reflect.TypeOf(leaf)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if pkg := t.PkgPath(); pkg == "errors" || strings.HasPrefix(pkg, "github.com/cockroachdb/errors") {
		return ""
	}
	return fmt.Sprintf("%T", leaf)
}
