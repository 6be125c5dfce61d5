package store

import (
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cockroachdb/errors"
)

// The bounds of [QueueSeriesParams]: a window of a minute to a week, cut
// into at most MaxSeriesBuckets buckets of at least a second. They are
// cairntype's (the bounds of what a user asks for).
const (
	MinSeriesWindow      = cairntype.MinSeriesWindow
	MaxSeriesWindow      = cairntype.MaxSeriesWindow
	DefaultSeriesBuckets = cairntype.DefaultSeriesBuckets
	MaxSeriesBuckets     = cairntype.MaxSeriesBuckets
)

// QueueSeriesParams asks for the queues' recent past as time series
// ([Store.QueueSeries]).
type QueueSeriesParams struct {
	Namespace string
	// Queue is the one queue to read; empty reads every queue of the
	// namespace.
	Queue string
	// Window ends now (by the store's clock): between [MinSeriesWindow]
	// and [MaxSeriesWindow].
	Window time.Duration
	// Buckets cuts the window into this many equal buckets: 1 to
	// [MaxSeriesBuckets], each at least a second; 0 is
	// [DefaultSeriesBuckets].
	Buckets int
}

// Validate checks the parameters: what every store does first.
func (p *QueueSeriesParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "":
		return errors.New("queue series: namespace is required")
	case p.Window < MinSeriesWindow || p.Window > MaxSeriesWindow:
		return errors.Newf("queue series: window %s must be between %s and %s", p.Window, MinSeriesWindow, MaxSeriesWindow)
	case p.Buckets < 0 || p.Buckets > MaxSeriesBuckets:
		return errors.Newf("queue series: %d buckets; ask for 1 to %d (0 for %d)", p.Buckets, MaxSeriesBuckets, DefaultSeriesBuckets)
	case p.Window/time.Duration(p.BucketCount()) < time.Second:
		return errors.Newf("queue series: %d buckets over %s are shorter than a second; ask for fewer", p.BucketCount(), p.Window)
	}
	return nil
}

// BucketCount is Buckets, or [DefaultSeriesBuckets] when it is 0.
func (p *QueueSeriesParams) BucketCount() int {
	if p.Buckets == 0 {
		return DefaultSeriesBuckets
	}
	return p.Buckets
}

// The series the seam reads are the values users get back, from package
// cairntype; these aliases keep the seam's names for them until its
// methods name cairntype themselves.
type (
	// QueueSeries is [cairntype.QueueSeries].
	QueueSeries = cairntype.QueueSeries
	// SeriesPoint is [cairntype.SeriesPoint].
	SeriesPoint = cairntype.SeriesPoint
)
