package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// SignalLookup implements [store.Store]: whether a dedup id was seen
// (SignalSeen) and the wait the task is in (WaitOpen), each by a partial
// index of the events, only where p asks for it.
func (s *Store) SignalLookup(ctx context.Context, p *store.SignalLookupParams) (store.SignalFacts, error) {
	var facts store.SignalFacts
	if p.DedupID != "" {
		if err := s.q.queryRow(ctx, "SignalSeen", p.TaskID.String(), p.DedupID).Scan(&facts.Seen); err != nil {
			return store.SignalFacts{}, errors.Wrap(interpret(err), "look up a signal's dedup id")
		}
	}
	if p.OpenWait {
		var data []byte
		err := s.q.queryRow(ctx, "WaitOpen", p.TaskID.String(), p.LastSeq).Scan(&data)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return store.SignalFacts{}, errors.Wrap(interpret(err), "read the wait a task is in")
		default:
			if facts.Wait, err = plan.DecodeWait(data); err != nil {
				return store.SignalFacts{}, err
			}
		}
	}
	return facts, nil
}
