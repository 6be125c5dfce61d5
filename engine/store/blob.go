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
