package pgstore

import (
	"bytes"
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// appendBatch gathers the columns of an EventAppendMany statement, in
// arrays pgx encodes without an allocation per element (arrays.go).
type appendBatch struct {
	ids, evTaskIDs                                      uuidArray
	expectedSeqs, epochs, leaseEpochs, lastSeqs, evSeqs int8Array
	expiredOnly, cancelRequesteds                       []bool
	statuses, evTypes                                   textArray
	evDatas                                             []string
	runAts, fairAts, updatedAts, evAts                  timeArray
	startedAts, finishedAts                             nullTimeArray
	erased                                              []bool // the append erases the task (task_erased)
	attempts, evAttempts                                int4Array
	leaseOwners, outputs, lastErrors                    []*string
	addedBytes, maxBytes                                int8Array
	// planned keeps each append's plan and byte bound, for explainRefusal.
	planned map[[16]byte]plannedAppend
}

// plannedAppend is what explainRefusal needs of an append's plan.
type plannedAppend struct {
	plan     plan.AppendPlan
	maxBytes int64
}

func newAppendBatch(n int) *appendBatch {
	return &appendBatch{
		ids: make(uuidArray, 0, n), expectedSeqs: make(int8Array, 0, n), epochs: make(int8Array, 0, n),
		expiredOnly: make([]bool, 0, n), statuses: make(textArray, 0, n), runAts: make(timeArray, 0, n), fairAts: make(timeArray, 0, n),
		attempts: make(int4Array, 0, n), leaseOwners: make([]*string, 0, n), leaseEpochs: make(int8Array, 0, n),
		outputs: make([]*string, 0, n), lastErrors: make([]*string, 0, n), cancelRequesteds: make([]bool, 0, n),
		lastSeqs: make(int8Array, 0, n), updatedAts: make(timeArray, 0, n), startedAts: make(nullTimeArray, 0, n),
		finishedAts: make(nullTimeArray, 0, n), erased: make([]bool, 0, n),
		addedBytes: make(int8Array, 0, n), maxBytes: make(int8Array, 0, n), planned: make(map[[16]byte]plannedAppend, n),
	}
}

// add plans p at now (see [plan.Append]), checks it against the history
// limits, and adds its projection row and events to the batch.
func (b *appendBatch) add(p *store.EventAppendParams, now time.Time, limits store.HistoryLimits) (history.State, error) {
	ap, err := plan.Append(p, now)
	if err != nil {
		return p.State, err
	}
	maxBytes, err := plan.HistoryBound(p, ap, limits)
	if err != nil {
		return p.State, err
	}
	b.addedBytes = append(b.addedBytes, int8Elem(ap.Bytes))
	b.maxBytes = append(b.maxBytes, int8Elem(maxBytes))
	b.planned[p.TaskID] = plannedAppend{plan: ap, maxBytes: maxBytes}
	for _, ev := range ap.Events {
		b.evTaskIDs = append(b.evTaskIDs, uuidElem(p.TaskID))
		b.evSeqs = append(b.evSeqs, int8Elem(ev.Seq))
		b.evTypes = append(b.evTypes, textElem(ev.Type))
		b.evAts = append(b.evAts, timeElem(ev.At))
		b.evAttempts = append(b.evAttempts, int4Elem(ev.Attempt))
		b.evDatas = append(b.evDatas, string(ev.Data))
	}
	next := ap.Next
	var lastError *string
	if ap.LastError != nil {
		lastError = ptr(string(ap.LastError))
	}
	b.ids = append(b.ids, uuidElem(p.TaskID))
	b.expectedSeqs = append(b.expectedSeqs, int8Elem(p.State.LastSeq))
	b.epochs = append(b.epochs, int8Elem(p.Epoch))
	b.expiredOnly = append(b.expiredOnly, p.ExpiredOnly)
	b.statuses = append(b.statuses, textElem(next.Status))
	b.runAts = append(b.runAts, timeElem(next.RunAt))
	b.fairAts = append(b.fairAts, timeElem(ap.FairAt))
	b.attempts = append(b.attempts, int4Elem(next.Attempt))
	b.leaseOwners = append(b.leaseOwners, nullString(next.Lease.Owner))
	b.leaseEpochs = append(b.leaseEpochs, int8Elem(next.Lease.Epoch))
	b.outputs = append(b.outputs, nullJSONString(next.Output))
	b.lastErrors = append(b.lastErrors, lastError)
	b.cancelRequesteds = append(b.cancelRequesteds, next.CancelRequested)
	b.lastSeqs = append(b.lastSeqs, int8Elem(next.LastSeq))
	b.updatedAts = append(b.updatedAts, timeElem(next.UpdatedAt))
	b.startedAts = append(b.startedAts, nullTimeElem(next.StartedAt))
	b.finishedAts = append(b.finishedAts, nullTimeElem(next.FinishedAt))
	b.erased = append(b.erased, next.Erased && !p.State.Erased)
	return next, nil
}

func (b *appendBatch) args(doneChannel, readyChannel, cancelChannel string) pgx.NamedArgs {
	return pgx.NamedArgs{
		"ids": b.ids, "expected_seqs": b.expectedSeqs, "epochs": b.epochs, "expired_only": b.expiredOnly,
		"statuses": b.statuses, "run_ats": b.runAts, "fair_ats": b.fairAts, "attempts": b.attempts, "lease_owners": b.leaseOwners,
		"lease_epochs": b.leaseEpochs, "outputs": b.outputs, "last_errors": b.lastErrors,
		"cancel_requesteds": b.cancelRequesteds, "last_seqs": b.lastSeqs, "updated_ats": b.updatedAts,
		"started_ats": b.startedAts, "finished_ats": b.finishedAts, "erased": b.erased,
		"ev_task_ids": b.evTaskIDs, "ev_seqs": b.evSeqs, "ev_types": b.evTypes, "ev_ats": b.evAts,
		"ev_attempts": b.evAttempts, "ev_datas": b.evDatas, "done_channel": doneChannel, "ready_channel": readyChannel,
		"cancel_channel": cancelChannel, "added_bytes": b.addedBytes, "max_bytes": b.maxBytes,
	}
}

func ptr[T any](v T) *T { return &v }

func nullJSONString(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	return ptr(string(b))
}

// EventAppend appends events to a task's log and updates its projection row
// to their replay, in one statement. It returns the new state.
//
// Errors: [ErrNotFound] if the task does not exist; [ErrFenced] if Epoch is
// set and the task has moved to another epoch; [ErrConflict] if the log grew
// past State.LastSeq; an error marked history.ErrInvalidHistory if the events
// cannot follow State (nothing is written).
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) (history.State, error) {
	res, err := s.EventAppendMany(ctx, []*store.EventAppendParams{p})
	if err != nil {
		return p.State, err
	}
	return res[0].State, res[0].Err
}

// EventAppendMany appends to many tasks' logs in one statement: the group
// commit behind worker outcomes. Each append succeeds or is refused on its
// own (see [Store.EventAppend]); the returned error is for the batch as a
// whole, and then nothing was written.
//
// ps may name a task more than once (a stale attempt's outcome queued
// beside the new attempt's append): such appends are judged one after
// another in the order of ps, each against the task as the ones before it
// left it, as SQLite's loop judges them. The statement holds one append per
// task (it writes a task's events by its id), so such a batch is written in
// rounds, the k-th append of each task in the k-th, in one transaction.
func (s *Store) EventAppendMany(ctx context.Context, ps []*store.EventAppendParams) ([]store.AppendResult, error) {
	rounds := appendRounds(ps)
	if rounds == nil {
		out, parents, err := s.appendRound(ctx, s.db, ps)
		if err != nil {
			return nil, errors.Wrap(interpretError(err), "append events")
		}
		s.appended(ps, out, parents)
		return out, nil
	}
	out := make([]store.AppendResult, len(ps))
	var parents []parentWrite
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		parents = nil
		for _, round := range rounds {
			sub := make([]*store.EventAppendParams, len(round))
			for k, i := range round {
				sub[k] = ps[i]
			}
			res, written, err := s.appendRound(ctx, tx, sub)
			if err != nil {
				return err
			}
			for k, i := range round {
				out[i] = res[k]
			}
			parents = append(parents, written...)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "append events")
	}
	s.appended(ps, out, parents)
	return out, nil
}

// appendRounds splits ps into rounds when it names a task more than once:
// the indexes of each task's first append, then of its second, and so on,
// each in the order of ps. It returns nil when ps names every task once;
// the appender's batches, in id order, are seen to without a map.
func appendRounds(ps []*store.EventAppendParams) [][]int {
	ascending := true
	for i := 1; i < len(ps) && ascending; i++ {
		ascending = bytes.Compare(ps[i-1].TaskID[:], ps[i].TaskID[:]) < 0
	}
	if ascending {
		return nil
	}
	seen := make(map[uuid.UUID]int, len(ps))
	var rounds [][]int
	for i, p := range ps {
		r := seen[p.TaskID]
		seen[p.TaskID] = r + 1
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], i)
	}
	if len(rounds) == 1 {
		return nil
	}
	return rounds
}

// appendRound runs EventAppendMany's statement for ps, which names each
// task once, on q (the pool, or the transaction of a batch in rounds), and
// finds out on q why each refused append was refused. It returns the
// results and the parents' appends of the children it ended; nothing is
// observed or cached until the caller knows they committed.
func (s *Store) appendRound(ctx context.Context, q txQuerier, ps []*store.EventAppendParams) ([]store.AppendResult, []parentWrite, error) {
	batch, now := newAppendBatch(len(ps)), s.now()
	out := make([]store.AppendResult, len(ps))
	valid := 0
	for i, p := range ps {
		out[i].State = p.State
		next, err := batch.add(p, now, s.limits)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].State = next
		valid++
	}
	if valid == 0 {
		return out, nil, nil
	}
	var ok map[[16]byte]bool
	var parents []parentWrite
	var err error
	if endsAChild(ps, out) {
		ok, parents, err = s.appendReporting(ctx, q, ps, out, batch)
	} else {
		ok, err = s.writeBatch(ctx, q, batch)
	}
	if err != nil {
		return nil, nil, err
	}
	for i, p := range ps {
		if out[i].Err != nil || ok[p.TaskID] {
			continue
		}
		out[i].State = p.State
		out[i].Err = s.explainRefusal(ctx, q, p, batch.planned[p.TaskID])
	}
	return out, parents, nil
}

// appended records a committed batch: the parents' states are cached, and
// its writes counted.
func (s *Store) appended(ps []*store.EventAppendParams, out []store.AppendResult, parents []parentWrite) {
	s.rememberParents(parents)
	if s.metrics == nil {
		return
	}
	for _, w := range parents {
		s.metrics.ObserveAppended(w.p, w.next)
	}
	for i, p := range ps {
		if out[i].Err == nil {
			s.metrics.ObserveAppended(p, out[i].State)
		}
	}
}

// explainRefusal finds out why an append wrote nothing.
func (s *Store) explainRefusal(ctx context.Context, q querier, p *store.EventAppendParams, planned plannedAppend) error {
	var lastSeq, epoch, historyBytes int64
	var leased bool
	err := q.QueryRow(ctx, s.sql("TaskFenceByID"), pgx.NamedArgs{"id": p.TaskID}).Scan(&lastSeq, &epoch, &leased, &historyBytes)
	full := plan.HistoryBytesRefusal(p, planned.plan, planned.maxBytes, historyBytes)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errmark.Mark(errors.Newf("append to task %s: no such task", p.TaskID), store.ErrNotFound)
	case err != nil:
		return errors.Wrapf(interpretError(err), "append to task %s", p.TaskID)
	case p.Epoch != 0 && epoch != p.Epoch:
		return errmark.Mark(errors.Newf("append to task %s: lease epoch %d, task is at %d", p.TaskID, p.Epoch, epoch), store.ErrFenced)
	case p.Epoch != 0 && !leased && !p.ExpiredOnly:
		// Same epoch, but its lease ended (expired and rescued, released):
		// the attempt is over even before anyone claims the task again.
		return errmark.Mark(errors.Newf("append to task %s: lease epoch %d has ended", p.TaskID, p.Epoch), store.ErrFenced)
	case lastSeq != p.State.LastSeq:
		return errmark.Mark(errors.Newf("append to task %s: expected seq %d, log is at %d", p.TaskID, p.State.LastSeq, lastSeq), store.ErrConflict)
	case full != nil:
		return full
	default:
		// Same seq and epoch: only ExpiredOnly can have refused it.
		return errmark.Mark(errors.Newf("append to task %s: lease has not expired", p.TaskID), store.ErrConflict)
	}
}
