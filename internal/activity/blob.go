package activity

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
)

// BlobStore keeps the blobs of the task a step belongs to. The executor
// puts one into every step's context with [WithBlobs]; activities.PutBlob
// and activities.GetBlob use it.
type BlobStore interface {
	PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error)
	GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error)
}

type blobsKey struct{}

// WithBlobs returns a context whose steps keep blobs in b. The executor
// calls it when it starts a step.
func WithBlobs(ctx context.Context, b BlobStore) context.Context {
	return context.WithValue(ctx, blobsKey{}, b)
}

var errNoBlobStore = errors.New("no blob store: PutBlob and GetBlob work inside a step run by a cairn worker")

// PutBlob stores data in the blob store of ctx's step: what
// activities.PutBlob does. Outside a step it is an error.
func PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	b, ok := ctx.Value(blobsKey{}).(BlobStore)
	if !ok {
		return history.BlobRef{}, errors.WithStack(errNoBlobStore)
	}
	return b.PutBlob(ctx, contentType, data)
}

// GetBlob reads ref from the blob store of ctx's step: what
// activities.GetBlob does. Outside a step it is an error.
func GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	b, ok := ctx.Value(blobsKey{}).(BlobStore)
	if !ok {
		return nil, errors.WithStack(errNoBlobStore)
	}
	return b.GetBlob(ctx, ref)
}
