package engine

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queue diagnosis answers "why is this queue growing?" from the queue's
// recent history: the window ending now is split into two halves, "then"
// and "now", each is measured from the events (diagnose.sql), the queue's
// present state is read from the projection, and heuristics compare the
// halves and rank the likely causes. The statements and the thresholds are
// described in docs/architecture.md ("Queue diagnosis").

// The windows a diagnosis accepts. Each half must be long enough to hold a
// few claims (a worker polls every second by default); a day of events is
// as far back as a diagnosis reads, so it stays a bounded range scan.
const (
	MinDiagnoseWindow = 2 * time.Second
	MaxDiagnoseWindow = 24 * time.Hour
)

// diagnoseStatementTimeout bounds each statement of a diagnosis: an
// operator's question must not hold the database for minutes.
const diagnoseStatementTimeout = 30 * time.Second

// DiagnoseTop is how many entries the diagnosis keeps of each ranking
// (errors per half, waiting types, fairness keys).
const DiagnoseTop = 5

// ErrDiagnosisTooSlow marks a diagnosis that gave up reading its window's
// history (a statement timeout): a shorter window may do.
var ErrDiagnosisTooSlow = errors.New("diagnosis took too long")

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

// QueueDiagnose measures the queue over the window ending now and ranks the
// likely causes of its growth (see [QueueDiagnosis]). It reads in one
// read-only snapshot, each statement bounded by a timeout.
func (s *PGStore) QueueDiagnose(ctx context.Context, p *QueueDiagnoseParams) (*QueueDiagnosis, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := &QueueDiagnosis{Namespace: p.Namespace, Queue: p.Queue, Window: MillisOf(p.Window)}
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		return s.measureQueue(ctx, tx, p.Window, d)
	})
	if isStatementTimeout(err) && ctx.Err() == nil { // a cancelled context is cancelled the same way
		return nil, errors.Mark(errors.Wrapf(err, "diagnose queue %s/%s: reading %s of history took over %s; try a shorter window",
			p.Namespace, p.Queue, p.Window, diagnoseStatementTimeout), ErrDiagnosisTooSlow)
	}
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "diagnose queue %s/%s", p.Namespace, p.Queue)
	}
	d.FindCauses()
	return d, nil
}

func isStatementTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014" // query_canceled: the statement timeout
}

// measureQueue fills in everything but the causes.
func (s *PGStore) measureQueue(ctx context.Context, tx pgx.Tx, window time.Duration, d *QueueDiagnosis) error {
	err := tx.QueryRow(ctx, s.sql("DiagnoseBegin"), pgx.NamedArgs{
		"statement_timeout": fmt.Sprint(diagnoseStatementTimeout.Milliseconds()),
	}).Scan(new(string), &d.At)
	if err != nil {
		return errors.Wrap(err, "read the database clock")
	}
	d.At = d.At.UTC()
	from, mid := d.At.Add(-window), d.At.Add(-window/2)
	d.Then = DiagnosisHalf{From: from, To: mid}
	d.Now = DiagnosisHalf{From: mid, To: d.At}
	args := pgx.NamedArgs{"namespace": d.Namespace, "queue": d.Queue, "from": from, "mid": mid, "max": DiagnoseTop}
	steps := []func() error{
		func() error { return s.measureFlow(ctx, tx, args, d) },
		func() error { return s.measureSteps(ctx, tx, args, d) },
		func() error { return s.measureErrors(ctx, tx, args, d) },
		func() error { return s.measureDepth(ctx, tx, args, d) },
		func() error { return s.measureRunning(ctx, tx, args, d) },
		func() error { return s.measureWaitingTypes(ctx, tx, args, d) },
		func() error { return s.measureWaitingKeys(ctx, tx, args, d) },
		func() error { return s.measureRateLimits(ctx, tx, args, d) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	d.Normalize()
	return nil
}

// half returns the half an is_now flag names.
func (d *QueueDiagnosis) half(isNow bool) *DiagnosisHalf {
	if isNow {
		return &d.Now
	}
	return &d.Then
}

func (s *PGStore) measureFlow(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseFlow"), args)
	if err != nil {
		return errors.Wrap(err, "measure inflow, outflow and attempts")
	}
	var isNow, total bool
	var ts TypeStats
	var inflow, outflow, completed, started, retries, failed, expired, ended int64
	var workers []string
	var lastStart *time.Time
	d.Depth.SinceLastStart = d.Window
	_, err = pgx.ForEachRow(rows, []any{&isNow, &total, &ts.Type, &inflow, &outflow, &completed, &started, &retries,
		&failed, &expired, &ended, &ts.Attempts.Mean, &ts.Attempts.P50, &ts.Attempts.P95, &workers, &lastStart}, func() error {
		ts.Inflow, ts.Outflow, ts.AttemptsStarted, ts.Retries = int(inflow), int(outflow), int(started), int(retries)
		ts.AttemptsFailed, ts.LeasesExpired, ts.Attempts.Count = int(failed), int(expired), int(ended)
		h := d.half(isNow)
		if !total {
			h.Types = append(h.Types, ts)
			return nil
		}
		h.Inflow, h.Outflow, h.Completed = ts.Inflow, ts.Outflow, int(completed)
		h.AttemptsStarted, h.Retries, h.AttemptsFailed, h.LeasesExpired = ts.AttemptsStarted, ts.Retries, ts.AttemptsFailed, ts.LeasesExpired
		h.Attempts = ts.Attempts
		h.WorkerIDs = slices.Clone(workers)
		if lastStart != nil {
			// A writer's clock a little ahead of the database's makes no
			// negative quiet time.
			d.Depth.SinceLastStart = min(d.Depth.SinceLastStart, max(0, MillisOf(d.At.Sub(*lastStart))))
		}
		return nil
	})
	return errors.Wrap(err, "measure inflow, outflow and attempts")
}

func (s *PGStore) measureSteps(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseSteps"), args)
	if err != nil {
		return errors.Wrap(err, "measure step durations")
	}
	var isNow bool
	var st StepStats
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&isNow, &st.Type, &st.Step, &count, &st.Duration.Mean, &st.Duration.P50, &st.Duration.P95}, func() error {
		st.Duration.Count = int(count)
		h := d.half(isNow)
		h.Steps = append(h.Steps, st)
		return nil
	})
	return errors.Wrap(err, "measure step durations")
}

func (s *PGStore) measureErrors(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseErrors"), args)
	if err != nil {
		return errors.Wrap(err, "count failures")
	}
	var isNow bool
	var es ErrorStats
	var status int32
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&isNow, &es.Type, &es.Class, &es.Kind, &status, &es.Step, &count, &es.Message}, func() error {
		es.Status, es.Count = int(status), int(count)
		h := d.half(isNow)
		h.Errors = append(h.Errors, es)
		return nil
	})
	return errors.Wrap(err, "count failures")
}

func (s *PGStore) measureDepth(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	var pending, retrying, due int64
	var concurrency, maxWaiting *int32
	err := tx.QueryRow(ctx, s.sql("DiagnoseDepth"), args).Scan(&pending, &retrying, &due, &d.Depth.OldestWait, &concurrency, &maxWaiting)
	if err != nil {
		return errors.Wrap(err, "read the queue's depth and settings")
	}
	d.Depth.Pending, d.Depth.Retrying, d.Depth.Due = int(pending), int(retrying), int(due)
	d.Limits.Concurrency, d.Limits.MaxWaiting = int(deref(concurrency)), int(deref(maxWaiting))
	return nil
}

// measureRunning counts the running tasks, and adds the workers holding
// their leases to the second half's workers: a worker busy with long
// attempts started before the half is alive too.
func (s *PGStore) measureRunning(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseRunning"), args)
	if err != nil {
		return errors.Wrap(err, "read running tasks")
	}
	var owner *string
	var running, expired int64
	_, err = pgx.ForEachRow(rows, []any{&owner, &running, &expired}, func() error {
		d.Depth.Running += int(running)
		d.Depth.ExpiredLeases += int(expired)
		if owner != nil && running > expired && !slices.Contains(d.Now.WorkerIDs, *owner) {
			d.Now.WorkerIDs = append(d.Now.WorkerIDs, *owner)
		}
		return nil
	})
	return errors.Wrap(err, "read running tasks")
}

func (s *PGStore) measureWaitingTypes(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseWaitingTypes"), args)
	if err != nil {
		return errors.Wrap(err, "group waiting tasks by type")
	}
	var wt WaitingType
	var version int32
	var waiting, due int64
	_, err = pgx.ForEachRow(rows, []any{&wt.Type, &version, &waiting, &due, &wt.OldestWait, &wt.Served}, func() error {
		wt.Version, wt.Waiting, wt.Due = int(version), int(waiting), int(due)
		d.WaitingByType = append(d.WaitingByType, wt)
		return nil
	})
	return errors.Wrap(err, "group waiting tasks by type")
}

func (s *PGStore) measureWaitingKeys(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseWaitingKeys"), args)
	if err != nil {
		return errors.Wrap(err, "group waiting tasks by fairness key")
	}
	var wk WaitingKey
	var waiting, keys int64
	_, err = pgx.ForEachRow(rows, []any{&wk.Key, &waiting, &keys}, func() error {
		wk.Waiting, d.FairnessKeys = int(waiting), int(keys)
		d.WaitingByKey = append(d.WaitingByKey, wk)
		return nil
	})
	return errors.Wrap(err, "group waiting tasks by fairness key")
}

// measureRateLimits reads the rate limits of the types the queue holds or
// ran in the window.
func (s *PGStore) measureRateLimits(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *QueueDiagnosis) error {
	types := d.TypeNames()
	if len(types) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, s.sql("DiagnoseRateLimits"), pgx.NamedArgs{"namespace": args["namespace"], "types": types})
	if err != nil {
		return errors.Wrap(err, "read rate limits")
	}
	var rl RateLimit
	var maxStarts int32
	var perMS int64
	_, err = pgx.ForEachRow(rows, []any{&rl.Type, &maxStarts, &perMS}, func() error {
		rl.MaxStarts, rl.Per = int(maxStarts), Millis(perMS)
		d.Limits.RateLimits = append(d.Limits.RateLimits, rl)
		return nil
	})
	return errors.Wrap(err, "read rate limits")
}

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

// The heuristics' thresholds. They are deliberately coarse: a diagnosis
// points at where to look, and the evidence quotes the numbers.
const (
	// minGrowth: the queue is growing when inflow passes outflow in the
	// second half by this many tasks and by a tenth of the inflow (tasks
	// in flight make the two differ by a few in a steady queue).
	minGrowth = 3
	// A due task that has waited a quarter of the window (half of a half)
	// means the queue is not being drained.
	stalledWaitOfWindow = 0.25
	// minAttemptsForShares: fewer attempts in a half than this say
	// nothing about shares.
	minAttemptsForShares = 5
	// poisonRetryShare: this share of retries among the attempts started
	// in the second half is more than bad luck.
	poisonRetryShare = 0.3
	// An attempt or step is slower when its median is slowerFactor times
	// what it was, by at least minSlowdown, over minDurationSamples each.
	slowerFactor       = 2.0
	minSlowdown        = 10 * time.Millisecond
	minDurationSamples = 3
	// An inflow spike: at least minSpikeInflow tasks in the second half,
	// spikeFactor times the first half's, while outflow kept at least
	// steadyOutflow of its pace.
	minSpikeInflow = 10
	spikeFactor    = 2.0
	steadyOutflow  = 0.7
	// hot: one key or type holds more than hotShare of at least
	// minHotWaiting waiting tasks.
	hotShare      = 0.5
	minHotWaiting = 10
	// rateBound: a type starting at this share of its rate limit is held
	// by it.
	rateBound = 0.8
	// quietAfter: due tasks that have waited this long while nothing runs
	// and no attempt has started means no worker is claiming: a worker
	// claims at once when notified, and polls every second by default.
	quietAfter = 3 * time.Second
)

// pace is the derived facts every heuristic consults.
type pace struct {
	half      time.Duration
	growth    int  // inflow minus outflow in the second half
	growing   bool // growth is more than tasks in flight explain
	stalled   bool // a due task has waited a quarter of the window
	backingUp bool // due tasks wait, and the queue grows or stalls
}

func (d *QueueDiagnosis) pace() pace {
	p := pace{half: d.Window.Duration() / 2}
	p.growth = d.Now.Inflow - d.Now.Outflow
	p.growing = p.growth >= minGrowth && float64(p.growth) >= 0.1*float64(d.Now.Inflow)
	p.stalled = d.Depth.Due > 0 && d.Depth.OldestWait.Duration() >= time.Duration(stalledWaitOfWindow*float64(d.Window.Duration()))
	p.backingUp = d.Depth.Due > 0 && (p.growing || p.stalled)
	return p
}

// FindCauses judges the measurements and sets Causes (ranked), Healthy and
// Summary. [Store.QueueDiagnose] calls it; it is exported so measurements
// read back from JSON, or made up in a test, can be judged again.
func (d *QueueDiagnosis) FindCauses() {
	p := d.pace()
	finders := []func(pace) (DiagnosisCause, bool){
		d.lostConsumers, d.unservedType, d.poisonRetries, d.slowerAttempts, d.inflowSpike,
		d.concurrencyCapped, d.rateLimited, d.hotKey,
	}
	d.Causes = []DiagnosisCause{}
	for _, find := range finders {
		if c, ok := find(p); ok {
			c.Score = math.Round(min(max(c.Score, 0), 1)*100) / 100
			d.Causes = append(d.Causes, c)
		}
	}
	// Stable: on a tie the finder listed first (the more direct cause) wins.
	slices.SortStableFunc(d.Causes, func(a, b DiagnosisCause) int { return cmp.Compare(b.Score, a.Score) })
	d.Healthy = len(d.Causes) == 0 && !p.backingUp
	d.Summary = d.summary(p)
}

func (d *QueueDiagnosis) summary(p pace) string {
	switch {
	case len(d.Causes) > 0:
		return "most likely: " + d.Causes[0].Summary
	case p.backingUp:
		return fmt.Sprintf("backing up (%d due tasks wait, the oldest for %s; inflow %d, outflow %d in the last %s) with no single cause standing out",
			d.Depth.Due, d.Depth.OldestWait, d.Now.Inflow, d.Now.Outflow, roundDuration(p.half))
	default:
		return fmt.Sprintf("healthy: inflow %d, outflow %d in the last %s; %d waiting (%d due); live workers: %d",
			d.Now.Inflow, d.Now.Outflow, roundDuration(p.half), d.Depth.Waiting(), d.Depth.Due, d.Now.Workers)
	}
}

// lostConsumers: due tasks wait while fewer workers (or none) take them
// than in the first half, or while no worker has claimed for a while with
// nothing running (a worker that stopped late in the second half still
// counts among its workers).
func (d *QueueDiagnosis) lostConsumers(p pace) (DiagnosisCause, bool) {
	then, now := d.Then.Workers, d.Now.Workers
	quiet := d.quietNow()
	if d.Depth.Due == 0 || (now >= then && now > 0 && !quiet) {
		return DiagnosisCause{}, false
	}
	c := DiagnosisCause{Code: CauseLostConsumers, Evidence: []string{
		fmt.Sprintf("live workers: %d then, %d now", then, now),
		fmt.Sprintf("attempts started: %d then, %d now", d.Then.AttemptsStarted, d.Now.AttemptsStarted),
		fmt.Sprintf("outflow: %d then, %d now; inflow: %d then, %d now", d.Then.Outflow, d.Now.Outflow, d.Then.Inflow, d.Now.Inflow),
		d.dueEvidence(),
	}}
	if gone := missing(d.Then.WorkerIDs, d.Now.WorkerIDs); len(gone) > 0 {
		c.Evidence = append(c.Evidence, "workers seen then but not now: "+listSome(gone, DiagnoseTop))
	}
	if d.Depth.ExpiredLeases > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d running tasks hold expired leases: their worker stopped renewing them (crashed or stalled)", d.Depth.ExpiredLeases))
	}
	switch {
	case now == 0 && then > 0:
		c.Score = 1
		c.Summary = fmt.Sprintf("no worker has taken a task for the last %s (%d did before) while %d due tasks wait", roundDuration(p.half), then, d.Depth.Due)
	case now == 0:
		c.Score = 0.9
		c.Summary = fmt.Sprintf("no worker has taken a task of this queue in the last %s while %d due tasks wait", roundDuration(2*p.half), d.Depth.Due)
	case quiet:
		c.Score = 0.95
		c.Summary = fmt.Sprintf("no worker has taken a task for the last %s while %d due tasks wait and none runs (%d took tasks earlier in the window)",
			d.Depth.SinceLastStart, d.Depth.Due, max(then, now))
		c.Evidence = append(c.Evidence, fmt.Sprintf("last attempt started %s ago; running now: 0", d.Depth.SinceLastStart))
	case p.backingUp:
		c.Score = 0.4 + 0.5*float64(then-now)/float64(then)
		c.Summary = fmt.Sprintf("fewer workers take tasks: %d now, %d before, and the queue backs up", now, then)
	default:
		return DiagnosisCause{}, false
	}
	return c, true
}

// quietNow says no worker claims right now: due tasks of types workers ran
// in the window have waited quietAfter with nothing running, no attempt
// started for as long, and no rate limit holds their types back.
func (d *QueueDiagnosis) quietNow() bool {
	if d.Depth.Running > 0 || d.Depth.OldestWait.Duration() < quietAfter || d.Depth.SinceLastStart.Duration() < quietAfter {
		return false
	}
	for _, w := range d.WaitingByType {
		if w.Served && w.Due > 0 && !slices.ContainsFunc(d.Limits.RateLimits, func(r RateLimit) bool { return r.Type == w.Type }) {
			return true
		}
	}
	return false
}

// unservedType: due tasks of a type and version no attempt started of in
// the whole window, while workers did run other types of the queue: no
// running worker has that type (or that version) registered.
func (d *QueueDiagnosis) unservedType(p pace) (DiagnosisCause, bool) {
	started := d.Then.AttemptsStarted + d.Now.AttemptsStarted
	if started == 0 {
		return DiagnosisCause{}, false // nothing was served at all: lost_consumers says it
	}
	for _, w := range d.WaitingByType {
		if w.Served || w.Due == 0 || w.OldestWait.Duration() < p.half {
			continue
		}
		return DiagnosisCause{
			Code:    CauseUnservedType,
			Summary: fmt.Sprintf("no worker runs %s version %d: %d of its tasks wait, none started in the last %s", w.Type, w.Version, w.Due, roundDuration(2*p.half)),
			Evidence: []string{
				fmt.Sprintf("%s v%d: %d waiting, %d due, the oldest for %s", w.Type, w.Version, w.Waiting, w.Due, w.OldestWait),
				fmt.Sprintf("attempts of %s v%d started in the window: 0; of other types: %d", w.Type, w.Version, started),
				"is a worker with this type and version registered running on this queue?",
			},
			Score: 0.85,
		}, true
	}
	return DiagnosisCause{}, false
}

// poisonRetries: a high share of the attempts started in the second half
// are retries, taking worker capacity from new tasks.
func (d *QueueDiagnosis) poisonRetries(pace) (DiagnosisCause, bool) {
	h := d.Now
	if h.AttemptsStarted < minAttemptsForShares || h.RetryShare < poisonRetryShare || len(h.Types) == 0 {
		return DiagnosisCause{}, false
	}
	worst := slices.MaxFunc(h.Types, func(a, b TypeStats) int { return cmp.Compare(a.Retries, b.Retries) })
	c := DiagnosisCause{
		Code:    CausePoisonRetries,
		Summary: fmt.Sprintf("%s keeps failing and retrying: %.0f%% of attempts are retries", worst.Type, 100*h.RetryShare),
		Evidence: []string{
			fmt.Sprintf("retries: %d of %d attempts started now (%.0f%%), %d of %d then (%.0f%%)",
				h.Retries, h.AttemptsStarted, 100*h.RetryShare, d.Then.Retries, d.Then.AttemptsStarted, 100*d.Then.RetryShare),
			fmt.Sprintf("%s: %d of its %d attempts were retries; %d attempts failed, %d leases expired",
				worst.Type, worst.Retries, worst.AttemptsStarted, worst.AttemptsFailed, worst.LeasesExpired),
		},
		Score: 0.4 + 0.6*h.RetryShare,
	}
	if e, ok := topError(h.Errors, worst.Type); ok {
		c.Summary += fmt.Sprintf(", mostly %s", e.describe())
		c.Evidence = append(c.Evidence, fmt.Sprintf("most common failure of %s: %s, %d times: %q", worst.Type, e.describe(), e.Count, e.Message))
	}
	return c, true
}

// topError returns the most common failure of taskType (errors come most
// common first).
func topError(errs []ErrorStats, taskType string) (ErrorStats, bool) {
	for _, e := range errs {
		if e.Type == taskType {
			return e, true
		}
	}
	return ErrorStats{}, false
}

func (e ErrorStats) describe() string {
	parts := []string{e.Class}
	if e.Kind != "" {
		parts = append(parts, "kind "+e.Kind)
	}
	if e.Status != 0 {
		parts = append(parts, fmt.Sprintf("status %d", e.Status))
	}
	if e.Step != "" {
		parts = append(parts, "in step "+e.Step)
	}
	return strings.Join(parts, " ")
}

// slowdown is one type's or step's median duration in both halves.
type slowdown struct {
	what      string
	then, now DurationStats
}

func (s slowdown) factor() float64 { return float64(s.now.P50) / float64(s.then.P50) }

func (s slowdown) significant() bool {
	return s.then.Count >= minDurationSamples && s.now.Count >= minDurationSamples && s.then.P50 > 0 &&
		s.factor() >= slowerFactor && (s.now.P50-s.then.P50).Duration() >= minSlowdown
}

func (s slowdown) String() string {
	return fmt.Sprintf("%s: median %s then, %s now (%.1f×; p95 %s → %s; %d and %d samples)",
		s.what, s.then.P50, s.now.P50, s.factor(), s.then.P95, s.now.P95, s.then.Count, s.now.Count)
}

// slowerAttempts: a type's attempts (or one of its steps) take well longer
// now than then, so the same workers finish fewer tasks.
func (d *QueueDiagnosis) slowerAttempts(p pace) (DiagnosisCause, bool) {
	slower := append(d.slowerTypes(), d.slowerSteps()...)
	if len(slower) == 0 {
		return DiagnosisCause{}, false
	}
	slices.SortStableFunc(slower, func(a, b slowdown) int { return cmp.Compare(b.factor(), a.factor()) })
	worst := slower[0]
	c := DiagnosisCause{
		Code:    CauseSlowerAttempts,
		Summary: fmt.Sprintf("%s take %.1f× as long as before (median %s, was %s)", worst.what, worst.factor(), worst.now.P50, worst.then.P50),
		Score:   min(0.85, 0.5+0.1*math.Log2(worst.factor())),
	}
	for _, s := range slower {
		c.Evidence = append(c.Evidence, s.String())
	}
	if !p.backingUp {
		c.Score /= 2 // slower, but the queue keeps up
		c.Evidence = append(c.Evidence, "the queue is not backing up: the workers keep up so far")
	}
	return c, true
}

func (d *QueueDiagnosis) slowerTypes() []slowdown {
	var out []slowdown
	for _, now := range d.Now.Types {
		i := slices.IndexFunc(d.Then.Types, func(t TypeStats) bool { return t.Type == now.Type })
		if i < 0 {
			continue
		}
		if s := (slowdown{"attempts of " + now.Type, d.Then.Types[i].Attempts, now.Attempts}); s.significant() {
			out = append(out, s)
		}
	}
	return out
}

func (d *QueueDiagnosis) slowerSteps() []slowdown {
	var out []slowdown
	for _, now := range d.Now.Steps {
		i := slices.IndexFunc(d.Then.Steps, func(t StepStats) bool { return t.Type == now.Type && t.Step == now.Step })
		if i < 0 {
			continue
		}
		if s := (slowdown{"step " + now.Step + " of " + now.Type, d.Then.Steps[i].Duration, now.Duration}); s.significant() {
			out = append(out, s)
		}
	}
	return out
}

// inflowSpike: many more tasks arrive now than then, and the workers finish
// them at the pace they had.
func (d *QueueDiagnosis) inflowSpike(p pace) (DiagnosisCause, bool) {
	in, was := d.Now.Inflow, d.Then.Inflow
	if in < minSpikeInflow || float64(in) < spikeFactor*float64(was) || !p.growing ||
		float64(d.Now.Outflow) < steadyOutflow*float64(d.Then.Outflow) {
		return DiagnosisCause{}, false
	}
	factor := float64(in) / float64(max(was, 1))
	rise := fmt.Sprintf("%.1f×", factor)
	if was == 0 {
		rise = "from none"
	}
	c := DiagnosisCause{
		Code:    CauseInflowSpike,
		Summary: fmt.Sprintf("inflow jumped to %d tasks in the last %s from %d; workers finish %d", in, roundDuration(p.half), was, d.Now.Outflow),
		Evidence: []string{
			fmt.Sprintf("inflow: %d then, %d now (%s)", was, in, rise),
			fmt.Sprintf("outflow: %d then, %d now", d.Then.Outflow, d.Now.Outflow),
			fmt.Sprintf("the queue grew by %d in the last %s", p.growth, roundDuration(p.half)),
		},
		Score: min(0.9, 0.5+0.1*math.Log2(factor)),
	}
	if spiking := d.spikingType(); spiking != "" {
		c.Evidence = append(c.Evidence, spiking)
	}
	return c, true
}

// spikingType names the type whose inflow grew the most, if any did.
func (d *QueueDiagnosis) spikingType() string {
	best, bestGrowth := "", 0
	for _, now := range d.Now.Types {
		was := 0
		if i := slices.IndexFunc(d.Then.Types, func(t TypeStats) bool { return t.Type == now.Type }); i >= 0 {
			was = d.Then.Types[i].Inflow
		}
		if g := now.Inflow - was; g > bestGrowth {
			best, bestGrowth = fmt.Sprintf("most of the rise is %s: %d then, %d now", now.Type, was, now.Inflow), g
		}
	}
	return best
}

// concurrencyCapped: the queue runs as many tasks as its limit allows while
// due tasks wait; more workers would not help.
func (d *QueueDiagnosis) concurrencyCapped(p pace) (DiagnosisCause, bool) {
	limit := d.Limits.Concurrency
	if limit == 0 || d.Depth.Running < limit || d.Depth.Due == 0 {
		return DiagnosisCause{}, false
	}
	c := DiagnosisCause{
		Code:    CauseConcurrencyCapped,
		Summary: fmt.Sprintf("the queue runs %d tasks, its concurrency limit, while %d due tasks wait", d.Depth.Running, d.Depth.Due),
		Evidence: []string{
			fmt.Sprintf("running: %d, concurrency limit: %d", d.Depth.Running, limit),
			d.dueEvidence(),
			fmt.Sprintf("live workers now: %d (more workers would not start more)", d.Now.Workers),
		},
		Score: 0.8,
	}
	if !p.backingUp {
		c.Score = 0.4
	}
	return c, true
}

// rateLimited: a type with due tasks starts attempts at (nearly) the pace
// its rate limit allows.
func (d *QueueDiagnosis) rateLimited(p pace) (DiagnosisCause, bool) {
	for _, rl := range d.Limits.RateLimits {
		due := 0
		for _, w := range d.WaitingByType {
			if w.Type == rl.Type {
				due += w.Due
			}
		}
		started := 0
		if i := slices.IndexFunc(d.Now.Types, func(t TypeStats) bool { return t.Type == rl.Type }); i >= 0 {
			started = d.Now.Types[i].AttemptsStarted
		}
		allowed := float64(rl.MaxStarts) * float64(p.half) / float64(rl.Per.Duration())
		if due == 0 || rl.Per <= 0 || float64(started) < rateBound*allowed {
			continue
		}
		c := DiagnosisCause{
			Code:    CauseRateLimited,
			Summary: fmt.Sprintf("%s starts at its rate limit (%d per %s) while %d of its tasks are due", rl.Type, rl.MaxStarts, rl.Per, due),
			Evidence: []string{
				fmt.Sprintf("rate limit of %s: %d starts per %s, about %.0f in %s", rl.Type, rl.MaxStarts, rl.Per, allowed, roundDuration(p.half)),
				fmt.Sprintf("attempts of %s started in the last %s: %d", rl.Type, roundDuration(p.half), started),
				fmt.Sprintf("due tasks of %s waiting: %d", rl.Type, due),
			},
			Score: 0.75,
		}
		if !p.backingUp {
			c.Score = 0.35
		}
		return c, true
	}
	return DiagnosisCause{}, false
}

// hotKey: one fairness key, or one of several types, holds most of the
// waiting tasks: the growth is theirs.
func (d *QueueDiagnosis) hotKey(p pace) (DiagnosisCause, bool) {
	waiting := d.Depth.Waiting()
	if waiting < minHotWaiting {
		return DiagnosisCause{}, false
	}
	name, share, count := "", 0.0, 0
	if len(d.WaitingByKey) > 0 && d.WaitingByKey[0].Share > hotShare && d.WaitingByKey[0].Waiting < waiting {
		k := d.WaitingByKey[0]
		name, share, count = "fairness key "+k.Key, k.Share, k.Waiting
	}
	if len(d.TypeNames()) > 1 && len(d.WaitingByType) > 0 && d.WaitingByType[0].Share > max(hotShare, share) {
		t := d.WaitingByType[0]
		name, share, count = fmt.Sprintf("type %s v%d", t.Type, t.Version), t.Share, t.Waiting
	}
	if name == "" {
		return DiagnosisCause{}, false
	}
	c := DiagnosisCause{
		Code:    CauseHotKey,
		Summary: fmt.Sprintf("%s holds %.0f%% of the waiting tasks (%d of %d)", name, 100*share, count, waiting),
		Evidence: []string{
			fmt.Sprintf("%s: %d of %d waiting tasks (%.0f%%)", name, count, waiting, 100*share),
			d.keyEvidence(),
		},
		Score: 0.3 + 0.8*(share-hotShare),
	}
	if !p.backingUp {
		c.Score *= 0.6
	}
	return c, true
}

func (d *QueueDiagnosis) keyEvidence() string {
	var parts []string
	for _, k := range d.WaitingByKey {
		parts = append(parts, fmt.Sprintf("%s %d", k.Key, k.Waiting))
	}
	if len(parts) == 0 {
		return "no waiting task has a fairness key"
	}
	return fmt.Sprintf("waiting by fairness key (%d keys): %s", d.FairnessKeys, strings.Join(parts, ", "))
}

func (d *QueueDiagnosis) dueEvidence() string {
	return fmt.Sprintf("due tasks waiting: %d (of %d waiting), the oldest for %s", d.Depth.Due, d.Depth.Waiting(), d.Depth.OldestWait)
}

// missing returns the names in was that are not in now.
func missing(was, now []string) []string {
	var out []string
	for _, w := range was {
		if !slices.Contains(now, w) {
			out = append(out, w)
		}
	}
	return out
}

func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

func roundDuration(d time.Duration) string { return MillisOf(d).String() }
