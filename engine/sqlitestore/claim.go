package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// TaskClaim implements [store.Store]: in one write transaction, the
// due tasks of the queues and type keys, by priority then virtual start
// time (aging reserves one slot in eight for the longest-waiting), within
// the queues' concurrency limits and the types' rate limits; each gets a
// new lease epoch and attempt_started. A claim that took fewer than p.Max
// reads its outlook in the same transaction, as PostgreSQL's does.
func (s *Store) TaskClaim(ctx context.Context, p *store.TaskClaimParams) (store.ClaimResult, error) {
	if err := store.CheckClaimExclude(p); err != nil {
		return store.ClaimResult{}, err
	}
	if p.Max <= 0 || len(p.Queues) == 0 || len(p.Types) == 0 {
		return store.ClaimResult{}, nil
	}
	exclude := excludeJSON(p.Exclude)
	var claimed []*store.ClaimedTask
	var res store.ClaimResult
	err := s.tx(ctx, func(tx *txn) error {
		claimed, res = nil, store.ClaimResult{}
		now := s.now()
		free, err := queueSlots(ctx, tx, p.Namespace, p.Queues)
		if err != nil {
			return err
		}
		tokens, err := rateTokens(ctx, tx, p.Namespace, p.Types, now)
		if err != nil {
			return err
		}
		picked, err := pickDue(ctx, tx, p, exclude, now, free, tokens)
		if err != nil {
			return err
		}
		for _, t := range picked {
			c, err := claimOne(ctx, tx, t, p.Owner, p.LeaseTTL, now)
			if err != nil {
				return err
			}
			claimed = append(claimed, c)
		}
		if err := spendTokens(ctx, tx, p.Namespace, claimed, now); err != nil {
			return err
		}
		if len(claimed) < p.Max {
			res, err = outlook(ctx, tx, p, exclude, now, free, tokens)
		}
		return err
	})
	if err != nil {
		return store.ClaimResult{}, errors.Wrap(err, "claim tasks")
	}
	if s.metrics != nil {
		s.metrics.ObserveClaimed(claimed)
	}
	res.Tasks = claimed
	return res, nil
}

// outlook reads what a claim left (see [store.ClaimResult]), after its
// writes: free and tokens are the limited queues' slots and the rate-limited
// types' tokens it left.
func outlook(ctx context.Context, tx *txn, p *store.TaskClaimParams, exclude string, now time.Time, free, tokens map[string]int) (store.ClaimResult, error) {
	var res store.ClaimResult
	waitingTypes := map[string]bool{}
	for _, q := range p.Queues {
		for _, k := range p.Types {
			var next sql.NullInt64
			var waiting bool
			stmt, args := excluding("ClaimOutlook", exclude, []any{p.Namespace, q, k.Type, k.Version, us(now),
				p.Namespace, q, k.Type, k.Version, us(now), us(now)})
			err := tx.queryRow(ctx, stmt, args...).Scan(&next, &waiting)
			if err != nil {
				return res, interpret(err)
			}
			if next.Valid {
				res.NextAt = earliest(res.NextAt, fromUS(next.Int64))
			}
			if waiting && budget(free, q) == 0 {
				res.HeldBack = true
			}
			if waiting {
				waitingTypes[k.Type] = true
			}
		}
	}
	for typ := range waitingTypes {
		if budget(tokens, typ) != 0 {
			continue
		}
		at, err := nextToken(ctx, tx, p.Namespace, typ, now)
		if err != nil {
			return res, err
		}
		res.NextAt = earliest(res.NextAt, at)
	}
	return res, nil
}

// nextToken returns when the bucket of rate-limited type typ, spent to
// below one token, has a start token again.
func nextToken(ctx context.Context, tx *txn, namespace, typ string, now time.Time) (time.Time, error) {
	var b bucket
	if err := tx.queryRow(ctx, "RateLimitGet", namespace, typ).Scan(&b.maxStarts, &b.perMS, &b.tokens, &b.refilledAt); err != nil {
		return time.Time{}, interpret(err)
	}
	missing := max(0, 1-b.refill(now))
	wait := time.Duration(missing * float64(b.perMS) / float64(b.maxStarts) * float64(time.Millisecond))
	return now.Add(wait), nil
}

// earliest returns the earlier of a and b, where zero means none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// queueSlots returns the free slots of the limited queues among queues.
func queueSlots(ctx context.Context, tx *txn, namespace string, queues []string) (map[string]int, error) {
	rows, err := tx.query(ctx, "ClaimQueueSlots", namespace, jsonStrings(queues))
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] = max(0, n)
	}
	return out, interpret(rows.Err())
}

// rateTokens returns the starts left in the token bucket of each
// rate-limited type among types, refilled to now.
func rateTokens(ctx context.Context, tx *txn, namespace string, types []store.TypeKey, now time.Time) (map[string]int, error) {
	names := make([]string, len(types))
	for i, k := range types {
		names[i] = k.Type
	}
	rows, err := tx.query(ctx, "ClaimRateLimits", namespace, jsonStrings(names))
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var b bucket
		var typ string
		if err := rows.Scan(&typ, &b.maxStarts, &b.perMS, &b.tokens, &b.refilledAt); err != nil {
			return nil, err
		}
		out[typ] = max(0, int(math.Floor(b.refill(now))))
	}
	return out, interpret(rows.Err())
}

type bucket struct {
	maxStarts, perMS, refilledAt int64
	tokens                       float64
}

// refill is the bucket's tokens at now: refilled continuously at maxStarts
// per perMS, up to maxStarts.
func (b bucket) refill(now time.Time) float64 {
	elapsedMS := max(0, float64(us(now)-b.refilledAt)/1000)
	return math.Min(float64(b.maxStarts), b.tokens+elapsedMS/float64(b.perMS)*float64(b.maxStarts))
}

// pickDue chooses the tasks to claim, as PostgreSQL's claim does: one
// ordered, limited walk of the claim index per queue and type key (so a
// claim's cost does not grow with the backlog), merged; the aging share
// first (the longest-waiting due tasks whatever their priority), then by
// priority and virtual start time, within the queues' free slots and the
// types' tokens.
func pickDue(ctx context.Context, tx *txn, p *store.TaskClaimParams, exclude string, now time.Time, free, tokens map[string]int) ([]*store.Task, error) {
	aging := plan.AgingSlots(p.Max, p.StrictPriority)
	var aged, ranked []candidate
	for _, q := range p.Queues {
		for _, k := range p.Types {
			limit := min(p.Max, budget(free, q), budget(tokens, k.Type))
			if limit <= 0 {
				continue
			}
			// No more than are due: see ClaimDueCount.
			due, err := countDue(ctx, tx, p.Namespace, q, k, exclude, now, limit)
			if err != nil {
				return nil, err
			}
			limit = min(limit, due)
			if limit == 0 {
				continue // nothing due: no walk (an idle claim's common case)
			}
			a, err := walkDue(ctx, tx, "ClaimWalkByAge", p.Namespace, q, k, exclude, now, min(aging, limit))
			if err != nil {
				return nil, err
			}
			r, err := walkDue(ctx, tx, "ClaimWalkByPriority", p.Namespace, q, k, exclude, now, limit)
			if err != nil {
				return nil, err
			}
			aged, ranked = append(aged, a...), append(ranked, r...)
		}
	}
	slices.SortFunc(aged, func(a, b candidate) int {
		return cmp.Or(a.t.RunAt.Compare(b.t.RunAt), strings.Compare(a.t.ID.String(), b.t.ID.String()))
	})
	slices.SortFunc(ranked, func(a, b candidate) int {
		return cmp.Or(-cmp.Compare(a.t.Priority, b.t.Priority), cmp.Compare(a.fairAt, b.fairAt),
			a.t.RunAt.Compare(b.t.RunAt), strings.Compare(a.t.ID.String(), b.t.ID.String()))
	})
	var picked []*store.Task
	seen := map[uuid.UUID]bool{}
	take := func(from []candidate, limit int) {
		taken := 0
		for _, c := range from {
			if taken == limit || len(picked) == p.Max {
				return
			}
			if seen[c.t.ID] || budget(free, c.t.Queue) == 0 || budget(tokens, c.t.Type) == 0 {
				continue
			}
			spend(free, c.t.Queue)
			spend(tokens, c.t.Type)
			seen[c.t.ID] = true
			picked = append(picked, c.t)
			taken++
		}
	}
	take(aged, aging)
	take(ranked, p.Max)
	return picked, nil
}

// candidate is a due task a walk found, with its virtual start time.
type candidate struct {
	t      *store.Task
	fairAt int64
}

// countDue returns how many tasks of one queue and type key are due, up to
// limit.
func countDue(ctx context.Context, tx *txn, namespace, queue string, k store.TypeKey, exclude string, now time.Time, limit int) (int, error) {
	var n int
	stmt, args := excluding("ClaimDueCount", exclude, []any{namespace, queue, k.Type, k.Version, us(now)}, limit)
	err := tx.queryRow(ctx, stmt, args...).Scan(&n)
	return n, interpret(err)
}

// walkDue returns up to limit due tasks of one queue and type key in the
// order of the walk named (ClaimWalkByPriority on tasks_claim_idx,
// ClaimWalkByAge on tasks_age_idx).
func walkDue(ctx context.Context, tx *txn, walk, namespace, queue string, k store.TypeKey, exclude string, now time.Time, limit int) ([]candidate, error) {
	if limit <= 0 {
		return nil, nil
	}
	stmt, args := excluding(walk, exclude, []any{namespace, queue, k.Type, k.Version, us(now), us(now)}, limit)
	rows, err := tx.query(ctx, stmt, args...)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		if c.t, err = scanTask(rows, &c.fairAt); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, interpret(rows.Err())
}

// budget is what is left of budget[key]: a large number when key is not
// limited.
func budget(budget map[string]int, key string) int {
	if n, limited := budget[key]; limited {
		return n
	}
	return math.MaxInt
}

// spend takes one from budget[key] if key is limited.
func spend(budget map[string]int, key string) {
	if n, limited := budget[key]; limited {
		budget[key] = n - 1
	}
}

// claimOne starts a new attempt of task t (its row as read) under a new
// lease: its history replayed (a fresh task's is task_scheduled alone,
// which its row holds), attempt_started planned by the engine's fold, the
// row written from the new state.
func claimOne(ctx context.Context, tx *txn, t *store.Task, owner string, ttl time.Duration, now time.Time) (*store.ClaimedTask, error) {
	// A new epoch, greater than the last and than the clock in
	// microseconds, as PostgreSQL's claim makes it.
	epoch := max(t.LeaseEpoch+1, us(time.Now()))
	expires := now.Add(ttl).Truncate(time.Microsecond)
	started := history.AttemptStartedData{WorkerID: owner, LeaseEpoch: epoch, LeaseExpiresAt: expires}
	events := []history.Event{{Seq: 1, At: t.CreatedAt, Data: plan.ScheduledFromRow(t)}}
	if t.LastSeq != 1 {
		var err error
		if events, err = listEvents(ctx, tx, t.ID); err != nil {
			return leaseUnreadable(ctx, tx, t, started, now, err)
		}
	}
	state, err := history.Replay(events)
	if err != nil {
		return leaseUnreadable(ctx, tx, t, started, now, errors.Wrapf(err, "replay claimed task %s", t.ID))
	}
	ap, err := plan.Append(&store.EventAppendParams{TaskID: t.ID, State: state, At: now, Attempt: state.Attempt + 1,
		Payloads: []history.Payload{started}}, now)
	if err != nil {
		return leaseUnreadable(ctx, tx, t, started, now, err)
	}
	if err := insertEvents(ctx, tx, t.ID, ap.Events); err != nil {
		return nil, err
	}
	row, err := writeClaimedRow(ctx, tx, t, ap, us(expires))
	if err != nil {
		return nil, err
	}
	ev := ap.Events[0]
	events = append(events, history.Event{Seq: ev.Seq, At: ev.At, Attempt: ev.Attempt, Data: started})
	return &store.ClaimedTask{Task: row, Events: events, State: ap.Next}, nil
}

// leaseUnreadable claims a task whose history this process cannot read
// (events of a newer cairn, say) as PostgreSQL's claim does, from its row
// alone: attempt_started and the lease, so the claim's slot goes to it
// once and it waits for its lease to expire, instead of heading every
// claim. The worker gets cause, not the task to run.
func leaseUnreadable(ctx context.Context, tx *txn, t *store.Task, started history.AttemptStartedData, now time.Time, cause error) (*store.ClaimedTask, error) {
	data, err := history.Encode(started)
	if err != nil {
		return nil, err
	}
	if err := insertEvents(ctx, tx, t.ID, []plan.EncodedEvent{{Seq: t.LastSeq + 1, Type: history.AttemptStarted, At: now,
		Attempt: t.Attempt + 1, Data: data}}); err != nil {
		return nil, err
	}
	row, err := scanTask(tx.queryRow(ctx, "TaskLeaseUnreadable", started.WorkerID, started.LeaseEpoch, us(started.LeaseExpiresAt), us(now), us(now),
		t.ID.String()))
	if err != nil {
		return nil, interpret(err)
	}
	return &store.ClaimedTask{Task: row, Err: cause}, nil
}

// spendTokens takes the claimed tasks' starts from their types' buckets.
func spendTokens(ctx context.Context, tx *txn, namespace string, claimed []*store.ClaimedTask, now time.Time) error {
	started := map[string]int{}
	for _, c := range claimed {
		started[c.Task.Type]++ // an unreadable task was leased too
	}
	for typ, n := range started {
		var b bucket
		err := tx.queryRow(ctx, "RateLimitGet", namespace, typ).Scan(&b.maxStarts, &b.perMS, &b.tokens, &b.refilledAt)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return interpret(err)
		}
		if _, err := tx.exec(ctx, "RateLimitSpend", b.refill(now)-float64(n), max(b.refilledAt, us(now)), namespace, typ); err != nil {
			return interpret(err)
		}
	}
	return nil
}

func insertEvents(ctx context.Context, tx *txn, id uuid.UUID, events []plan.EncodedEvent) error {
	ctx = rowWrite(ctx)
	for _, ev := range events {
		if _, err := tx.exec(ctx, "EventInsert", id.String(), ev.Seq, string(ev.Type), us(ev.At), ev.Attempt, string(ev.Data)); err != nil {
			return interpret(err)
		}
	}
	return nil
}

// rowWrite is the context of a statement that writes one row in a write
// transaction: ctx without its end. The driver watches a statement's
// context with a goroutine of its own, to interrupt the statement when
// the context ends: a goroutine per event and row written, some 6% of the
// embedded store's drain, for statements that take microseconds. The
// transaction still ends with ctx (database/sql rolls it back, and the
// statements after that fail).
func rowWrite(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// rowArgs are the first sixteen parameters of TaskWriteClaimed and
// TaskWriteFenced: the projection row at plan.Next, with expires as the
// lease's expiry, and the task's id.
func rowArgs(id uuid.UUID, plan plan.AppendPlan, expires any) []any {
	next := plan.Next
	return []any{string(next.Status), us(next.RunAt), us(plan.FairAt), us(plan.FairAt),
		next.Attempt, nullString(next.Lease.Owner), next.Lease.Epoch, expires,
		nullBytes(next.Output), nullBytes(plan.LastError), next.CancelRequested, next.LastSeq, us(next.UpdatedAt),
		nullTimeUS(next.StartedAt), nullTimeUS(next.FinishedAt), id.String()}
}

// writeClaimedRow writes the row of claimed task t (its row as read in
// this transaction) under its new lease, which expires at leaseExpires,
// and returns it. The row is t with what the UPDATE wrote, made here
// rather than read back: returning and scanning every column of the row
// was a fifth of the embedded store's drain (cairn bench throughput).
func writeClaimedRow(ctx context.Context, tx *txn, t *store.Task, plan plan.AppendPlan, leaseExpires int64) (*store.Task, error) {
	res, err := tx.exec(rowWrite(ctx), "TaskWriteClaimed", rowArgs(t.ID, plan, leaseExpires)...)
	if err != nil {
		return nil, interpret(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return nil, errors.Wrapf(interpret(err), "claim task %s: %d rows written", t.ID, n)
	}
	return claimedRow(t, plan, leaseExpires)
}

// claimedRow is t's row once TaskWriteClaimed has written plan's next
// state into it, as scanTask would read it back: times in microseconds,
// UTC.
func claimedRow(t *store.Task, plan plan.AppendPlan, leaseExpires int64) (*store.Task, error) {
	next, row := plan.Next, *t
	row.Status, row.RunAt, row.Attempt = next.Status, fromUS(us(next.RunAt)), next.Attempt
	row.LeaseOwner, row.LeaseEpoch, row.LeaseExpiresAt = next.Lease.Owner, next.Lease.Epoch, timePtr(sql.NullInt64{Int64: leaseExpires, Valid: true})
	row.Output, row.LastError = nil, nil
	if len(next.Output) > 0 {
		row.Output = json.RawMessage(next.Output)
	}
	if len(plan.LastError) > 0 {
		row.LastError = new(history.ErrorInfo)
		if err := json.Unmarshal(plan.LastError, row.LastError); err != nil {
			return nil, errors.Wrapf(err, "decode last_error of task %s", t.ID)
		}
	}
	row.CancelRequest, row.LastSeq, row.UpdatedAt = next.CancelRequested, next.LastSeq, fromUS(us(next.UpdatedAt))
	row.StartedAt, row.FinishedAt = timePtr(nullTimeUS(next.StartedAt)), timePtr(nullTimeUS(next.FinishedAt))
	return &row, nil
}

// writeFencedRow writes the row of p's task if the fence lets p write,
// checked in the UPDATE itself (the seq; the epoch when set; for the
// rescuer, the lease's expiry), as PostgreSQL's append does. It reports
// whether it wrote.
func writeFencedRow(ctx context.Context, tx *txn, p *store.EventAppendParams, plan plan.AppendPlan, now time.Time, maxBytes int64) (bool, error) {
	// The new owner in the eighth place: the expiry stays while a lease
	// goes on. The history's bytes grow by the events', within maxBytes
	// (0: no bound).
	args := append(rowArgs(p.TaskID, plan, nullString(plan.Next.Lease.Owner)), plan.Bytes,
		p.State.LastSeq, p.Epoch, p.Epoch, p.ExpiredOnly, us(now), maxBytes, plan.Bytes, maxBytes)
	res, err := tx.exec(rowWrite(ctx), "TaskWriteFenced", args...)
	if err != nil {
		return false, interpret(err)
	}
	n, err := res.RowsAffected()
	if err != nil || n != 1 {
		return false, interpret(err)
	}
	if plan.Next.Erased && !p.State.Erased {
		// task_erased destroys the data key with the event (crypto-shredding).
		if _, err := tx.exec(ctx, "TaskDataKeyErase", p.TaskID.String()); err != nil {
			return false, interpret(err)
		}
	}
	return true, nil
}

// EventAppend implements [store.Store].
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	res, err := s.EventAppendMany(ctx, []*store.EventAppendParams{p})
	if err != nil {
		return p.State, err
	}
	return res[0].State, res[0].Err
}

// EventAppendMany implements [store.Store]: every append in one write
// transaction, each fenced on its own by the task's seq, its lease epoch
// and, for the rescuer, its lease's expiry.
func (s *Store) EventAppendMany(ctx context.Context, ps []*store.EventAppendParams) ([]store.AppendResult, error) {
	out := make([]store.AppendResult, len(ps))
	plans := make([]*plan.AppendPlan, len(ps))
	now := s.now()
	for i, p := range ps {
		out[i].State = p.State
		ap, err := plan.Append(p, now)
		if err != nil {
			out[i].Err = err
			continue
		}
		plans[i] = &ap
	}
	var note store.Notification
	var parents []parentWrite
	err := s.tx(ctx, func(tx *txn) error {
		note, parents = store.Notification{}, nil
		w := &appendWriter{tx: tx, now: s.now(), note: &note, limited: queueLimits{}, limits: s.limits}
		for i, p := range ps {
			if plans[i] == nil {
				continue
			}
			refused, err := w.write(ctx, p, *plans[i])
			if err != nil {
				return err
			}
			if refused != nil {
				out[i].Err = refused
				continue
			}
			out[i].State = plans[i].Next
		}
		ids, reports := plan.ChildReports(ps, out, func(i int) bool { return plans[i] != nil && out[i].Err == nil })
		var err error
		parents, err = w.reportToParents(ctx, ids, reports)
		return err
	})
	if err != nil {
		return nil, errors.Wrap(err, "append events")
	}
	for i := range out {
		if out[i].Err != nil {
			out[i].State = ps[i].State
			continue
		}
		if s.metrics != nil {
			s.metrics.ObserveAppended(ps[i], out[i].State)
		}
	}
	if s.metrics != nil {
		for _, w := range parents {
			s.metrics.ObserveAppended(w.p, w.next)
		}
	}
	s.announce(note)
	return out, nil
}

// appendWriter writes appends inside one transaction, gathering what they
// announce.
type appendWriter struct {
	tx      *txn
	now     time.Time
	note    *store.Notification
	limited queueLimits
	limits  store.HistoryLimits // resolved: 0 is no bound
}

// write writes the planned append p: its row fenced, its events, and what
// it announces. refused says why the fence refused it (nothing written).
func (w *appendWriter) write(ctx context.Context, p *store.EventAppendParams, planned plan.AppendPlan) (refused, err error) {
	maxBytes, refused := plan.HistoryBound(p, planned, w.limits)
	if refused != nil {
		return refused, nil
	}
	written, err := writeFencedRow(ctx, w.tx, p, planned, w.now, maxBytes)
	if err != nil {
		return nil, err
	}
	if !written {
		// Refused: find out why, as PostgreSQL's explainRefusal.
		refused, err := fence(ctx, w.tx, p, w.now, planned, maxBytes)
		if err != nil {
			return nil, err
		}
		if refused == nil {
			refused = errors.AssertionFailedf("append to task %s: refused, and the fence finds no reason", p.TaskID)
		}
		return refused, nil
	}
	if err := insertEvents(ctx, w.tx, p.TaskID, planned.Events); err != nil {
		return nil, err
	}
	next := planned.Next
	if !w.note.Ready && leftRunning(p, next) {
		// A slot of a concurrency-limited queue is free: wake the workers
		// it held back, as PostgreSQL's NOTIFY does.
		if w.note.Ready, err = w.limited.has(ctx, w.tx, p.State.Scheduled); err != nil {
			return nil, err
		}
	}
	switch {
	case next.Status.Terminal():
		w.note.Done = append(w.note.Done, p.TaskID)
	case (next.Status == history.StatusPending || next.Status == history.StatusRetrying) && !next.RunAt.After(w.now):
		w.note.Ready = true
	case next.Status == history.StatusRunning && next.CancelRequested:
		w.note.Cancel = append(w.note.Cancel, p.TaskID)
	}
	return nil, nil
}

// appendOne plans and writes p; refused is as [appendWriter.write]'s, or
// the plan's refusal.
func (w *appendWriter) appendOne(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	planned, err := plan.Append(p, w.now)
	if err != nil {
		return p.State, err
	}
	refused, err := w.write(ctx, p, planned)
	if err != nil {
		return p.State, err
	}
	if refused != nil {
		return p.State, refused
	}
	return planned.Next, nil
}

// parentWrite is a parent's append of child_finished, with the state it
// replayed to.
type parentWrite struct {
	p    *store.EventAppendParams
	next history.State
}

// reportToParents appends the children's child_finished to their parents
// (ids), in the transaction that ended the children: the store's one
// writer holds it, so the parents' histories cannot move meanwhile.
func (w *appendWriter) reportToParents(ctx context.Context, ids []uuid.UUID, reports map[uuid.UUID][]history.ChildFinishedData) ([]parentWrite, error) {
	var out []parentWrite
	for _, id := range ids {
		events, err := listEvents(ctx, w.tx, id)
		if err != nil {
			return nil, err
		}
		if len(events) == 0 {
			continue // the parent is gone (retention): nobody to tell
		}
		state, err := history.Replay(events)
		if err != nil {
			return nil, errors.Wrapf(err, "replay parent %s", id)
		}
		ap := plan.ParentAppend(id, state, reports[id])
		if ap == nil {
			continue
		}
		next, err := w.appendOne(ctx, ap)
		if err != nil {
			return nil, errors.Wrapf(err, "report to parent %s", id)
		}
		out = append(out, parentWrite{p: ap, next: next})
	}
	return out, nil
}

// leftRunning says whether append p ends its task's attempt: written
// under the attempt's lease (or by the rescuer, past it), the task is no
// longer running.
func leftRunning(p *store.EventAppendParams, next history.State) bool {
	return p.State.Status == history.StatusRunning && next.Status != history.StatusRunning && (p.Epoch != 0 || p.ExpiredOnly)
}

// queueLimits remembers, within one transaction, which queues have a
// concurrency limit.
type queueLimits map[[2]string]bool

// has reports whether the queue of the task scheduled by sc has a
// concurrency limit.
func (l queueLimits) has(ctx context.Context, tx *txn, sc history.TaskScheduledData) (bool, error) {
	key := [2]string{sc.Namespace, sc.Queue}
	if limited, known := l[key]; known {
		return limited, nil
	}
	var limited bool
	if err := tx.queryRow(ctx, "QueueLimited", sc.Namespace, sc.Queue).Scan(&limited); err != nil {
		return false, interpret(err)
	}
	l[key] = limited
	return limited, nil
}

// fence says why p may not write, after writeFencedRow wrote nothing: the
// task is not at p's seq, not under p's epoch (when set) or, for
// ExpiredOnly, not past its lease. refused is marked as engine/pgstore's
// refusals are; err is the database failing, which fails the whole batch.
func fence(ctx context.Context, tx *txn, p *store.EventAppendParams, now time.Time, planned plan.AppendPlan, maxBytes int64) (refused, err error) {
	var lastSeq, epoch, historyBytes int64
	var owner sql.NullString
	var expires sql.NullInt64
	err = tx.queryRow(ctx, "TaskFenceByID", p.TaskID.String()).Scan(&lastSeq, &epoch, &owner, &expires, &historyBytes)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return errmark.Mark(errors.Newf("append to task %s: no such task", p.TaskID), store.ErrNotFound), nil
	case err != nil:
		return nil, errors.Wrapf(interpret(err), "append to task %s", p.TaskID)
	case p.Epoch != 0 && epoch != p.Epoch:
		return errmark.Mark(errors.Newf("append to task %s: lease epoch %d, task is at %d", p.TaskID, p.Epoch, epoch), store.ErrFenced), nil
	case lastSeq != p.State.LastSeq:
		if p.Epoch != 0 && !owner.Valid && !p.ExpiredOnly {
			return errmark.Mark(errors.Newf("append to task %s: lease epoch %d has ended", p.TaskID, p.Epoch), store.ErrFenced), nil
		}
		return errmark.Mark(errors.Newf("append to task %s: expected seq %d, log is at %d", p.TaskID, p.State.LastSeq, lastSeq), store.ErrConflict), nil
	case p.ExpiredOnly && (!expires.Valid || expires.Int64 >= us(now)):
		return errmark.Mark(errors.Newf("append to task %s: lease has not expired", p.TaskID), store.ErrConflict), nil
	}
	return plan.HistoryBytesRefusal(p, planned, maxBytes, historyBytes), nil
}

// LeaseExtendMany implements [store.Store].
func (s *Store) LeaseExtendMany(ctx context.Context, p *store.LeaseExtendParams) (map[uuid.UUID]store.LeaseRenewal, error) {
	leases, ttl := p.Leases, p.TTL
	out := make(map[uuid.UUID]store.LeaseRenewal, len(leases))
	if len(leases) == 0 {
		return out, nil
	}
	err := s.tx(ctx, func(tx *txn) error {
		expires := us(s.now().Add(ttl))
		for _, l := range leases {
			var cancel bool
			err := tx.queryRow(ctx, "LeaseExtend", expires, l.TaskID.String(), l.Epoch).Scan(&cancel)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return interpret(err)
			}
			out[l.TaskID] = store.LeaseRenewal{CancelRequested: cancel}
		}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(err, "extend leases")
	}
	return out, nil
}

// excludeMarker is where a claim statement tests TaskClaimParams.Exclude
// (excludeTest) in its Excluding variant, and nothing in its own.
const (
	excludeMarker   = "/* EXCLUDE */"
	excludeTest     = "AND id NOT IN (SELECT value FROM json_each(?))"
	excludingSuffix = "Excluding"
)

// excluding returns the claim statement to run and its arguments: name
// with before and after when nothing is excluded, else its Excluding
// variant with the exclusions between them.
func excluding(name, exclude string, before []any, after ...any) (string, []any) {
	if exclude == "" {
		return name, append(before, after...)
	}
	return name + excludingSuffix, append(append(before, exclude), after...)
}

// excludeJSON is TaskClaimParams.Exclude as the Excluding statements take
// it: a JSON array of ids, "" for none.
func excludeJSON(ids []uuid.UUID) string {
	if len(ids) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + id.String() + `"`)
	}
	b.WriteByte(']')
	return b.String()
}
