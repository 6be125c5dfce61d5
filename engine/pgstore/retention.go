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

// TaskRemovableList implements [store.Store]: with p.Lock, FOR UPDATE
// SKIP LOCKED (a task a writer holds waits for the next pass).
func (s *Store) TaskRemovableList(ctx context.Context, p *store.TaskRemovableListParams) ([]store.RemovableTask, error) {
	if p.Namespace == "" {
		return nil, errors.New("list removable tasks: namespace is required")
	}
	cut := plan.Cutoffs(p)
	args := pgx.NamedArgs{
		"namespace": p.Namespace, "before": cut.Before, "scan_before": cut.Scan, "type_names": cut.Types, "type_cutoffs": cut.Cutoffs,
		"max": p.Max,
	}
	var out []store.RemovableTask
	var err error
	if p.Lock {
		out, err = s.removableLock(ctx, p, args)
	} else {
		var rows pgx.Rows
		if rows, err = s.db.Query(ctx, s.sql("TaskRemovableList"), args); err == nil {
			var id uuid.UUID
			_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
				out = append(out, store.RemovableTask{ID: id})
				return nil
			})
		}
	}
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "list removable tasks of namespace %s", p.Namespace)
	}
	return out, nil
}

// removableLock runs TaskRemovableLock: the removable tasks locked, with
// what their removal retires.
func (s *Store) removableLock(ctx context.Context, p *store.TaskRemovableListParams, args pgx.NamedArgs) ([]store.RemovableTask, error) {
	args["only_ids"], args["only_seqs"] = onlyArgs(p.Only)
	rows, err := s.db.Query(ctx, s.sql("TaskRemovableLock"), args)
	if err != nil {
		return nil, err
	}
	var out []store.RemovableTask
	var id uuid.UUID
	var key *string
	var typ string
	var input []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &key, &typ, &input}, func() error {
		t := store.RemovableTask{ID: id, Type: typ}
		if key != nil {
			t.IdempotencyKey, t.InputDigest = *key, plan.InputDigest(input)
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// onlyArgs are TaskRemovableListParams.Only as the arrays of
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

// TaskRemoveMany implements [store.Store]: one statement retires the
// tasks' keys and deletes their events, blobs and rows, in a transaction
// of its own (a savepoint in a Tx) that lets the append-only trigger
// delete their events.
func (s *Store) TaskRemoveMany(ctx context.Context, p *store.TaskRemoveManyParams) (store.RemoveResult, error) {
	var res store.RemoveResult
	if len(p.Tasks) == 0 {
		return res, nil
	}
	if p.Namespace == "" {
		return res, errors.New("remove tasks: namespace is required")
	}
	ids := make([][16]byte, len(p.Tasks))
	keys := make([]*string, len(p.Tasks))
	types := make([]string, len(p.Tasks))
	digests := make([][]byte, len(p.Tasks))
	for i, t := range p.Tasks {
		ids[i], types[i], digests[i] = t.ID, t.Type, t.InputDigest
		if t.IdempotencyKey != "" {
			keys[i] = &t.IdempotencyKey
		}
	}
	var keysUntil any // NULL: keys are freed with their tasks
	if !p.KeysUntil.IsZero() {
		keysUntil = p.KeysUntil
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// The append-only trigger lets this transaction delete events.
		if _, err := tx.Exec(ctx, "SELECT set_config('cairn.retention', 'on', true)"); err != nil {
			return err
		}
		var tasks, events int64
		var blobKeys, blobLocations []string
		var blobTasks []uuid.UUID
		err := tx.QueryRow(ctx, s.sql("TaskRemove"), pgx.NamedArgs{
			"namespace": p.Namespace, "ids": ids, "keys": keys, "types": types, "digests": digests, "keys_until": keysUntil, "now": s.now(),
		}).Scan(&tasks, &events, &blobKeys, &blobTasks, &blobLocations)
		res = store.RemoveResult{Tasks: int(tasks), Events: int(events)}
		for i, key := range blobKeys {
			res.StoredBlobs = append(res.StoredBlobs, store.Blob{Namespace: p.Namespace, Key: key, TaskID: blobTasks[i], Location: blobLocations[i]})
		}
		return err
	})
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(interpretError(err), "remove tasks of namespace %s", p.Namespace)
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
	tag, err := s.db.Exec(ctx, s.sql("RetiredKeysExpire"), pgx.NamedArgs{"max": p.Max, "now": s.now()})
	if err != nil {
		return 0, errors.Wrap(interpretError(err), "drop expired retired keys")
	}
	return int(tag.RowsAffected()), nil
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
		"archive": nullString(c.Archive), "type_retention": nullJSONString(types), "stream_ttl_ms": c.StreamTTL.Milliseconds(),
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
	var retention, keyRetention, streamTTL *int64
	var oldest *time.Time
	var archive, types *string
	_, err = pgx.ForEachRow(rows, []any{&name, &retention, &keyRetention, &archive, &types, &streamTTL, &oldest}, func() error {
		typeRetention, err := plan.DecodeTypeRetention([]byte(deref(types)))
		if err != nil {
			return errors.Wrapf(err, "namespace %s", name)
		}
		if p.Namespace != "" && name != p.Namespace {
			return nil
		}
		out = append(out, store.NamespaceConfig{
			Name: name, Retention: millis(retention), KeyRetention: millis(keyRetention), OldestFinished: deref(utcPtr(oldest)),
			Archive: deref(archive), TypeRetention: typeRetention, StreamTTL: millis(streamTTL),
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
