package executor

import (
	"context"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
)

// stepBlobs is a step's activities.BlobStore: the task's blobs, with
// errors that name the step.
type stepBlobs struct {
	engine.TaskBlobs
	step     string
	position int
}

func (b stepBlobs) PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	ref, err := b.TaskBlobs.PutBlob(ctx, contentType, data)
	return ref, errors.Wrapf(err, "step %q (position %d) of task %s", b.step, b.position, b.TaskID)
}

// GetBlob reads a blob; a damaged one fails the step permanently (kind
// blob_corrupt): reading it again gives the same wrong bytes.
func (b stepBlobs) GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	data, err := b.TaskBlobs.GetBlob(ctx, ref)
	if err == nil {
		return data, nil
	}
	err = errors.Wrapf(err, "step %q (position %d) of task %s", b.step, b.position, b.TaskID)
	if errors.Is(err, engine.ErrBlobCorrupt) {
		err = activities.WithKind(activities.Permanent(err), KindBlobCorrupt)
	}
	return nil, err
}

// KindBlobCorrupt is the error kind of a step that read a damaged blob.
const KindBlobCorrupt = "blob_corrupt"
