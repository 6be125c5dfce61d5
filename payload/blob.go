package payload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// Blob is a blob as a [Blobs] keeps it: bytes a task owns, removed
// with it. Data is as the stage encoded it (sealed, when the task's
// payloads are encrypted); SHA256 is always the digest of the bytes
// before encoding, what a reference records.
type Blob struct {
	Namespace   string
	Key         string
	TaskID      uuid.UUID
	ContentType string
	SHA256      []byte
	Data        []byte
	// Size is the blob's length when Data is not here (a bucket holds the
	// bytes); 0: len(Data).
	Size      int64
	CreatedAt time.Time
	// Location, when set, is the bucket holding the bytes (a directory or
	// an S3-compatible bucket): the store's row keeps no data.
	Location string
	// Archived, on a blob read from an archive (its task removed), is
	// what the archive kept beside the task's events.
	Archived *Archived
}

// Blobs keeps blobs for a [Stage]: the database's blobs table, with
// the bytes in the database or in a bucket beside it (payload/offload's
// Store). The SDK adapts its store to it. Its methods are called from the
// goroutine of the read or write; it is safe for concurrent use.
type Blobs interface {
	// BlobPut writes a blob now, bytes and row. A key is written once.
	BlobPut(ctx context.Context, b *Blob) error
	// BlobGet reads blob key of namespace with its bytes; a blob not
	// there is an error marked [ErrNotFound].
	BlobGet(ctx context.Context, namespace, key string) (*Blob, error)
	// BlobPrepare readies a blob to be written with its task's start, in
	// the start's transaction: it returns the row to write (b itself, or
	// one naming where its bytes were put). BlobDiscard undoes what
	// BlobPrepare did for rows a start did not write, as best it can.
	BlobPrepare(ctx context.Context, b *Blob) (*Blob, error)
	BlobDiscard(ctx context.Context, rows []*Blob)
}

// NewBlob makes the blob of data owned by task id of namespace, and the
// reference a history keeps of it, writing nothing. Over [MaxBlobBytes]
// it is refused with [ErrTooLarge].
func NewBlob(namespace string, id uuid.UUID, contentType string, data []byte) (history.BlobRef, *Blob, error) {
	if len(data) > MaxBlobBytes {
		return history.BlobRef{}, nil, errmark.Mark(errors.Newf("blob of task %s: %d bytes, over the limit of %d bytes",
			id, len(data), MaxBlobBytes), ErrTooLarge)
	}
	sum := sha256.Sum256(data)
	key, err := uuid.NewV7()
	if err != nil {
		return history.BlobRef{}, nil, err
	}
	blob := &Blob{Namespace: namespace, Key: key.String(), TaskID: id, ContentType: contentType, SHA256: sum[:], Data: data}
	return history.BlobRef{Store: history.BlobStoreDB, Key: key.String(), Size: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), ContentType: contentType}, blob, nil
}

// CheckBlob returns data when it is what ref records (its size and
// SHA-256), else an error marked [ErrBlobCorrupt] naming the blob and
// task id that wrote it.
func CheckBlob(ref history.BlobRef, id uuid.UUID, data []byte) ([]byte, error) {
	want, err := hex.DecodeString(ref.SHA256)
	if err != nil || len(want) != sha256.Size {
		return nil, errors.Newf("blob %s: sha256 %q is not a hex SHA-256 digest", ref.Key, ref.SHA256)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != ref.Size || !bytes.Equal(sum[:], want) {
		return nil, errmark.Mark(errors.Newf("blob %s of task %s is damaged: its reference records %d bytes with SHA-256 %s, the store holds %d bytes with SHA-256 %s",
			ref.Key, id, ref.Size, ref.SHA256, len(data), hex.EncodeToString(sum[:])), ErrBlobCorrupt)
	}
	return data, nil
}

// checkRef refuses a reference cairn cannot read: another store than the
// database's, or a digest that is not one.
func checkRef(ref history.BlobRef) error {
	if ref.Store != history.BlobStoreDB {
		return errors.Newf("blob %s: store %q is not one this cairn reads (%q)", ref.Key, ref.Store, history.BlobStoreDB)
	}
	want, err := hex.DecodeString(ref.SHA256)
	if err != nil || len(want) != sha256.Size {
		return errors.Newf("blob %s: sha256 %q is not a hex SHA-256 digest", ref.Key, ref.SHA256)
	}
	return nil
}

// checkStored returns b when its bytes are what the digest stored with it
// says, else an error marked [ErrBlobCorrupt].
func checkStored(b *Blob) (*Blob, error) {
	if sum := sha256.Sum256(b.Data); !bytes.Equal(sum[:], b.SHA256) {
		return nil, errmark.Mark(errors.Newf("blob %s of task %s is damaged: %d bytes with SHA-256 %s, written with SHA-256 %s",
			b.Key, b.TaskID, len(b.Data), hex.EncodeToString(sum[:]), hex.EncodeToString(b.SHA256)), ErrBlobCorrupt)
	}
	return b, nil
}
