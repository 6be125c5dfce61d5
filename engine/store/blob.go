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
	CreatedAt   time.Time
	// Location, when set, is the blob store holding the bytes (a
	// directory or an S3-compatible bucket, engine.CheckArchive's form):
	// the row keeps no data, and a decorator (engine.BlobStoreOver) moves
	// the bytes. Empty: the bytes are in the database.
	Location string
}
