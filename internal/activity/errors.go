package activity

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

// The marks and details below are what package activities gives step
// authors (it re-exports each, documented for them); they live here so
// that [Describe] can read them back.

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

// kindError and statusError are activities.KindError and
// activities.StatusError, the interfaces an author's error implements to
// name its kind and status.
type kindError interface {
	error
	ErrorKind() string
}

type statusError interface {
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

// WithKind attaches a kind to err, as activities.KindError does: a stable code
// ("rate_limited", "bad_document") the history records and policies match
// on as error.kind.
func WithKind(err error, kind string) error {
	if err == nil {
		return nil
	}
	return &detailError{cause: err, kind: kind}
}

// WithStatus attaches a status code (an HTTP status) to err, as
// activities.StatusError does; policies see it as error.status.
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

// ErrorKind implements activities.KindError when a kind was attached;
// otherwise the kind of the wrapped error shows through.
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
	var se statusError
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
	info := history.ErrorInfo{Class: defaultClass, Message: Storable(err.Error()), Kind: Storable(kindOf(err)),
		ClassifiedBy: "default"}
	var se statusError
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
			if _, set := attrs[Storable(k)]; !set {
				attrs[Storable(k)] = Storable(v)
			}
		}
	}
	return attrs
}

// Storable replaces U+0000, which PostgreSQL cannot store in text or JSON,
// so evidence of a failure is never lost to the character that caused it.
func Storable(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

func kindOf(err error) string {
	var ke kindError
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
