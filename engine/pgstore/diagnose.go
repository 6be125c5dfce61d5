package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// diagnoseStatementTimeout bounds each statement of a diagnosis: an
// operator's question must not hold the database for minutes.
const diagnoseStatementTimeout = 30 * time.Second

func isStatementTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014" // query_canceled: the statement timeout
}

// QueueMeasure measures the queue over the window ending now (see
// [store.QueueDiagnosis]; the causes are left to the engine). It reads in
// one read-only snapshot, each statement bounded by a timeout.
func (s *Store) QueueMeasure(ctx context.Context, p *store.QueueDiagnoseParams) (*store.QueueDiagnosis, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := &store.QueueDiagnosis{Namespace: p.Namespace, Queue: p.Queue, Window: store.MillisOf(p.Window),
		Stranded: []store.StrandedType{}} // filled above the seam (sdk.Client.DiagnoseQueue)
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := s.readTx(ctx, opts, func(tx pgx.Tx) error {
		return s.measureQueue(ctx, tx, p.Window, d)
	})
	if isStatementTimeout(err) && ctx.Err() == nil { // a cancelled context is cancelled the same way
		return nil, errmark.Mark(errors.Wrapf(interpretError(err), "diagnose queue %s/%s: reading %s of history took over %s; try a shorter window",
			p.Namespace, p.Queue, p.Window, diagnoseStatementTimeout), store.ErrDiagnosisTooSlow)
	}
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "diagnose queue %s/%s", p.Namespace, p.Queue)
	}
	return d, nil
}

// measureQueue fills in everything but the causes.
func (s *Store) measureQueue(ctx context.Context, tx pgx.Tx, window time.Duration, d *store.QueueDiagnosis) error {
	err := tx.QueryRow(ctx, s.sql("DiagnoseBegin"), pgx.NamedArgs{
		"statement_timeout": fmt.Sprint(diagnoseStatementTimeout.Milliseconds()),
	}).Scan(new(string), &d.At)
	if err != nil {
		return errors.Wrap(interpretError(err), "read the database clock")
	}
	d.At = d.At.UTC()
	from, mid := d.At.Add(-window), d.At.Add(-window/2)
	d.Then = store.DiagnosisHalf{From: from, To: mid}
	d.Now = store.DiagnosisHalf{From: mid, To: d.At}
	args := pgx.NamedArgs{"namespace": d.Namespace, "queue": d.Queue, "from": from, "mid": mid, "max": store.DiagnoseTop}
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

func (s *Store) measureFlow(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseFlow"), args)
	if err != nil {
		return errors.Wrap(interpretError(err), "measure inflow, outflow and attempts")
	}
	var isNow, total bool
	var ts store.TypeStats
	var inflow, outflow, completed, started, retries, failed, expired, ended int64
	var workers []string
	var lastStart *time.Time
	d.Depth.SinceLastStart = d.Window
	_, err = pgx.ForEachRow(rows, []any{&isNow, &total, &ts.Type, &inflow, &outflow, &completed, &started, &retries,
		&failed, &expired, &ended, &ts.Attempts.Mean, &ts.Attempts.P50, &ts.Attempts.P95, &workers, &lastStart}, func() error {
		ts.Inflow, ts.Outflow, ts.AttemptsStarted, ts.Retries = int(inflow), int(outflow), int(started), int(retries)
		ts.AttemptsFailed, ts.LeasesExpired, ts.Attempts.Count = int(failed), int(expired), int(ended)
		h := half(d, isNow)
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
			d.Depth.SinceLastStart = min(d.Depth.SinceLastStart, max(0, store.MillisOf(d.At.Sub(*lastStart))))
		}
		return nil
	})
	return errors.Wrap(interpretError(err), "measure inflow, outflow and attempts")
}

func (s *Store) measureSteps(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseSteps"), args)
	if err != nil {
		return errors.Wrap(interpretError(err), "measure step durations")
	}
	var isNow bool
	var st store.StepStats
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&isNow, &st.Type, &st.Step, &count, &st.Duration.Mean, &st.Duration.P50, &st.Duration.P95}, func() error {
		st.Duration.Count = int(count)
		h := half(d, isNow)
		h.Steps = append(h.Steps, st)
		return nil
	})
	return errors.Wrap(interpretError(err), "measure step durations")
}

func (s *Store) measureErrors(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseErrors"), args)
	if err != nil {
		return errors.Wrap(interpretError(err), "count failures")
	}
	var isNow bool
	var es store.ErrorStats
	var status int32
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&isNow, &es.Type, &es.Class, &es.Kind, &status, &es.Step, &count, &es.Message}, func() error {
		es.Status, es.Count = int(status), int(count)
		h := half(d, isNow)
		h.Errors = append(h.Errors, es)
		return nil
	})
	return errors.Wrap(interpretError(err), "count failures")
}

func (s *Store) measureDepth(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	var pending, retrying, due int64
	var concurrency, maxWaiting *int32
	err := tx.QueryRow(ctx, s.sql("DiagnoseDepth"), args).Scan(&pending, &retrying, &due, &d.Depth.OldestWait, &concurrency, &maxWaiting)
	if err != nil {
		return errors.Wrap(interpretError(err), "read the queue's depth and settings")
	}
	d.Depth.Pending, d.Depth.Retrying, d.Depth.Due = int(pending), int(retrying), int(due)
	d.Limits.Concurrency, d.Limits.MaxWaiting = int(deref(concurrency)), int(deref(maxWaiting))
	return nil
}

// measureRunning counts the running tasks, and adds the workers holding
// their leases to the second half's workers: a worker busy with long
// attempts started before the half is alive too.
func (s *Store) measureRunning(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseRunning"), args)
	if err != nil {
		return errors.Wrap(interpretError(err), "read running tasks")
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
	return errors.Wrap(interpretError(err), "read running tasks")
}

func (s *Store) measureWaitingTypes(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseWaitingTypes"), args)
	if err != nil {
		return errors.Wrap(interpretError(err), "group waiting tasks by type")
	}
	var wt store.WaitingType
	var version int32
	var waiting, due int64
	_, err = pgx.ForEachRow(rows, []any{&wt.Type, &version, &waiting, &due, &wt.OldestWait, &wt.Served}, func() error {
		wt.Version, wt.Waiting, wt.Due = int(version), int(waiting), int(due)
		d.WaitingByType = append(d.WaitingByType, wt)
		return nil
	})
	return errors.Wrap(interpretError(err), "group waiting tasks by type")
}

func (s *Store) measureWaitingKeys(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	rows, err := tx.Query(ctx, s.sql("DiagnoseWaitingKeys"), args)
	if err != nil {
		return errors.Wrap(interpretError(err), "group waiting tasks by fairness key")
	}
	var wk store.WaitingKey
	var waiting, keys int64
	_, err = pgx.ForEachRow(rows, []any{&wk.Key, &waiting, &keys}, func() error {
		wk.Waiting, d.FairnessKeys = int(waiting), int(keys)
		d.WaitingByKey = append(d.WaitingByKey, wk)
		return nil
	})
	return errors.Wrap(interpretError(err), "group waiting tasks by fairness key")
}

// measureRateLimits reads the rate limits of the types the queue holds or
// ran in the window.
func (s *Store) measureRateLimits(ctx context.Context, tx pgx.Tx, args pgx.NamedArgs, d *store.QueueDiagnosis) error {
	types := d.TypeNames()
	if len(types) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, s.sql("DiagnoseRateLimits"), pgx.NamedArgs{"namespace": args["namespace"], "types": types})
	if err != nil {
		return errors.Wrap(interpretError(err), "read rate limits")
	}
	var rl store.RateLimit
	var maxStarts int32
	var perMS int64
	_, err = pgx.ForEachRow(rows, []any{&rl.Type, &maxStarts, &perMS}, func() error {
		rl.MaxStarts, rl.Per = int(maxStarts), store.Millis(perMS)
		d.Limits.RateLimits = append(d.Limits.RateLimits, rl)
		return nil
	})
	return errors.Wrap(interpretError(err), "read rate limits")
}

// half returns the half of d an is_now flag names.
func half(d *store.QueueDiagnosis, isNow bool) *store.DiagnosisHalf {
	if isNow {
		return &d.Now
	}
	return &d.Then
}
