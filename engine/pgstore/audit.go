package pgstore

import (
	"context"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
)

// EventScan returns one page of the events of p.Namespace in [p.Since,
// p.Until), ordered by (at, task id, seq), after p.After, filtered by event
// type, task type and queue: one statement per page. A page shorter than
// the limit means nothing more matches in the range.
//
// The time range is served by a BRIN index, which narrows the read to the
// block ranges of the time range but gives no order: the statement reads
// and sorts every event of [max(Since, After.At), Until) that passes the
// filters, however small the page. To page through a wide range cheaply,
// narrow Until to a window holding a few pages (sdk.Client.Audit does).
func (s *Store) EventScan(ctx context.Context, p *store.EventScanParams) ([]store.AuditEvent, error) {
	args, limit, err := eventScanArgs(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql("EventScan"), args)
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "scan events")
	}
	page, err := pgx.AppendRows(make([]store.AuditEvent, 0, limit), rows, scanAuditEvent)
	return page, errors.Wrap(interpretError(err), "scan events")
}
