package activities

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/history"
)

// Blob is a reference to bytes kept out of the task's history (see
// [PutBlob]). It is small JSON: return it from a step, pass it to the next
// one, and the history records the reference, never the bytes.
type Blob = history.BlobRef

// BlobStore keeps the blobs of the task a step belongs to. The sdk puts
// one into every step's context.
type BlobStore interface {
	PutBlob(ctx context.Context, contentType string, data []byte) (Blob, error)
	GetBlob(ctx context.Context, ref Blob) ([]byte, error)
}

type blobsKey struct{}

// WithBlobs returns a context whose steps keep blobs in b. The sdk calls
// it when it starts a step.
func WithBlobs(ctx context.Context, b BlobStore) context.Context {
	return context.WithValue(ctx, blobsKey{}, b)
}

var errNoBlobStore = errors.New("no blob store: PutBlob and GetBlob work inside a step run by a cairn worker")

// PutBlob stores data (a document, an image, a long transcript) outside
// the history, with the task, and returns its reference: a step hands a
// large document on by returning the reference instead of the bytes. The
// blob is removed with its task (retention).
func PutBlob(ctx context.Context, contentType string, data []byte) (Blob, error) {
	b, ok := ctx.Value(blobsKey{}).(BlobStore)
	if !ok {
		return Blob{}, errors.WithStack(errNoBlobStore)
	}
	return b.PutBlob(ctx, contentType, data)
}

// GetBlob returns the bytes ref names, checked against its size and
// SHA-256 digest: a blob whose bytes do not match is an error naming the
// task and step, never wrong data.
func GetBlob(ctx context.Context, ref Blob) ([]byte, error) {
	b, ok := ctx.Value(blobsKey{}).(BlobStore)
	if !ok {
		return nil, errors.WithStack(errNoBlobStore)
	}
	return b.GetBlob(ctx, ref)
}
