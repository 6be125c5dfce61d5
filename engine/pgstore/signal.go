package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// SignalLookup implements [store.Store]: whether a dedup id was seen
// (SignalSeen) and the wait the task is in (WaitOpen), each by a partial
// index of the events, only where p asks for it.
func (s *Store) SignalLookup(ctx context.Context, p *store.SignalLookupParams) (store.SignalFacts, error) {
	var facts store.SignalFacts
	if p.DedupID != "" {
		err := s.db.QueryRow(ctx, s.sql("SignalSeen"), pgx.NamedArgs{"task_id": p.TaskID, "dedup_id": p.DedupID}).Scan(&facts.Seen)
		if err != nil {
			return store.SignalFacts{}, errors.Wrap(interpretError(err), "look up a signal's dedup id")
		}
	}
	if p.OpenWait {
		var data []byte
		err := s.db.QueryRow(ctx, s.sql("WaitOpen"), pgx.NamedArgs{"task_id": p.TaskID, "last_seq": p.LastSeq}).Scan(&data)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return store.SignalFacts{}, errors.Wrap(interpretError(err), "read the wait a task is in")
		default:
			if facts.Wait, err = plan.DecodeWait(data); err != nil {
				return store.SignalFacts{}, err
			}
		}
	}
	return facts, nil
}
