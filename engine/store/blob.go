package store

import (
	"time"

	"github.com/google/uuid"
)

// Blob is a payload kept out of the history, in the blobs table: bytes a
// task owns, removed with it.
type Blob struct {
	Namespace   string
	Key         string
	TaskID      uuid.UUID
	ContentType string
	SHA256      []byte
	Data        []byte
	// Size is the blob's length when Data is not here (a blob store's);
	// 0: len(Data).
	Size      int64
	CreatedAt time.Time
	// Location, when set, is the blob store holding the bytes (a
	// directory or an S3-compatible bucket, engine.CheckArchive's form):
	// the row keeps no data; the payload stage's blob store
	// (payload/offload) writes and reads the bytes, and retention deletes
	// them after the removal (RemoveResult.StoredBlobs). Empty: the bytes
	// are in the database.
	Location string
}

// Length is the blob's size: Size, else len(Data).
func (b *Blob) Length() int64 {
	if b.Size > 0 {
		return b.Size
	}
	return int64(len(b.Data))
}

// BlobPutParams are the blob [Executor.BlobPut] writes (its CreatedAt is
// the store's time of the write).
type BlobPutParams struct {
	// Namespace is the blob's namespace. Required.
	Namespace   string
	Key         string
	TaskID      uuid.UUID
	ContentType string
	SHA256      []byte
	Data        []byte
	// Size is the blob's length when Data is not here (a blob store's);
	// 0: len(Data).
	Size int64
	// Location, when set, is the blob store holding the bytes ([Blob]).
	Location string
}

// Length is the blob's size: Size, else len(Data).
func (p *BlobPutParams) Length() int64 {
	if p.Size > 0 {
		return p.Size
	}
	return int64(len(p.Data))
}

// BlobGetParams name the blob [Executor.BlobGet] reads.
type BlobGetParams struct {
	// Namespace is the blob's namespace. Required.
	Namespace string
	Key       string
}

// BlobKeysByTasksParams name the tasks whose blobs
// [Executor.BlobKeysByTasks] lists.
type BlobKeysByTasksParams struct {
	// Namespace is the tasks' namespace. Required.
	Namespace string
	IDs       []uuid.UUID
}

// TaskDataKeysParams name the tasks whose data keys [Executor.TaskDataKeys]
// reads.
type TaskDataKeysParams struct {
	// Namespace, when set, reads only the tasks of ids in it; "": the
	// tasks' own namespaces, for the runtime's reads by the ids of tasks
	// whose payloads it holds (payload/seal's codec).
	Namespace string
	IDs       []uuid.UUID
}

// TaskDataKeySetParams give a task a data key ([Executor.TaskDataKeySet]).
type TaskDataKeySetParams struct {
	ID uuid.UUID
	// DataKey is the wrapped data key.
	DataKey []byte
}
