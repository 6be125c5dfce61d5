package sqlitestore

import (
	"context"
	"database/sql"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
)

// BlobPut implements [store.Store].
func (s *Store) BlobPut(ctx context.Context, b *store.BlobPutParams) error {
	err := s.tx(ctx, func(tx *txn) error {
		_, err := tx.exec(ctx, "BlobInsert", b.Namespace, b.Key, b.TaskID.String(), nullString(b.ContentType),
			b.Length(), b.SHA256, blobData(b.Data), us(s.now()), nullString(b.Location))
		return err
	})
	return errors.Wrapf(interpret(err), "put blob %s of task %s", b.Key, b.TaskID)
}

// BlobGet implements [store.Store].
func (s *Store) BlobGet(ctx context.Context, p *store.BlobGetParams) (*store.Blob, error) {
	namespace, key := p.Namespace, p.Key
	if namespace == "" {
		return nil, errors.Newf("get blob %s: namespace is required", key)
	}
	b := &store.Blob{Namespace: namespace, Key: key}
	var taskID string
	var contentType, location sql.NullString
	var created int64
	err := s.q.queryRow(ctx, "BlobGet", namespace, key).Scan(&taskID, &contentType, &b.SHA256, &b.Data, &created, &location, &b.Size)
	if err != nil {
		return nil, errors.Wrapf(interpret(err), "get blob %s", key)
	}
	if b.TaskID, err = uuid.Parse(taskID); err != nil {
		return nil, errors.Wrapf(err, "blob %s: task id %q", key, taskID)
	}
	b.ContentType, b.CreatedAt, b.Location = contentType.String, fromUS(created), location.String
	return b, nil
}

// BlobKeysByTasks implements [store.Store].
func (s *Store) BlobKeysByTasks(ctx context.Context, p *store.BlobKeysByTasksParams) (map[uuid.UUID][]string, error) {
	namespace, ids := p.Namespace, p.IDs
	if namespace == "" {
		return nil, errors.New("list blobs: namespace is required")
	}
	out := map[uuid.UUID][]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.q.query(ctx, "BlobKeysByTasks", namespace, jsonIDs(ids))
	if err != nil {
		return nil, errors.Wrap(interpret(err), "list blobs")
	}
	defer rows.Close()
	for rows.Next() {
		var idText, key string
		if err := rows.Scan(&idText, &key); err != nil {
			return nil, errors.Wrap(interpret(err), "list blobs")
		}
		id, err := uuid.Parse(idText)
		if err != nil {
			return nil, errors.Wrapf(err, "blob %s: task id %q", key, idText)
		}
		out[id] = append(out[id], key)
	}
	return out, errors.Wrap(interpret(rows.Err()), "list blobs")
}

// blobData is a blob's data column: never NULL (a blob kept in a blob
// store has an empty one).
func blobData(data []byte) []byte {
	if data == nil {
		return []byte{}
	}
	return data
}
