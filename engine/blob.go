package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
)

// MaxBlobBytes is the most bytes one blob holds (256 MiB): a PutBlob over
// it is refused with [ErrPayloadTooLarge], nothing written.
const MaxBlobBytes = 256 << 20

// ErrBlobCorrupt marks a blob whose stored bytes do not match the size
// and SHA-256 digest its reference records: the data is damaged, and is
// never handed out.
var ErrBlobCorrupt = errors.New("blob does not match its reference")

// ErrPayloadTooLarge marks a payload over its limit; the error says the
// size and the limit.
var ErrPayloadTooLarge = errors.New("payload too large")

// TaskBlobs keeps the blobs of one task in the store's blobs table.
// Its methods have the signatures of the activity.BlobStore the executor
// puts into every step's context (internal/activity).
type TaskBlobs struct {
	Store     store.Store
	Namespace string
	TaskID    uuid.UUID
}

// Blobs returns the blob store of the attempt's task.
func (a *Attempt) Blobs() TaskBlobs {
	return TaskBlobs{Store: a.proc.cfg.Store, Namespace: a.Task.Namespace, TaskID: a.Task.ID}
}

// PutBlob writes data as a blob of the task and returns its reference.
func (b TaskBlobs) PutBlob(ctx context.Context, contentType string, data []byte) (history.BlobRef, error) {
	ref, blob, err := NewBlob(b.Namespace, b.TaskID, contentType, data)
	if err != nil {
		return history.BlobRef{}, err
	}
	if err := b.Store.BlobPut(ctx, blob); err != nil {
		return history.BlobRef{}, err
	}
	return ref, nil
}

// NewBlob makes the blob of data owned by task id of namespace, and the
// reference a history keeps of it, writing nothing: a start writes it
// with its task (store.TaskStartParams.Blobs). Over MaxBlobBytes it is
// refused with [ErrPayloadTooLarge].
func NewBlob(namespace string, id uuid.UUID, contentType string, data []byte) (history.BlobRef, *store.Blob, error) {
	if len(data) > MaxBlobBytes {
		return history.BlobRef{}, nil, errmark.Mark(errors.Newf("blob of task %s: %d bytes, over the limit of %d bytes",
			id, len(data), MaxBlobBytes), ErrPayloadTooLarge)
	}
	sum := sha256.Sum256(data)
	key, err := uuid.NewV7()
	if err != nil {
		return history.BlobRef{}, nil, err
	}
	blob := &store.Blob{Namespace: namespace, Key: key.String(), TaskID: id, ContentType: contentType, SHA256: sum[:], Data: data}
	return history.BlobRef{Store: history.BlobStoreDB, Key: key.String(), Size: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), ContentType: contentType}, blob, nil
}

// GetBlob reads the blob ref names in the task's namespace and checks its
// bytes against the reference: a mismatch is an error marked
// [ErrBlobCorrupt] naming the blob and the task that wrote it.
func (b TaskBlobs) GetBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	return GetBlob(ctx, b.Store, b.Namespace, ref)
}

// GetOwnBlob reads a blob of the task's own, checked against ref: see
// [GetTaskBlob].
func (b TaskBlobs) GetOwnBlob(ctx context.Context, ref history.BlobRef) ([]byte, error) {
	return GetTaskBlob(ctx, b.Store, b.Namespace, ref, b.TaskID)
}

// GetBlobOf reads a blob task owner wrote (a child's output, read by its
// parent), checked against ref: see [GetTaskBlob].
func (b TaskBlobs) GetBlobOf(ctx context.Context, ref history.BlobRef, owner uuid.UUID) ([]byte, error) {
	return GetTaskBlob(ctx, b.Store, b.Namespace, ref, owner)
}

// GetBlob reads the blob ref names in namespace, checked against ref.
func GetBlob(ctx context.Context, s store.Store, namespace string, ref history.BlobRef) ([]byte, error) {
	blob, err := blobOf(ctx, s, namespace, ref)
	if err != nil {
		return nil, err
	}
	return CheckBlob(ref, blob.TaskID, blob.Data)
}

// GetTaskBlob is GetBlob for a reference that cairn resolves by itself on
// behalf of task owner (its input, a signal's payload, a step's or a
// child's output kept by reference): the blob must be one owner wrote,
// as every such reference cairn writes is. A reference to another task's
// blob, forged into a payload, is answered as a blob that does not exist
// (marked store.ErrNotFound), and its bytes are never handed out.
func GetTaskBlob(ctx context.Context, s store.Store, namespace string, ref history.BlobRef, owner uuid.UUID) ([]byte, error) {
	blob, err := blobOf(ctx, s, namespace, ref)
	if err != nil {
		return nil, err
	}
	if blob.TaskID != owner {
		return nil, errmark.Mark(errors.Newf("blob %s: no such blob of task %s", ref.Key, owner), store.ErrNotFound)
	}
	return CheckBlob(ref, blob.TaskID, blob.Data)
}

// blobOf reads the blob ref names in namespace, unchecked.
func blobOf(ctx context.Context, s store.Store, namespace string, ref history.BlobRef) (*store.Blob, error) {
	if ref.Store != history.BlobStoreDB {
		return nil, errors.Newf("blob %s: store %q is not one this cairn reads (%q)", ref.Key, ref.Store, history.BlobStoreDB)
	}
	want, err := hex.DecodeString(ref.SHA256)
	if err != nil || len(want) != sha256.Size {
		return nil, errors.Newf("blob %s: sha256 %q is not a hex SHA-256 digest", ref.Key, ref.SHA256)
	}
	return s.BlobGet(ctx, namespace, ref.Key)
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

// ReadBlob reads the blob key of namespace, checked against the digest
// stored with it (a reader without the reference: the API's download),
// and returns its bytes and content type.
func ReadBlob(ctx context.Context, s store.Store, namespace, key string) (*store.Blob, error) {
	blob, err := s.BlobGet(ctx, namespace, key)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(blob.Data); !bytes.Equal(sum[:], blob.SHA256) {
		return nil, errmark.Mark(errors.Newf("blob %s of task %s is damaged: %d bytes with SHA-256 %s, written with SHA-256 %s",
			key, blob.TaskID, len(blob.Data), hex.EncodeToString(sum[:]), hex.EncodeToString(blob.SHA256)), ErrBlobCorrupt)
	}
	return blob, nil
}
