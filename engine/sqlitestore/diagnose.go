package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// QueueMeasure implements [store.Store]: the figures engine/pgstore computes
// in SQL (its diagnose.sql), computed here in Go over the events of the
// queue's tasks active in the window, read in one transaction. The
// definitions are the same; the conformance suite holds both to them.
func (s *Store) QueueMeasure(ctx context.Context, p *store.QueueDiagnoseParams) (*store.QueueDiagnosis, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := &store.QueueDiagnosis{Namespace: p.Namespace, Queue: p.Queue, Window: store.MillisOf(p.Window),
		Stranded: []store.StrandedType{}} // filled above the seam (sdk.Client.DiagnoseQueue)
	// The reads hold the store's one connection: bounded as PostgreSQL's
	// statements are.
	readCtx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	// A write transaction for its snapshot: the store's writes wait the
	// few milliseconds the reads take.
	err := s.tx(readCtx, func(tx *txn) error {
		d.At = s.now()
		from, mid := d.At.Add(-p.Window), d.At.Add(-p.Window/2)
		d.Then = store.DiagnosisHalf{From: from, To: mid}
		d.Now = store.DiagnosisHalf{From: mid, To: d.At}
		d.Depth.SinceLastStart = d.Window
		tasks, err := windowHistories(readCtx, tx, p.Namespace, p.Queue, from)
		if err != nil {
			return err
		}
		w := &window{from: from, mid: mid, at: d.At}
		w.measure(d, tasks)
		return measureNow(readCtx, tx, d, from)
	})
	if readCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		return nil, errmark.Mark(errors.Wrapf(err, "diagnose queue %s/%s: reading %s of history took over %s; try a shorter window",
			p.Namespace, p.Queue, p.Window, diagnoseTimeout), store.ErrDiagnosisTooSlow)
	}
	if err != nil {
		return nil, errors.Wrapf(err, "diagnose queue %s/%s", p.Namespace, p.Queue)
	}
	d.Normalize()
	return d, nil
}

// diagnoseTimeout bounds a diagnosis's reads.
const diagnoseTimeout = 30 * time.Second

// taskHistory is a task of the queue with an event in the window: its type
// and whole history.
type taskHistory struct {
	taskType string
	events   []history.Event
}

// windowHistories reads the histories of the queue's tasks that have an
// event at or after from.
func windowHistories(ctx context.Context, tx *txn, namespace, queue string, from time.Time) ([]taskHistory, error) {
	rows, err := tx.query(ctx, "DiagnoseWindowTasks", us(from), namespace, queue)
	if err != nil {
		return nil, interpret(err)
	}
	var ids []uuid.UUID
	types := map[uuid.UUID]string{}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			rows.Close()
			return nil, err
		}
		uid, err := uuid.Parse(id)
		if err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, uid)
		types[uid] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, interpret(err)
	}
	out := make([]taskHistory, 0, len(ids))
	for _, id := range ids {
		events, err := listEvents(ctx, tx, id)
		if errors.Is(err, history.ErrInvalidHistory) {
			continue // written by a newer cairn, say: not this diagnosis's to count
		}
		if err != nil {
			return nil, err
		}
		out = append(out, taskHistory{taskType: types[id], events: events})
	}
	return out, nil
}

// attemptEnds are the events that end an attempt (the first of them after
// attempt_started).
var attemptEnds = map[history.Type]bool{
	history.AttemptFailed: true, history.LeaseExpired: true, history.TaskReleased: true, history.TimerStarted: true, history.WaitStarted: true, history.ChildWaitStarted: true, history.RemoteWaitStarted: true,
	history.TaskCompleted: true, history.TaskFailed: true, history.TaskDeadLettered: true, history.TaskCancelled: true,
	history.TaskContinued: true,
}

// outflows are the events that finish a task.
var outflows = map[history.Type]bool{
	history.TaskCompleted: true, history.TaskFailed: true, history.TaskDeadLettered: true, history.TaskCancelled: true,
	history.TaskExpired: true, history.TaskContinued: true,
}

type window struct{ from, mid, at time.Time }

// flow is what DiagnoseFlow counts, for one half and one type (or all).
type flow struct {
	stats     store.TypeStats
	completed int
	attempts  []float64
	workers   map[string]bool
	lastStart time.Time
}

type errorKey struct {
	isNow                       bool
	taskType, class, kind, step string
	status                      int
}

type errorCount struct {
	n       int
	message string // the greatest, as PostgreSQL's max()
}

func (w *window) measure(d *store.QueueDiagnosis, tasks []taskHistory) {
	flows := map[[2]any]*flow{} // (is now, type); type "" with total
	get := func(isNow bool, typ string) *flow {
		f := flows[[2]any{isNow, typ}]
		if f == nil {
			f = &flow{stats: store.TypeStats{Type: typ}, workers: map[string]bool{}}
			flows[[2]any{isNow, typ}] = f
		}
		return f
	}
	steps := map[[3]any][]float64{} // (is now, type, step)
	errs := map[errorKey]*errorCount{}
	for _, th := range tasks {
		for i, e := range th.events {
			if e.At.Before(w.from) {
				continue
			}
			isNow := !e.At.Before(w.mid)
			for _, f := range []*flow{get(isNow, ""), get(isNow, th.taskType)} {
				f.count(th.events, i)
			}
			switch data := e.Data.(type) {
			case history.StepCompletedData:
				if ms, ok := stepMillis(th.events, i); ok {
					key := [3]any{isNow, th.taskType, data.Name}
					steps[key] = append(steps[key], ms)
				}
			case history.AttemptFailedData:
				countError(errs, errorKey{isNow: isNow, taskType: th.taskType, class: string(data.Error.Class), kind: data.Error.Kind,
					status: data.Error.Status, step: data.Error.Step}, data.Error.Message)
			case history.LeaseExpiredData:
				countError(errs, errorKey{isNow: isNow, taskType: th.taskType, class: string(history.Transient), kind: "lease_expired"}, "")
			}
		}
	}
	for key, f := range flows {
		isNow, typ := key[0].(bool), key[1].(string)
		h := half(d, isNow)
		f.stats.Attempts = durationStats(f.attempts)
		if typ != "" {
			h.Types = append(h.Types, f.stats)
			continue
		}
		h.Inflow, h.Outflow, h.Completed = f.stats.Inflow, f.stats.Outflow, f.completed
		h.AttemptsStarted, h.Retries, h.AttemptsFailed, h.LeasesExpired = f.stats.AttemptsStarted, f.stats.Retries, f.stats.AttemptsFailed, f.stats.LeasesExpired
		h.Attempts = f.stats.Attempts
		for id := range f.workers {
			h.WorkerIDs = append(h.WorkerIDs, id)
		}
		if !f.lastStart.IsZero() {
			d.Depth.SinceLastStart = min(d.Depth.SinceLastStart, max(0, store.MillisOf(w.at.Sub(f.lastStart))))
		}
	}
	for _, h := range []*store.DiagnosisHalf{&d.Then, &d.Now} {
		slices.SortFunc(h.Types, func(a, b store.TypeStats) int { return cmp.Compare(a.Type, b.Type) })
	}
	for key, ms := range steps {
		h := half(d, key[0].(bool))
		h.Steps = append(h.Steps, store.StepStats{Type: key[1].(string), Step: key[2].(string), Duration: durationStats(ms)})
	}
	for _, h := range []*store.DiagnosisHalf{&d.Then, &d.Now} {
		slices.SortFunc(h.Steps, func(a, b store.StepStats) int {
			return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Step, b.Step))
		})
	}
	topErrors(d, errs)
}

// count adds the event events[i] to the flow.
func (f *flow) count(events []history.Event, i int) {
	e := events[i]
	switch t := e.Type(); {
	case t == history.TaskScheduled:
		f.stats.Inflow++
	case t == history.AttemptStarted:
		f.stats.AttemptsStarted++
		if e.Attempt > 1 && i > 0 && events[i-1].Seq == e.Seq-1 &&
			(events[i-1].Type() == history.AttemptFailed || events[i-1].Type() == history.LeaseExpired) {
			f.stats.Retries++
		}
		f.workers[e.Data.(history.AttemptStartedData).WorkerID] = true
		if e.At.After(f.lastStart) {
			f.lastStart = e.At
		}
	case t == history.AttemptFailed:
		f.stats.AttemptsFailed++
	case t == history.LeaseExpired:
		f.stats.LeasesExpired++
	}
	if outflows[e.Type()] {
		f.stats.Outflow++
		if e.Type() == history.TaskCompleted {
			f.completed++
		}
	}
	if attemptEnds[e.Type()] {
		if ms, ok := attemptMillis(events, i); ok {
			f.attempts = append(f.attempts, ms)
			f.stats.Attempts.Count++
		}
	}
}

// attemptMillis is how long the attempt events[i] ends took: from the
// last attempt_started before it, if no other end lies between them.
func attemptMillis(events []history.Event, i int) (float64, bool) {
	for j := i - 1; j >= 0; j-- {
		switch t := events[j].Type(); {
		case t == history.AttemptStarted:
			return millis(events[i].At.Sub(events[j].At)), true
		case attemptEnds[t]:
			return 0, false
		}
	}
	return 0, false
}

// stepMillis is how long the step events[i] completes took: its recorded
// duration, else the time since the attempt's previous event (its start,
// the previous step, a fired timer).
func stepMillis(events []history.Event, i int) (float64, bool) {
	data := events[i].Data.(history.StepCompletedData)
	if data.DurationMillis > 0 {
		return float64(data.DurationMillis), true
	}
	if i == 0 {
		return 0, false
	}
	prev := events[i-1]
	switch prev.Type() {
	case history.AttemptStarted, history.StepCompleted, history.TimerFired:
		if prev.Attempt == events[i].Attempt {
			return millis(events[i].At.Sub(prev.At)), true
		}
	}
	return 0, false
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func countError(errs map[errorKey]*errorCount, key errorKey, message string) {
	c := errs[key]
	if c == nil {
		c = &errorCount{}
		errs[key] = c
	}
	c.n++
	c.message = max(c.message, message)
}

// topErrors keeps the most common failures of each half, at most
// store.DiagnoseTop.
func topErrors(d *store.QueueDiagnosis, errs map[errorKey]*errorCount) {
	keys := make([]errorKey, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b errorKey) int {
		return cmp.Or(-cmp.Compare(errs[a].n, errs[b].n), cmp.Compare(a.taskType, b.taskType), cmp.Compare(a.kind, b.kind),
			cmp.Compare(a.status, b.status), cmp.Compare(a.step, b.step))
	})
	for _, k := range keys {
		h := half(d, k.isNow)
		if len(h.Errors) == store.DiagnoseTop {
			continue
		}
		msg := errs[k].message
		if r := []rune(msg); len(r) > 300 {
			msg = string(r[:300])
		}
		h.Errors = append(h.Errors, store.ErrorStats{Type: k.taskType, Class: k.class, Kind: k.kind, Status: k.status,
			Step: k.step, Count: errs[k].n, Message: msg})
	}
}

func half(d *store.QueueDiagnosis, isNow bool) *store.DiagnosisHalf {
	if isNow {
		return &d.Now
	}
	return &d.Then
}

// durationStats is the count, mean and continuous percentiles (as
// PostgreSQL's percentile_cont) of ms.
func durationStats(ms []float64) store.DurationStats {
	if len(ms) == 0 {
		return store.DurationStats{}
	}
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	sum := 0.0
	for _, v := range sorted {
		sum += v
	}
	return store.DurationStats{Count: len(sorted), Mean: store.Millis(sum / float64(len(sorted))),
		P50: store.Millis(percentile(sorted, 0.5)), P95: store.Millis(percentile(sorted, 0.95))}
}

func percentile(sorted []float64, p float64) float64 {
	pos := p * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// measureNow reads the queue as it is: depth and settings, running tasks
// by lease owner, waiting tasks by type and by fairness key, rate limits.
func measureNow(ctx context.Context, tx *txn, d *store.QueueDiagnosis, from time.Time) error {
	now := us(d.At)
	var oldest sql.NullInt64
	var concurrency, maxWaiting sql.NullInt64
	err := tx.queryRow(ctx, "DiagnoseDepth", now, d.Namespace, d.Queue).Scan(&d.Depth.Pending, &d.Depth.Retrying, &d.Depth.Due, &oldest, &concurrency, &maxWaiting)
	if err != nil {
		return errors.Wrap(interpret(err), "read the queue's depth and settings")
	}
	if oldest.Valid {
		d.Depth.OldestWait = store.MillisOf(time.Duration(now-oldest.Int64) * time.Microsecond)
	}
	d.Limits.Concurrency, d.Limits.MaxWaiting = int(concurrency.Int64), int(maxWaiting.Int64)
	if err := measureRunning(ctx, tx, d, now); err != nil {
		return err
	}
	if err := measureWaiting(ctx, tx, d, now, from); err != nil {
		return err
	}
	return measureRateLimits(ctx, tx, d)
}

func measureRunning(ctx context.Context, tx *txn, d *store.QueueDiagnosis, now int64) error {
	rows, err := tx.query(ctx, "DiagnoseRunning", now, d.Namespace, d.Queue)
	if err != nil {
		return errors.Wrap(interpret(err), "read running tasks")
	}
	defer rows.Close()
	for rows.Next() {
		var owner sql.NullString
		var running, expired int
		if err := rows.Scan(&owner, &running, &expired); err != nil {
			return err
		}
		d.Depth.Running += running
		d.Depth.ExpiredLeases += expired
		if owner.Valid && running > expired && !slices.Contains(d.Now.WorkerIDs, owner.String) {
			d.Now.WorkerIDs = append(d.Now.WorkerIDs, owner.String)
		}
	}
	return errors.Wrap(interpret(rows.Err()), "read running tasks")
}

func measureWaiting(ctx context.Context, tx *txn, d *store.QueueDiagnosis, now int64, from time.Time) error {
	rows, err := tx.query(ctx, "DiagnoseWaitingTypes", now, d.Namespace, d.Queue, us(from))
	if err != nil {
		return errors.Wrap(interpret(err), "group waiting tasks by type")
	}
	for rows.Next() {
		var wt store.WaitingType
		var oldest sql.NullInt64
		if err := rows.Scan(&wt.Type, &wt.Version, &wt.Waiting, &wt.Due, &oldest, &wt.Served); err != nil {
			rows.Close()
			return err
		}
		if oldest.Valid {
			wt.OldestWait = store.MillisOf(time.Duration(now-oldest.Int64) * time.Microsecond)
		}
		d.WaitingByType = append(d.WaitingByType, wt)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return errors.Wrap(interpret(err), "group waiting tasks by type")
	}
	rows, err = tx.query(ctx, "DiagnoseWaitingKeys", d.Namespace, d.Queue, store.DiagnoseTop)
	if err != nil {
		return errors.Wrap(interpret(err), "group waiting tasks by fairness key")
	}
	defer rows.Close()
	for rows.Next() {
		var wk store.WaitingKey
		if err := rows.Scan(&wk.Key, &wk.Waiting, &d.FairnessKeys); err != nil {
			return err
		}
		d.WaitingByKey = append(d.WaitingByKey, wk)
	}
	return errors.Wrap(interpret(rows.Err()), "group waiting tasks by fairness key")
}

func measureRateLimits(ctx context.Context, tx *txn, d *store.QueueDiagnosis) error {
	types := d.TypeNames()
	if len(types) == 0 {
		return nil
	}
	rows, err := tx.query(ctx, "DiagnoseRateLimits", d.Namespace, jsonStrings(types))
	if err != nil {
		return errors.Wrap(interpret(err), "read rate limits")
	}
	defer rows.Close()
	for rows.Next() {
		var rl store.RateLimit
		var perMS int64
		if err := rows.Scan(&rl.Type, &rl.MaxStarts, &perMS); err != nil {
			return err
		}
		rl.Per = store.Millis(perMS)
		d.Limits.RateLimits = append(d.Limits.RateLimits, rl)
	}
	return errors.Wrap(interpret(rows.Err()), "read rate limits")
}
