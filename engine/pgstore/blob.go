package pgstore

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/cairnflow/cairn/engine/store"
)

// BlobPut implements [store.Store].
func (s *Store) BlobPut(ctx context.Context, b *store.BlobPutParams) error {
	_, err := s.db.Exec(ctx, s.sql("BlobInsert"), pgx.NamedArgs{
		"namespace": b.Namespace, "key": b.Key, "task_id": b.TaskID, "content_type": nullString(b.ContentType),
		"size": b.Length(), "sha256": b.SHA256, "data": blobData(b.Data), "location": nullString(b.Location),
	})
	return errors.Wrapf(interpretError(err), "put blob %s of task %s", b.Key, b.TaskID)
}

// BlobGet implements [store.Store].
func (s *Store) BlobGet(ctx context.Context, p *store.BlobGetParams) (*store.Blob, error) {
	namespace, key := p.Namespace, p.Key
	if namespace == "" {
		return nil, errors.Newf("get blob %s: namespace is required", key)
	}
	b := &store.Blob{Namespace: namespace, Key: key}
	var contentType, location *string
	err := s.db.QueryRow(ctx, s.sql("BlobGet"), pgx.NamedArgs{"namespace": namespace, "key": key}).
		Scan(&b.TaskID, &contentType, &b.SHA256, &b.Data, &b.CreatedAt, &location, &b.Size)
	if err != nil {
		return nil, errors.Wrapf(interpretError(err), "get blob %s", key)
	}
	b.ContentType, b.CreatedAt, b.Location = deref(contentType), b.CreatedAt.UTC(), deref(location)
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
	rows, err := s.db.Query(ctx, s.sql("BlobKeysByTasks"), pgx.NamedArgs{"namespace": namespace, "ids": ids})
	if err != nil {
		return nil, errors.Wrap(interpretError(err), "list blobs")
	}
	var id uuid.UUID
	var key string
	_, err = pgx.ForEachRow(rows, []any{&id, &key}, func() error {
		out[id] = append(out[id], key)
		return nil
	})
	return out, errors.Wrap(interpretError(err), "list blobs")
}

// blobData is a blob's data column: never NULL (a blob kept in a blob
// store has an empty one).
func blobData(data []byte) []byte {
	if data == nil {
		return []byte{}
	}
	return data
}
