package pgstore

import (
	"context"
	"time"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// genericPlanSettings, selected at the head of a pipeline, make the
// statements after it in the same implicit transaction run their generic
// plans (planned once per connection where pgx prepares statements, its
// default) without JIT, whose cost estimate a generic plan of the claim
// passes (compiling it took 100-160 ms). See TaskClaim.
const genericPlanSettings = "set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)"

// TaskClaim claims up to p.Max due tasks in one statement, one round
// trip: FOR UPDATE SKIP LOCKED, a new lease epoch, attempt_started appended,
// and each task returned with its history. The same statement reads the
// claim's outlook when it took fewer than p.Max ([store.ClaimResult]).
func (s *Store) TaskClaim(ctx context.Context, p *store.TaskClaimParams) (store.ClaimResult, error) {
	var res store.ClaimResult
	if p.Max <= 0 {
		return res, nil
	}
	if err := store.CheckClaimExclude(p); err != nil {
		return res, err
	}
	types := make([]string, len(p.Types))
	versions := make([]int32, len(p.Types))
	for i, k := range p.Types {
		types[i], versions[i] = k.Type, int32(k.Version)
	}
	// A claim need not wait for its commit to reach disk: if the database
	// crashes and loses it, the task is simply pending again, and the
	// worker's own appends (which do wait) are refused as stale: the next
	// claim's epoch comes from the clock, so it never equals the lost
	// claim's (see the statement). One fsync
	// fewer on the way from a new task to its first step. The settings, the
	// locks and the claim go in one pipeline, so they run as one implicit
	// transaction and the settings (is_local) end with it.
	//
	// The locks and the claim run their generic plans, planned once per
	// connection where pgx prepares statements (its default mode; with
	// describe-only modes the unnamed statement is planned each time): a custom
	// plan costs more to make (1.4-2.5 ms on a 2-core machine) than a claim
	// of one task costs to run (0.6 ms), and is no better, as every walk is
	// an index walk keyed by the parameters. JIT is off for it: the generic
	// plan's row estimates (a LIMIT it cannot see) put its cost past
	// jit_above_cost, and compiling it takes 100-160 ms.
	//
	// In a transaction (see tx.go) the settings are left out: they would
	// last until its commit, and the caller's writes must wait for theirs.
	batch := &pgx.Batch{}
	if s.txn == nil {
		batch.Queue("SELECT set_config('synchronous_commit', 'off', true), " + genericPlanSettings)
	}
	// Concurrency-limited queues and rate-limited types: lock their rows
	// first (a separate statement, so the claim's snapshot is taken after
	// the lock and sees every claim committed before it).
	batch.Queue(s.sql("ClaimLocks"), pgx.NamedArgs{"namespace": p.Namespace, "queues": p.Queues, "types": types})
	claim, args := "TaskClaimMany", pgx.NamedArgs{
		"namespace": p.Namespace, "queues": p.Queues, "types": types, "versions": versions, "max": p.Max, "aging": plan.AgingSlots(p.Max, p.StrictPriority),
		"owner": p.Owner, "lease_seconds": p.LeaseTTL.Seconds(),
	}
	if len(p.Exclude) > 0 {
		exclude := make([][16]byte, len(p.Exclude))
		for i, id := range p.Exclude {
			exclude[i] = id
		}
		claim, args["exclude"] = claimExcluding, exclude
	}
	batch.Queue(s.sql(claim), args).Query(func(rows pgx.Rows) error {
		var err error
		res, err = collectClaim(rows)
		return err
	})
	if err := s.db.SendBatch(ctx, batch).Close(); err != nil {
		return store.ClaimResult{}, errors.Wrap(interpretError(err), "claim tasks")
	}
	if err := s.rereadStaleClaims(ctx, res.Tasks); err != nil {
		return store.ClaimResult{}, err
	}
	if s.metrics != nil {
		s.metrics.ObserveClaimed(res.Tasks)
	}
	return res, nil
}

// collectClaim reads the claim statement's rows: each begins with the
// outlook (next_at, held_back), then a claimed task, whose columns are all
// NULL in the one row of a claim that took nothing.
func collectClaim(rows pgx.Rows) (store.ClaimResult, error) {
	var res store.ClaimResult
	defer rows.Close()
	for rows.Next() {
		var nextAt *time.Time
		if rows.RawValues()[2] == nil { // no task id: the outlook alone
			skip := make([]any, len(rows.FieldDescriptions()))
			skip[0], skip[1] = &nextAt, &res.HeldBack
			if err := rows.Scan(skip...); err != nil {
				return res, err
			}
		} else {
			ct, err := scanClaimed(outlookRow{rows, &nextAt, &res.HeldBack})
			if err != nil {
				return res, err
			}
			res.Tasks = append(res.Tasks, ct)
		}
		if nextAt != nil {
			res.NextAt = nextAt.UTC()
		}
	}
	return res, rows.Err()
}

// outlookRow is a claim statement's row seen as a claimed task's: its scan
// puts the two outlook columns in front into next and heldBack.
type outlookRow struct {
	pgx.CollectableRow
	next     **time.Time
	heldBack *bool
}

func (r outlookRow) Scan(dest ...any) error {
	return r.CollectableRow.Scan(append([]any{r.next, r.heldBack}, dest...)...)
}

// LeaseExtendMany extends p's leases to p.TTL from now by the database
// clock and returns the leases it extended, by task id; the others are lost
// (the task moved to another epoch or finished).
func (s *Store) LeaseExtendMany(ctx context.Context, p *store.LeaseExtendParams) (map[uuid.UUID]store.LeaseRenewal, error) {
	leases, ttl := p.Leases, p.TTL
	ids := make([][16]byte, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.TaskID, l.Epoch
	}
	rows, err := s.control.Query(ctx, s.sql("LeaseExtendMany"), pgx.NamedArgs{
		"ids": ids, "epochs": epochs, "lease_seconds": ttl.Seconds(),
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "extend leases")
	}
	held := make(map[uuid.UUID]store.LeaseRenewal, len(leases))
	var id uuid.UUID
	var cancel, busy bool
	_, err = pgx.ForEachRow(rows, []any{&id, &cancel, &busy}, func() error {
		held[id] = store.LeaseRenewal{CancelRequested: cancel, Busy: busy}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "extend leases")
	}
	return held, nil
}

// errStaleClaimRead marks a claimed task whose earlier events the claim
// statement's snapshot did not all see: an append without the lease (a
// signal, a cancel request, a child's end) committed while the claim
// waited for the row's lock. The row the claim updated has it (last_seq
// counts it); the events read in the same statement do not.
var errStaleClaimRead = errors.New("the claim's snapshot missed events committed before the claim")

// rereadStaleClaims reads again, after the claim's commit, the histories
// the claim statement read short, and replays them up to the claim's
// attempt_started.
func (s *Store) rereadStaleClaims(ctx context.Context, claimed []*store.ClaimedTask) error {
	var stale []uuid.UUID
	for _, ct := range claimed {
		if errors.Is(ct.Err, errStaleClaimRead) {
			stale = append(stale, ct.Task.ID)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	byTask, err := s.EventList(ctx, store.EventListAll("", stale...))
	if err != nil {
		return errors.Wrap(err, "read claimed tasks again")
	}
	for _, ct := range claimed {
		if !errors.Is(ct.Err, errStaleClaimRead) {
			continue
		}
		events := byTask[ct.Task.ID]
		if int64(len(events)) < ct.Task.LastSeq {
			ct.Err = errors.AssertionFailedf("claimed task %s: %d events, the claim is at seq %d", ct.Task.ID, len(events), ct.Task.LastSeq)
			continue
		}
		events = events[:ct.Task.LastSeq]
		state, err := history.Replay(events)
		if err != nil {
			ct.Err = errors.Wrapf(err, "replay claimed task %s", ct.Task.ID)
			continue
		}
		ct.Events, ct.State, ct.Err = events, state, nil
	}
	return nil
}
