package store

import (
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cockroachdb/errors"
)

// The windows a diagnosis accepts, and how many entries it keeps of each
// ranking: cairntype's.
const (
	MinDiagnoseWindow = cairntype.MinDiagnoseWindow
	MaxDiagnoseWindow = cairntype.MaxDiagnoseWindow
	DiagnoseTop       = cairntype.DiagnoseTop
)

// QueueDiagnoseParams says which queue to diagnose over which window.
type QueueDiagnoseParams struct {
	Namespace, Queue string
	// Window ends now (by the database clock); its first half is compared
	// with its second. Between [MinDiagnoseWindow] and [MaxDiagnoseWindow].
	Window time.Duration
}

// Validate checks the parameters: what every store does first.
func (p *QueueDiagnoseParams) Validate() error {
	if p == nil || p.Namespace == "" || p.Queue == "" {
		return errors.New("diagnose queue: namespace and queue are required")
	}
	if p.Window < MinDiagnoseWindow || p.Window > MaxDiagnoseWindow {
		return errors.Newf("diagnose queue %s: window %s must be between %s and %s",
			p.Queue, p.Window, MinDiagnoseWindow, MaxDiagnoseWindow)
	}
	return nil
}

// The diagnosis the seam measures ([Store.QueueMeasure]) is the value
// users get back, from package cairntype; these aliases keep the seam's
// names for it and its parts until the seam names cairntype itself.
type (
	// Millis is [cairntype.Millis].
	Millis = cairntype.Millis
	// QueueDiagnosis is [cairntype.QueueDiagnosis].
	QueueDiagnosis = cairntype.QueueDiagnosis
	// DiagnosisHalf is [cairntype.DiagnosisHalf].
	DiagnosisHalf = cairntype.DiagnosisHalf
	// DurationStats is [cairntype.DurationStats].
	DurationStats = cairntype.DurationStats
	// TypeStats is [cairntype.TypeStats].
	TypeStats = cairntype.TypeStats
	// StepStats is [cairntype.StepStats].
	StepStats = cairntype.StepStats
	// ErrorStats is [cairntype.ErrorStats].
	ErrorStats = cairntype.ErrorStats
	// QueueDepth is [cairntype.QueueDepth].
	QueueDepth = cairntype.QueueDepth
	// QueueLimits is [cairntype.QueueLimits].
	QueueLimits = cairntype.QueueLimits
	// RateLimit is [cairntype.RateLimit].
	RateLimit = cairntype.RateLimit
	// WaitingType is [cairntype.WaitingType].
	WaitingType = cairntype.WaitingType
	// StrandedType is [cairntype.StrandedType].
	StrandedType = cairntype.StrandedType
	// WaitingKey is [cairntype.WaitingKey].
	WaitingKey = cairntype.WaitingKey
	// DiagnosisCause is [cairntype.DiagnosisCause].
	DiagnosisCause = cairntype.DiagnosisCause
)

// MillisOf is [cairntype.MillisOf].
func MillisOf(d time.Duration) Millis { return cairntype.MillisOf(d) }

// The cause codes: cairntype's.
const (
	CauseLostConsumers     = cairntype.CauseLostConsumers
	CausePoisonRetries     = cairntype.CausePoisonRetries
	CauseSlowerAttempts    = cairntype.CauseSlowerAttempts
	CauseInflowSpike       = cairntype.CauseInflowSpike
	CauseHotKey            = cairntype.CauseHotKey
	CauseConcurrencyCapped = cairntype.CauseConcurrencyCapped
	CauseRateLimited       = cairntype.CauseRateLimited
	CauseUnservedType      = cairntype.CauseUnservedType
)
