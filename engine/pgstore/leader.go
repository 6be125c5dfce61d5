package pgstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
)

// TaskListLeaseExpired returns up to p.Max running tasks whose lease
// expired p.ExpiredFor ago or earlier by the database clock, oldest expiry
// first.
func (s *Store) TaskListLeaseExpired(ctx context.Context, p *store.LeaseExpiryParams) ([]uuid.UUID, error) {
	return s.listIDs(ctx, "TaskListExpired", pgx.NamedArgs{"max": p.Max, "expired_for_seconds": p.ExpiredFor.Seconds()},
		"list expired leases")
}

// TaskLeaseNextExpiry returns how long until the next lease not yet listed
// by TaskListLeaseExpired(p) will be, by the database clock: one probe of
// tasks_lease_idx.
func (s *Store) TaskLeaseNextExpiry(ctx context.Context, p *store.LeaseExpiryParams) (time.Duration, bool, error) {
	var seconds *float64
	err := s.db.QueryRow(ctx, s.sql("TaskLeaseNextExpiry"), pgx.NamedArgs{
		"expired_for_seconds": p.ExpiredFor.Seconds()}).Scan(&seconds)
	if err != nil {
		return 0, false, errors.Wrap(interpretError(err), "read the next lease expiry")
	}
	if seconds == nil {
		return 0, false, nil
	}
	return max(0, time.Duration(*seconds*float64(time.Second))), true, nil
}

// TaskListStartExpired returns up to p.Max pending tasks never started
// whose start deadline has passed.
func (s *Store) TaskListStartExpired(ctx context.Context, p *store.TaskListStartExpiredParams) ([]uuid.UUID, error) {
	return s.listIDs(ctx, "TaskListStartExpired", pgx.NamedArgs{"max": p.Max}, "list tasks past their start deadline")
}

func (s *Store) listIDs(ctx context.Context, query string, args pgx.NamedArgs, what string) ([]uuid.UUID, error) {
	rows, err := s.db.Query(ctx, s.sql(query), args)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), what)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return ids, errors.Wrap(interpretError(err), what)
}

// DeadLetterList returns a page of dead-lettered tasks, newest first.
func (s *Store) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	args := pgx.NamedArgs{"namespace": p.Namespace, "type": p.Type, "max": limit,
		"paged": p.Before != nil, "before_at": time.Time{}, "before_id": uuid.UUID{}}
	if p.Before != nil {
		args["before_at"], args["before_id"] = p.Before.FinishedAt, p.Before.ID
	}
	query := "DeadLetterList"
	if p.OmitPayloads {
		query = "DeadLetterListLean"
	}
	rows, err := s.db.Query(ctx, s.sql(query), args)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list dead letters")
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	return tasks, errors.Wrap(interpretError(err), "list dead letters")
}

// LeaderAttempt takes or renews the leader lease for the role p.Name on
// behalf of p.Owner, for p.TTL by the database clock. It reports whether
// p.Owner is the leader afterwards.
func (s *Store) LeaderAttempt(ctx context.Context, p *store.LeaderAttemptParams) (bool, error) {
	name, owner, ttl := p.Name, p.Owner, p.TTL
	var got string
	err := s.control.QueryRow(ctx, s.sql("LeaderAttempt"), pgx.NamedArgs{
		"name": name, "owner": owner, "ttl_seconds": ttl.Seconds(),
	}).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, errors.Wrapf(interpretError(err), "attempt leadership of %s", name)
	}
	return got == owner, nil
}

// LeaderResign gives up p.Owner's leader lease for p.Name, if it holds it,
// so another process can take over without waiting for expiry.
func (s *Store) LeaderResign(ctx context.Context, p *store.LeaderResignParams) error {
	_, err := s.control.Exec(ctx, s.sql("LeaderResign"), pgx.NamedArgs{"name": p.Name, "owner": p.Owner})
	return errors.Wrapf(interpretError(err), "resign leadership of %s", p.Name)
}

// indexSummarizeLockTimeout bounds the wait for the lock a summary takes
// (SHARE UPDATE EXCLUSIVE on events and the index): a VACUUM of events
// holds it, and summarizes the same ranges itself. Well under
// deadlock_timeout (1 s by default), after which a waiter would cancel an
// autovacuum of events.
const indexSummarizeLockTimeout = "100ms"

// IndexSummarize summarizes the page ranges of events_at_brin_idx filled
// since its last summary (brin_summarize_new_values): on the store, in a
// transaction of its own that waits at most indexSummarizeLockTimeout for
// the index's lock; in a caller's transaction, under that transaction's
// settings (a setting made here would outlive the savepoint and hold for
// the rest of the caller's transaction).
func (s *Store) IndexSummarize(ctx context.Context) (int, error) {
	var n int64
	var err error
	if s.txn != nil {
		err = s.db.QueryRow(ctx, s.sql("IndexSummarize")).Scan(&n)
	} else {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', '"+indexSummarizeLockTimeout+"', true)"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, s.sql("IndexSummarize")).Scan(&n)
		})
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return int(n), nil
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available: a VACUUM summarizes them
		return 0, nil
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return 0, errmark.Mark(errors.Wrap(err, "summarize events_at_brin_idx: the database role may not execute "+
			"summarize_event_ranges() (grant it EXECUTE, see docs/deployment.md); until a VACUUM of events summarizes them, "+
			"audits read the newest ranges in full"), store.ErrUnsupported)
	}
	return 0, errors.Wrap(interpretError(err), "summarize events_at_brin_idx")
}
