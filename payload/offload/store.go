package offload

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/internal/bucket"
	"github.com/cairnflow/cairn/payload"
)

// Table is the database's blobs table, as the SDK adapts its store to it:
// a row per blob, holding its bytes or naming the bucket that does. A
// blob not there is an error marked [payload.ErrNotFound].
type Table interface {
	BlobPut(ctx context.Context, b *payload.Blob) error
	BlobGet(ctx context.Context, namespace, key string) (*payload.Blob, error)
}

// Store is the [payload.Blobs] of a blobs table, keeping the bytes of
// the blobs it writes at a location (a directory or an S3-compatible
// bucket): a blob goes to <namespace>/blobstore/<key>/<task>.blob there,
// and its row names the location and holds no data. Reads follow the
// row's location, whatever this Store writes to, so every process reads
// every blob. With no location the bytes stay in the table. Retention
// deletes a removed task's objects with it. It is safe for concurrent
// use.
type Store struct {
	table    Table
	location string
	buckets  bucket.Set
}

// NewStore returns the blob store over table keeping new blobs' bytes at
// location ("": in the table).
func NewStore(table Table, location string) (*Store, error) {
	if location != "" {
		if err := CheckLocation(location); err != nil {
			return nil, errors.Wrap(err, "blob store")
		}
	}
	return &Store{table: table, location: location}, nil
}

var _ payload.Blobs = (*Store)(nil)

// CheckLocation checks a blob store's location: file:///absolute/dir, or
// s3://bucket/prefix?endpoint=host:port&secure=false&region=r, as an
// archive's (credentials from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, never from the location).
func CheckLocation(location string) error {
	_, err := bucket.Parse(location)
	return err
}

// Location is where the store writes blobs ("": the table).
func (s *Store) Location() string { return s.location }

// BlobPrepare implements [payload.Blobs]: it writes b's bytes to the
// bucket and returns the row to write in their place (b itself when
// blobs stay in the table).
func (s *Store) BlobPrepare(ctx context.Context, b *payload.Blob) (*payload.Blob, error) {
	if s.location == "" || b.Location != "" {
		return b, nil
	}
	bk, err := s.buckets.Open(s.location)
	if err != nil {
		return nil, err
	}
	name, err := bucket.StoredBlob(b.Namespace, b.TaskID, b.Key)
	if err != nil {
		return nil, err
	}
	if err := bk.Put(ctx, name, b.Data); err != nil {
		return nil, errors.Wrapf(err, "write blob %s to %s", b.Key, bk)
	}
	row := *b
	row.Data, row.Size, row.Location = nil, int64(len(b.Data)), s.location
	return &row, nil
}

// BlobDiscard implements [payload.Blobs]: it deletes the objects
// BlobPrepare wrote for rows that were not written, best effort.
func (s *Store) BlobDiscard(ctx context.Context, rows []*payload.Blob) {
	for _, b := range rows {
		if b.Location == "" {
			continue
		}
		if bk, err := s.buckets.Open(b.Location); err == nil {
			if name, err := bucket.StoredBlob(b.Namespace, b.TaskID, b.Key); err == nil {
				_ = bk.Delete(ctx, name)
			}
		}
	}
}

// BlobPut implements [payload.Blobs].
func (s *Store) BlobPut(ctx context.Context, b *payload.Blob) error {
	row, err := s.BlobPrepare(ctx, b)
	if err != nil {
		return err
	}
	if err := s.table.BlobPut(ctx, row); err != nil {
		s.BlobDiscard(ctx, []*payload.Blob{row})
		return err
	}
	return nil
}

// BlobGet implements [payload.Blobs]: the bytes from the row's
// location.
func (s *Store) BlobGet(ctx context.Context, namespace, key string) (*payload.Blob, error) {
	b, err := s.table.BlobGet(ctx, namespace, key)
	if err != nil || b.Location == "" {
		return b, err
	}
	bk, err := s.buckets.Open(b.Location)
	if err != nil {
		return nil, errors.Wrapf(err, "blob %s", key)
	}
	name, err := bucket.StoredBlob(namespace, b.TaskID, key)
	if err != nil {
		return nil, err
	}
	if b.Data, err = bk.Get(ctx, name); err != nil {
		return nil, errors.Wrapf(err, "read blob %s from %s", key, bk)
	}
	return b, nil
}

// Object reads the object holding blob key of task id of namespace in the
// blob store at location, as it is stored (sealed, when encrypted): what
// an operator, or a test, checks.
func Object(ctx context.Context, location, namespace string, id uuid.UUID, key string) ([]byte, error) {
	bk, err := bucket.Open(location)
	if err != nil {
		return nil, err
	}
	name, err := bucket.StoredBlob(namespace, id, key)
	if err != nil {
		return nil, err
	}
	return bk.Get(ctx, name)
}
