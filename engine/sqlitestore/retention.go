package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskRemovableList implements [store.Store]. With p.Lock the tasks are
// read in the caller's transaction, whose write lock is theirs.
func (s *Store) TaskRemovableList(ctx context.Context, p *store.TaskRemovableListParams) ([]store.RemovableTask, error) {
	if p.Namespace == "" {
		return nil, errors.New("list removable tasks: namespace is required")
	}
	var out []store.RemovableTask
	var err error
	if p.Lock {
		out, err = s.removableLock(ctx, p)
	} else {
		out, err = s.removableList(ctx, p)
	}
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "list removable tasks of namespace %s", p.Namespace)
	}
	return out, nil
}

// removableList runs TaskRemovableList: the removable tasks' ids.
func (s *Store) removableList(ctx context.Context, p *store.TaskRemovableListParams) ([]store.RemovableTask, error) {
	cut, scan := typeCutoffs(p)
	rows, err := s.q.query(ctx, "TaskRemovableList", p.Namespace, us(p.Before), p.Max, cut, scan)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.RemovableTask
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		parsed, err := uuid.Parse(id)
		if err != nil {
			return nil, errors.Wrapf(err, "task id %q", id)
		}
		out = append(out, store.RemovableTask{ID: parsed})
	}
	return out, rows.Err()
}

// removableLock runs TaskRemovable: the removable tasks with what their
// removal retires.
func (s *Store) removableLock(ctx context.Context, p *store.TaskRemovableListParams) ([]store.RemovableTask, error) {
	only, err := onlyJSON(p.Only)
	if err != nil {
		return nil, err
	}
	cut, scan := typeCutoffs(p)
	rows, err := s.q.query(ctx, "TaskRemovable", p.Namespace, us(p.Before), p.Max, only, cut, scan)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.RemovableTask
	for rows.Next() {
		var id, typ string
		var key sql.NullString
		var input []byte
		if err := rows.Scan(&id, &key, &typ, &input); err != nil {
			return nil, err
		}
		t := store.RemovableTask{Type: typ}
		if t.ID, err = uuid.Parse(id); err != nil {
			return nil, errors.Wrapf(err, "task id %q", id)
		}
		if key.Valid {
			t.IdempotencyKey, t.InputDigest = key.String, plan.InputDigest(input)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// onlyJSON is TaskRemovableListParams.Only as TaskRemovable's JSON array
// of [id, last seq] pairs; NULL for none.
func onlyJSON(only map[uuid.UUID]int64) (any, error) {
	if only == nil {
		return nil, nil
	}
	pairs := make([][2]any, 0, len(only))
	for id, seq := range only {
		pairs = append(pairs, [2]any{id.String(), seq})
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

// TaskRemoveMany implements [store.Store] in one write transaction (a
// savepoint in a Tx): the tasks are listed in removing, which lets the
// append-only trigger delete their events, and the list is emptied before
// the commit.
func (s *Store) TaskRemoveMany(ctx context.Context, p *store.TaskRemoveManyParams) (store.RemoveResult, error) {
	var res store.RemoveResult
	if len(p.Tasks) == 0 {
		return res, nil
	}
	if p.Namespace == "" {
		return res, errors.New("remove tasks: namespace is required")
	}
	err := s.tx(ctx, func(tx *txn) error {
		now := us(s.now())
		ids := make([]uuid.UUID, len(p.Tasks))
		for i, t := range p.Tasks {
			ids[i] = t.ID
			if t.IdempotencyKey == "" || !p.KeysUntil.After(s.now()) {
				continue
			}
			if _, err := tx.exec(ctx, "RetiredKeyInsert", p.Namespace, t.IdempotencyKey, t.ID.String(), t.Type, t.InputDigest, now, us(p.KeysUntil)); err != nil {
				return err
			}
		}
		if _, err := tx.exec(ctx, "RemovingMark", jsonIDs(ids)); err != nil {
			return err
		}
		evs, err := tx.exec(ctx, "EventsRemove")
		if err != nil {
			return err
		}
		stored, err := storedBlobsOfRemoving(ctx, tx, p.Namespace)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "BlobsRemove"); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "StreamsRemove"); err != nil {
			return err
		}
		// What the tasks kept for budgets: open reservations, waits and
		// their own budgets' windows.
		for _, name := range []string{"BudgetReservationsRemove", "BudgetWaitsRemove"} {
			if _, err := tx.exec(ctx, name); err != nil {
				return err
			}
		}
		if _, err := tx.exec(ctx, "BudgetWindowsRemove", p.Namespace); err != nil {
			return err
		}
		tasks, err := tx.exec(ctx, "TasksRemove")
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "RemovingClear"); err != nil {
			return err
		}
		nEvents, _ := evs.RowsAffected()
		nTasks, _ := tasks.RowsAffected()
		res = store.RemoveResult{Tasks: int(nTasks), Events: int(nEvents), StoredBlobs: stored}
		return nil
	})
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(interpret(err), "remove tasks of namespace %s", p.Namespace)
	}
	if s.metrics != nil && res.Tasks > 0 {
		s.metrics.ObserveRemoved(p.Namespace, res)
	}
	return res, nil
}

// RetiredKeyDeleteExpired implements [store.Store].
func (s *Store) RetiredKeyDeleteExpired(ctx context.Context, p *store.RetiredKeyDeleteExpiredParams) (int, error) {
	if p.Max <= 0 {
		return 0, nil
	}
	var n int64
	err := s.tx(ctx, func(tx *txn) error {
		res, err := tx.exec(ctx, "RetiredKeysExpire", us(s.now()), p.Max)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, errors.Wrap(interpret(err), "drop expired retired keys")
	}
	return int(n), nil
}

// NamespaceSet implements [store.Store].
func (s *Store) NamespaceSet(ctx context.Context, p *store.NamespaceSetParams) error {
	c := p.Config()
	if err := c.Validate(); err != nil {
		return err
	}
	types, err := plan.EncodeTypeRetention(c.TypeRetention)
	if err != nil {
		return err
	}
	_, err = s.q.exec(ctx, "NamespaceUpsert", c.Name, nullMillis(c.Retention), nullMillis(c.KeyRetention), us(s.now()), nullString(c.Archive), nullBytes(types), c.StreamTTL.Milliseconds())
	return errors.Wrapf(interpret(err), "set namespace %s", c.Name)
}

// NamespaceList implements [store.Store].
func (s *Store) NamespaceList(ctx context.Context, p *store.NamespaceListParams) ([]store.NamespaceConfig, error) {
	rows, err := s.q.query(ctx, "NamespaceList")
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list namespaces")
	}
	defer rows.Close()
	var out []store.NamespaceConfig
	for rows.Next() {
		var c store.NamespaceConfig
		var retention, keyRetention, streamTTL, oldest sql.NullInt64
		var archive, types sql.NullString
		if err := rows.Scan(&c.Name, &retention, &keyRetention, &archive, &types, &streamTTL, &oldest); err != nil {
			return nil, errors.Wrap(interpret(err), "list namespaces")
		}
		if p.Namespace != "" && c.Name != p.Namespace {
			continue
		}
		var err error
		if c.TypeRetention, err = plan.DecodeTypeRetention([]byte(types.String)); err != nil {
			return nil, errors.Wrapf(err, "namespace %s", c.Name)
		}
		c.Archive = archive.String
		if oldest.Valid {
			c.OldestFinished = fromUS(oldest.Int64)
		}
		c.Retention = time.Duration(retention.Int64) * time.Millisecond
		c.KeyRetention = time.Duration(keyRetention.Int64) * time.Millisecond
		c.StreamTTL = time.Duration(streamTTL.Int64) * time.Millisecond
		out = append(out, c)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list namespaces")
}

// nullMillis is d in milliseconds, NULL for 0.
func nullMillis(d time.Duration) sql.NullInt64 {
	return sql.NullInt64{Int64: d.Milliseconds(), Valid: d > 0}
}

// typeCutoffs are p's per-type cutoffs as TaskRemovable takes them: a JSON
// array of [type, µs] pairs (NULL for none), and the latest cutoff of all,
// Before included.
func typeCutoffs(p *store.TaskRemovableListParams) (any, int64) {
	cut := plan.Cutoffs(p)
	if len(cut.Types) == 0 {
		return nil, us(cut.Scan)
	}
	pairs := make([][2]any, len(cut.Types))
	for i, typ := range cut.Types {
		pairs[i] = [2]any{typ, us(cut.Cutoffs[i])}
	}
	data, err := json.Marshal(pairs)
	if err != nil {
		panic(err) // strings and integers always marshal
	}
	return string(data), us(cut.Scan)
}

// storedBlobsOfRemoving are the blobs of the tasks being removed whose
// bytes are in a blob store.
func storedBlobsOfRemoving(ctx context.Context, tx *txn, namespace string) ([]store.Blob, error) {
	rows, err := tx.query(ctx, "BlobsStoredOfRemoving")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Blob
	for rows.Next() {
		var key, idText, location string
		if err := rows.Scan(&key, &idText, &location); err != nil {
			return nil, err
		}
		id, err := uuid.Parse(idText)
		if err != nil {
			return nil, errors.Wrapf(err, "blob %s: task id %q", key, idText)
		}
		out = append(out, store.Blob{Namespace: namespace, Key: key, TaskID: id, Location: location})
	}
	return out, rows.Err()
}
