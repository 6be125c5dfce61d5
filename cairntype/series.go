package cairntype

import "time"

// The bounds of a queue's series (a [QueueSeries] asked for): a window of
// a minute to a week, cut into at most MaxSeriesBuckets buckets of at
// least a second; DefaultSeriesBuckets when the asker gives none.
const (
	MinSeriesWindow      = time.Minute
	MaxSeriesWindow      = 7 * 24 * time.Hour
	DefaultSeriesBuckets = 60
	MaxSeriesBuckets     = 360
)

// QueueSeries is one queue's window as equal buckets, oldest first, folded
// from the event log: the gauges as they stood at each bucket's end, and
// what happened within it.
type QueueSeries struct {
	Queue  string        `json:"queue"`
	From   time.Time     `json:"from"` // the window's start; the last bucket ends now
	Step   time.Duration `json:"step"` // each bucket's length
	Points []SeriesPoint `json:"points"`
}

// SeriesPoint is one bucket, (End-Step, End].
type SeriesPoint struct {
	End time.Time `json:"end"`
	// Tasks at End: waiting (pending or retrying, due or not), of them
	// due (run time passed), and running.
	Waiting int `json:"waiting"`
	Due     int `json:"due"`
	Running int `json:"running"`
	// Tasks that completed in the bucket, and that ended failed,
	// dead-lettered or expired.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Attempts that ended in the bucket (completed, failed, released,
	// sleeping, cancelled, lease expired), and of them those that failed
	// (attempt_failed, lease_expired, or a terminal failure).
	AttemptsEnded  int `json:"attempts_ended"`
	AttemptsFailed int `json:"attempts_failed"`
	// Attempts started in the bucket, and their schedule-to-start
	// latency: from the run time they were due at to attempt_started.
	Started      int           `json:"started"`
	LatencyTotal time.Duration `json:"latency_total"`
	LatencyMax   time.Duration `json:"latency_max"`
}

// Throughput is the tasks completed per minute over a bucket of step.
func (p SeriesPoint) Throughput(step time.Duration) float64 {
	if step <= 0 {
		return 0
	}
	return float64(p.Completed) / step.Minutes()
}

// ErrorRate is the share of the bucket's ended attempts that failed; zero
// when none ended.
func (p SeriesPoint) ErrorRate() float64 {
	if p.AttemptsEnded == 0 {
		return 0
	}
	return float64(p.AttemptsFailed) / float64(p.AttemptsEnded)
}

// MeanLatency is the mean schedule-to-start latency of the attempts
// started in the bucket; zero when none started.
func (p SeriesPoint) MeanLatency() time.Duration {
	if p.Started == 0 {
		return 0
	}
	return p.LatencyTotal / time.Duration(p.Started)
}
