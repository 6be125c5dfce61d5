package activities

import (
	"context"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/activity"
)

// Blob is a reference to bytes kept out of the task's history (see
// [PutBlob]). It is small JSON: return it from a step, pass it to the next
// one, and the history records the reference, never the bytes.
type Blob = history.BlobRef

// PutBlob stores data (a document, an image, a long transcript) outside
// the history, with the task, and returns its reference: a step hands a
// large document on by returning the reference instead of the bytes. The
// blob is removed with its task (retention).
func PutBlob(ctx context.Context, contentType string, data []byte) (Blob, error) {
	return activity.PutBlob(ctx, contentType, data)
}

// GetBlob returns the bytes ref names, checked against its size and
// SHA-256 digest: a blob whose bytes do not match is an error naming the
// task and step, never wrong data.
func GetBlob(ctx context.Context, ref Blob) ([]byte, error) {
	return activity.GetBlob(ctx, ref)
}
