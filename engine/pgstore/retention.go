package pgstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/internal/plan"
	"github.com/cairnflow/cairn/engine/store"
)

// TaskRemoveFinished implements [store.Store]: one transaction locks the
// removable tasks (SKIP LOCKED, so a task a writer holds waits for the
// next pass), retires their keys and deletes their events and rows.
func (s *Store) TaskRemoveFinished(ctx context.Context, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	var res store.RemoveResult
	if p.Max <= 0 {
		return res, nil
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		now := s.now()
		if _, err := tx.Exec(ctx, s.sql("RetiredKeysExpire"), pgx.NamedArgs{"max": p.Max, "now": now}); err != nil {
			return err
		}
		onlyIDs, onlySeqs := onlyArgs(p.Only)
		cut := plan.Cutoffs(p)
		rows, err := tx.Query(ctx, s.sql("TaskRemovableLock"), pgx.NamedArgs{
			"namespace": p.Namespace, "before": cut.Before, "scan_before": cut.Scan, "type_names": cut.Types, "type_cutoffs": cut.Cutoffs,
			"max": p.Max, "only_ids": onlyIDs, "only_seqs": onlySeqs,
		})
		if err != nil {
			return err
		}
		var ids [][16]byte
		var keys []*string
		var types []string
		var digests [][]byte
		var id [16]byte
		var key *string
		var typ string
		var input []byte
		if _, err := pgx.ForEachRow(rows, []any{&id, &key, &typ, &input}, func() error {
			ids, keys, types = append(ids, id), append(keys, key), append(types, typ)
			digests = append(digests, plan.InputDigest(input))
			return nil
		}); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		// The append-only trigger lets this transaction delete events.
		if _, err := tx.Exec(ctx, "SELECT set_config('cairn.retention', 'on', true)"); err != nil {
			return err
		}
		var keysUntil any // NULL: keys are freed with their tasks
		if !p.KeysUntil.IsZero() {
			keysUntil = p.KeysUntil
		}
		var tasks, events int64
		var blobKeys, blobLocations []string
		var blobTasks []uuid.UUID
		err = tx.QueryRow(ctx, s.sql("TaskRemove"), pgx.NamedArgs{
			"namespace": p.Namespace, "ids": ids, "keys": keys, "types": types, "digests": digests, "keys_until": keysUntil, "now": now,
		}).Scan(&tasks, &events, &blobKeys, &blobTasks, &blobLocations)
		res = store.RemoveResult{Tasks: int(tasks), Events: int(events)}
		for i, key := range blobKeys {
			res.StoredBlobs = append(res.StoredBlobs, store.Blob{Namespace: p.Namespace, Key: key, TaskID: blobTasks[i], Location: blobLocations[i]})
		}
		return err
	})
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(interpretError(err), "remove finished tasks of namespace %s", p.Namespace)
	}
	if s.metrics != nil && res.Tasks > 0 {
		s.metrics.ObserveRemoved(p.Namespace, res)
	}
	return res, nil
}

// onlyArgs are RemoveFinishedParams.Only as the arrays of
// TaskRemovableLock (nil arrays, NULL, for none).
func onlyArgs(only map[uuid.UUID]int64) ([][16]byte, []int64) {
	if only == nil {
		return nil, nil
	}
	ids, seqs := make([][16]byte, 0, len(only)), make([]int64, 0, len(only))
	for id, seq := range only {
		ids, seqs = append(ids, id), append(seqs, seq)
	}
	return ids, seqs
}

// TaskRemovableList implements [store.Store].
func (s *Store) TaskRemovableList(ctx context.Context, p *store.RemoveFinishedParams) ([]uuid.UUID, error) {
	cut := plan.Cutoffs(p)
	rows, err := s.db.Query(ctx, s.sql("TaskRemovableList"), pgx.NamedArgs{
		"namespace": p.Namespace, "before": cut.Before, "scan_before": cut.Scan, "type_names": cut.Types, "type_cutoffs": cut.Cutoffs,
		"max": p.Max,
	})
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "list removable tasks of namespace %s", p.Namespace)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return ids, errors.Wrapf(interpretError(err), "list removable tasks of namespace %s", p.Namespace)
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
	_, err = s.db.Exec(ctx, s.sql("NamespaceUpsert"), pgx.NamedArgs{
		"name": c.Name, "retention_ms": nullMillis(c.Retention), "key_retention_ms": nullMillis(c.KeyRetention),
		"archive": nullString(c.Archive), "type_retention": nullJSONString(types),
	})
	return errors.Wrapf(interpretError(err), "set namespace %s", c.Name)
}

// NamespaceList implements [store.Store].
func (s *Store) NamespaceList(ctx context.Context, p *store.NamespaceListParams) ([]store.NamespaceConfig, error) {
	rows, err := s.db.Query(ctx, s.sql("NamespaceList"))
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list namespaces")
	}
	var out []store.NamespaceConfig
	var name string
	var retention, keyRetention *int64
	var oldest *time.Time
	var archive, types *string
	_, err = pgx.ForEachRow(rows, []any{&name, &retention, &keyRetention, &archive, &types, &oldest}, func() error {
		typeRetention, err := plan.DecodeTypeRetention([]byte(deref(types)))
		if err != nil {
			return errors.Wrapf(err, "namespace %s", name)
		}
		if p.Namespace != "" && name != p.Namespace {
			return nil
		}
		out = append(out, store.NamespaceConfig{
			Name: name, Retention: millis(retention), KeyRetention: millis(keyRetention), OldestFinished: deref(utcPtr(oldest)),
			Archive: deref(archive), TypeRetention: typeRetention,
		})
		return nil
	})
	return out, errors.Wrap(interpretError(err), "list namespaces")
}

// nullMillis is d in milliseconds, NULL for 0.
func nullMillis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// millis is the duration of a column of milliseconds, 0 for NULL.
func millis(ms *int64) time.Duration {
	if ms == nil {
		return 0
	}
	return time.Duration(*ms) * time.Millisecond
}
