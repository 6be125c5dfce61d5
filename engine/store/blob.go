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
}
