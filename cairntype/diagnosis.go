package cairntype

import (
	"slices"
	"time"
)

// The windows a diagnosis accepts. Each half must be long enough to hold a
// few claims (a worker polls every second by default); a day of events is
// as far back as a diagnosis reads, so it stays a bounded range scan.
const (
	MinDiagnoseWindow = 2 * time.Second
	MaxDiagnoseWindow = 24 * time.Hour
)

// DiagnoseTop is how many entries the diagnosis keeps of each ranking
// (errors per half, waiting types, fairness keys).
const DiagnoseTop = 5

// Millis is a duration in milliseconds. The diagnosis uses it so its JSON
// has plain numbers (fields named *_ms), as the HTTP API serves it.
type Millis float64

// MillisOf converts d to milliseconds.
func MillisOf(d time.Duration) Millis { return Millis(float64(d) / float64(time.Millisecond)) }

// Duration converts m back to a duration.
func (m Millis) Duration() time.Duration {
	return time.Duration(float64(m) * float64(time.Millisecond))
}

// String formats m as a duration rounded for reading: 1.234s, 56ms.
func (m Millis) String() string {
	d := m.Duration()
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// QueueDiagnosis is what a queue's recent history says about its growth:
// the measurements of two halves of a window, the queue's state now, and
// the likely causes, ranked. Every field has a snake_case JSON name, and
// lists are never null, so the struct is served as is by the HTTP API.
type QueueDiagnosis struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	// At is the end of the window, by the database clock.
	At     time.Time `json:"at"`
	Window Millis    `json:"window_ms"`
	// Then is the first half of the window, Now the second.
	Then DiagnosisHalf `json:"then"`
	Now  DiagnosisHalf `json:"now"`
	// Depth and Limits are the queue as it is at At.
	Depth  QueueDepth  `json:"depth"`
	Limits QueueLimits `json:"limits"`
	// WaitingByType is the waiting tasks by type and version, most first.
	WaitingByType []WaitingType `json:"waiting_by_type"`
	// WaitingByKey is the fairness keys with the most waiting tasks (at
	// most five); FairnessKeys is how many keys have waiting tasks.
	WaitingByKey []WaitingKey `json:"waiting_by_fairness_key"`
	FairnessKeys int          `json:"fairness_keys"`
	// Stranded is the queue's in-flight tasks a worker's deploy check
	// found its code cannot replay, by type and version (most first): the
	// worker leaves them (or refused to start) until one whose code
	// replays them claims them. Types whose version no worker runs at all
	// are the unserved_type cause, from WaitingByType.
	Stranded []StrandedType `json:"stranded"`
	// Causes are the likely reasons of growth, most likely first. Empty
	// when nothing looks wrong.
	Causes []DiagnosisCause `json:"causes"`
	// Healthy is true when there is no cause and the queue is not backing
	// up. Summary says in one line what the diagnosis found.
	Healthy bool   `json:"healthy"`
	Summary string `json:"summary"`
}

// DiagnosisHalf is what happened in the queue in one half of the window.
type DiagnosisHalf struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Inflow is the tasks created; Outflow the tasks finished (completed,
	// failed, dead-lettered, cancelled or expired), Completed those of
	// them that completed.
	Inflow    int `json:"inflow"`
	Outflow   int `json:"outflow"`
	Completed int `json:"completed"`
	// AttemptsStarted counts attempt_started events; Retries those of
	// them that follow a failed attempt (attempt_failed or lease_expired),
	// RetryShare = Retries / AttemptsStarted.
	AttemptsStarted int     `json:"attempts_started"`
	Retries         int     `json:"retries"`
	RetryShare      float64 `json:"retry_share"`
	AttemptsFailed  int     `json:"attempts_failed"`
	LeasesExpired   int     `json:"leases_expired"`
	// Workers is how many distinct workers started attempts in the half
	// (in the second half, also those holding leases of running tasks);
	// WorkerIDs names them.
	Workers   int      `json:"workers"`
	WorkerIDs []string `json:"worker_ids"`
	// Attempts is the duration of the attempts that ended in the half,
	// over all types.
	Attempts DurationStats `json:"attempts"`
	// Types, Steps and Errors break the half down by task type, by step
	// and by failure (the most common first).
	Types  []TypeStats  `json:"types"`
	Steps  []StepStats  `json:"steps"`
	Errors []ErrorStats `json:"errors"`
}

// DurationStats summarizes durations: how many, their mean, median and 95th
// percentile.
type DurationStats struct {
	Count int    `json:"count"`
	Mean  Millis `json:"mean_ms"`
	P50   Millis `json:"p50_ms"`
	P95   Millis `json:"p95_ms"`
}

// TypeStats is one task type's activity in a half.
type TypeStats struct {
	Type            string `json:"type"`
	Inflow          int    `json:"inflow"`
	Outflow         int    `json:"outflow"`
	AttemptsStarted int    `json:"attempts_started"`
	Retries         int    `json:"retries"`
	AttemptsFailed  int    `json:"attempts_failed"`
	LeasesExpired   int    `json:"leases_expired"`
	// Attempts is the duration of the type's attempts that ended in the
	// half.
	Attempts DurationStats `json:"attempts"`
}

// StepStats is the duration of one step of one task type, over the steps
// that completed in a half.
type StepStats struct {
	Type     string        `json:"type"`
	Step     string        `json:"step"`
	Duration DurationStats `json:"duration"`
}

// ErrorStats is one kind of failure in a half: attempts of Type that failed
// with the same class, kind, status and step (an expired lease counts as a
// transient failure of kind lease_expired), and one of their messages.
type ErrorStats struct {
	Type    string `json:"type"`
	Class   string `json:"class"`
	Kind    string `json:"kind,omitempty"`
	Status  int    `json:"status,omitempty"`
	Step    string `json:"step,omitempty"`
	Count   int    `json:"count"`
	Message string `json:"message,omitempty"`
}

// QueueDepth is the queue's tasks at the end of the window.
type QueueDepth struct {
	Pending  int `json:"pending"`
	Retrying int `json:"retrying"`
	Running  int `json:"running"`
	// Due is the waiting (pending or retrying) tasks whose run time has
	// come; OldestWait is how long the longest-waiting of them has waited
	// past its run time.
	Due        int    `json:"due"`
	OldestWait Millis `json:"oldest_wait_ms"`
	// ExpiredLeases counts running tasks whose lease has expired: their
	// worker stopped renewing it, and the rescuer has not yet taken them
	// back.
	ExpiredLeases int `json:"expired_leases"`
	// SinceLastStart is how long ago an attempt of the queue last started
	// (the whole window when none did): with due tasks waiting and none
	// running, how long no worker has claimed.
	SinceLastStart Millis `json:"since_last_start_ms"`
}

// Waiting is the queue's pending and retrying tasks.
func (d QueueDepth) Waiting() int { return d.Pending + d.Retrying }

// QueueLimits are the queue's settings and the rate limits of its types.
// Zero means no limit.
type QueueLimits struct {
	Concurrency int         `json:"concurrency"`
	MaxWaiting  int         `json:"max_waiting"`
	RateLimits  []RateLimit `json:"rate_limits"`
}

// RateLimit is a task type's limit: at most MaxStarts attempts start per
// Per.
type RateLimit struct {
	Type      string `json:"type"`
	MaxStarts int    `json:"max_starts"`
	Per       Millis `json:"per_ms"`
}

// WaitingType is the queue's waiting tasks of one type and version.
type WaitingType struct {
	Type    string  `json:"type"`
	Version int     `json:"version"`
	Waiting int     `json:"waiting"`
	Share   float64 `json:"share"` // of all waiting tasks of the queue
	Due     int     `json:"due"`
	// OldestWait is how long the longest-waiting due task of the type has
	// waited past its run time.
	OldestWait Millis `json:"oldest_wait_ms"`
	// Served says whether an attempt of this type and version started in
	// the window.
	Served bool `json:"served"`
}

// StrandedType is the queue's stranded tasks of one type and version (see
// QueueDiagnosis.Stranded), with where the first one found parts from
// its history.
type StrandedType struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
	Tasks   int    `json:"tasks"`
	// Kind ("step", "receive", "child", "end"), Position, Recorded and
	// Called are the first divergence found: what the history has there,
	// and what the code called instead.
	Kind     string `json:"kind"`
	Position int    `json:"position"`
	Recorded string `json:"recorded"`
	Called   string `json:"called"`
	// Workers are the workers that found them.
	Workers []string `json:"workers"`
	// OldestWait is how long the longest-waiting of them has been due
	// (0 when none is due: waiting for a signal, a timer, a child).
	OldestWait Millis `json:"oldest_wait_ms"`
}

// WaitingKey is the queue's waiting tasks of one fairness key.
type WaitingKey struct {
	Key     string  `json:"key"`
	Waiting int     `json:"waiting"`
	Share   float64 `json:"share"` // of all waiting tasks of the queue
}

// DiagnosisCause is one likely reason a queue grows. Score, from 0 to 1,
// ranks the causes: how strongly the numbers point at it, and how directly
// it explains growth.
type DiagnosisCause struct {
	Code     string   `json:"code"`
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence"`
	Score    float64  `json:"score"`
}

// The cause codes.
const (
	CauseLostConsumers     = "lost_consumers"
	CausePoisonRetries     = "poison_retries"
	CauseSlowerAttempts    = "slower_attempts"
	CauseInflowSpike       = "inflow_spike"
	CauseHotKey            = "hot_key"
	CauseConcurrencyCapped = "concurrency_capped"
	CauseRateLimited       = "rate_limited"
	CauseUnservedType      = "unserved_type"
)

// TypeNames returns the task types the queue holds or ran in the window.
func (d *QueueDiagnosis) TypeNames() []string {
	var names []string
	for _, w := range d.WaitingByType {
		names = append(names, w.Type)
	}
	for _, h := range []*DiagnosisHalf{&d.Then, &d.Now} {
		for _, t := range h.Types {
			names = append(names, t.Type)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Normalize derives the shares and counts, and makes every list non-nil
// (JSON [] rather than null).
func (d *QueueDiagnosis) Normalize() {
	for _, h := range []*DiagnosisHalf{&d.Then, &d.Now} {
		slices.Sort(h.WorkerIDs)
		h.Workers = len(h.WorkerIDs)
		h.RetryShare = ratio(h.Retries, h.AttemptsStarted)
		h.WorkerIDs = nonNil(h.WorkerIDs)
		h.Types, h.Steps, h.Errors = nonNil(h.Types), nonNil(h.Steps), nonNil(h.Errors)
	}
	waiting := d.Depth.Waiting()
	for i := range d.WaitingByType {
		d.WaitingByType[i].Share = ratio(d.WaitingByType[i].Waiting, waiting)
	}
	for i := range d.WaitingByKey {
		d.WaitingByKey[i].Share = ratio(d.WaitingByKey[i].Waiting, waiting)
	}
	d.WaitingByType, d.WaitingByKey = nonNil(d.WaitingByType), nonNil(d.WaitingByKey)
	d.Limits.RateLimits = nonNil(d.Limits.RateLimits)
}
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func ratio(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}
