package activities

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
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
	return errors.Mark(err, ErrPermanent)
}

// Transient marks err as worth retrying, within the retry budget.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return errors.Mark(err, ErrTransient)
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

// Describe turns err into failure evidence: class (from the marks; otherwise
// defaultClass), message, kind (the error's own kind, else its Go type) and
// status. A cancelled context is transient unless marked otherwise: the
// attempt was interrupted, not refused.
func Describe(err error, defaultClass history.Class) history.ErrorInfo {
	info := history.ErrorInfo{Class: defaultClass, Message: storable(err.Error()), Kind: storable(kindOf(err))}
	var se StatusError
	if errors.As(err, &se) {
		info.Status = se.ErrorStatus()
	}
	switch {
	case errors.Is(err, ErrPermanent):
		info.Class = history.Permanent
	case errors.Is(err, ErrTransient):
		info.Class = history.Transient
	case errors.IsAny(err, context.Canceled, context.DeadlineExceeded):
		info.Class = history.Transient
	}
	return info
}

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

// RetryPolicy says how often and how soon a failed step is tried again.
type RetryPolicy struct {
	// MaxAttempts is the most attempts a task gets, the first included.
	MaxAttempts int
	// InitialInterval is the backoff ceiling after the first failure.
	InitialInterval time.Duration
	// Multiplier grows the ceiling after each further failure.
	Multiplier float64
	// MaxInterval caps the ceiling.
	MaxInterval time.Duration
}

// DefaultRetryPolicy is used where none is given: 10 attempts, backoff from
// 1s doubling to at most 5m, with full jitter.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:     10,
	InitialInterval: time.Second,
	Multiplier:      2,
	MaxInterval:     5 * time.Minute,
}

// Validate reports what is wrong with p, if anything.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return errors.Newf("retry policy: MaxAttempts %d must be at least 1", p.MaxAttempts)
	case p.InitialInterval < 0 || p.MaxInterval < 0:
		return errors.New("retry policy: intervals must not be negative")
	case !(p.Multiplier >= 1): // also refuses NaN
		return errors.Newf("retry policy: Multiplier %g must be at least 1", p.Multiplier)
	case p.MaxInterval < p.InitialInterval:
		return errors.Newf("retry policy: MaxInterval %s is below InitialInterval %s", p.MaxInterval, p.InitialInterval)
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
// attempt, with full jitter: uniform in [0, Ceiling(attempt)], drawing from
// random, which returns a number in [0, 1). Full jitter spreads the retries
// of many tasks that failed together, so they do not return as a herd.
func (p RetryPolicy) Backoff(attempt int, random func() float64) time.Duration {
	return time.Duration(random() * float64(p.Ceiling(attempt)))
}

// storable replaces U+0000, which PostgreSQL cannot store in text or JSON,
// so evidence of a failure is never lost to the character that caused it.
func storable(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
