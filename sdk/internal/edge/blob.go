package edge

import (
	"context"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
)

// GetBlob reads the blob ref names in namespace, decoded and checked
// (see [payload.Stage.GetBlob]); with an owner, only a blob owner wrote.
// A blob the store no longer has is read from the archives when the
// store was configured so.
func (e *Store) GetBlob(ctx context.Context, namespace string, ref history.BlobRef, owner uuid.UUID) ([]byte, error) {
	data, err := e.stage.GetBlob(ctx, namespace, ref, owner)
	return data, notFound(err)
}

// PutBlob keeps data as a blob of task id, its bytes encoded.
func (e *Store) PutBlob(ctx context.Context, namespace string, id uuid.UUID, contentType string, data []byte) (history.BlobRef, error) {
	return e.stage.PutBlob(ctx, namespace, id, contentType, data)
}

// ReadBlob reads blob key of namespace with its bytes decoded and checked
// against the digest written with it: for a reader without the reference
// (a download). It reads the store only, never the archives.
func (e *Store) ReadBlob(ctx context.Context, namespace, key string) (*payload.Blob, error) {
	b, err := e.blobs.BlobGet(ctx, namespace, key)
	if err != nil {
		return nil, err
	}
	return e.stage.OpenBlob(ctx, b)
}
