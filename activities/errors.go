package activities

import (
	"time"

	"github.com/cairnflow/cairn/internal/activity"
)

// Marks that classify an error. They are cockroachdb/errors marks, so they
// survive wrapping with errors.Wrap and friends, and a mark set in Go wins
// over any policy. Test for them with errors.Is.
var (
	ErrPermanent = activity.ErrPermanent
	ErrTransient = activity.ErrTransient
)

// Permanent marks err as not worth retrying: the task fails at once.
func Permanent(err error) error { return activity.Permanent(err) }

// Transient marks err as worth retrying, within the retry budget.
func Transient(err error) error { return activity.Transient(err) }

// RetryAfter marks err as transient and asks for the next attempt no sooner
// than d from now (an HTTP 429's Retry-After, a provider's quota reset).
// The hint wins over the policy's backoff; the retry budget still applies.
func RetryAfter(err error, d time.Duration) error { return activity.RetryAfter(err, d) }

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

// WithKind attaches a kind to err, as [KindError] does: a stable code
// ("rate_limited", "bad_document") the history records and policies match
// on as error.kind.
func WithKind(err error, kind string) error { return activity.WithKind(err, kind) }

// WithStatus attaches a status code (an HTTP status) to err, as
// [StatusError] does; policies see it as error.status.
func WithStatus(err error, status int) error { return activity.WithStatus(err, status) }

// WithAttrs attaches attributes to err: the history records them and
// policies see them as error.attrs. Attributes of outer wrappers win.
func WithAttrs(err error, attrs map[string]string) error { return activity.WithAttrs(err, attrs) }

// Kinds of the timeout errors of a step that ran longer than its
// StartToClose ("start_to_close_timeout") or went without a Heartbeat for
// its HeartbeatTimeout ("heartbeat_timeout"): see workflow.StepOpts. Both
// are transient.
const (
	KindStartToCloseTimeout = activity.KindStartToCloseTimeout
	KindHeartbeatTimeout    = activity.KindHeartbeatTimeout
)
