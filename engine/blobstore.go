package engine

import (
	"context"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/store"
	object "github.com/cairnflow/cairn/internal/bucket"
)

// BlobStore is a store decorator that keeps blobs' bytes in a blob store
// (a directory or an S3-compatible bucket, [CheckArchive]'s locations)
// instead of the database: a blob written through it goes to
// <namespace>/blobstore/<key>/<task>.blob at Location, and its row in the
// blobs table names the location and holds no data. Reads follow the
// row's location, whatever this process writes to, so every process
// reads every blob; a removal deletes the objects of the blobs it took.
// With Location empty it only reads (blobs are written to the database).
//
// It goes under [SealedStore], which seals the bytes first: a bucket
// holds what the database would.
type BlobStore struct {
	store.Store
	location string
	buckets  *Archives
}

// BlobStoreOver returns st keeping new blobs at location ("" for the
// database), reading blobs from wherever their rows say, through buckets
// (shared with the archives' readers; nil: its own).
func BlobStoreOver(st store.Store, location string, buckets *Archives) (*BlobStore, error) {
	if location != "" {
		if err := CheckArchive(location); err != nil {
			return nil, errors.Wrap(err, "blob store")
		}
	}
	if buckets == nil {
		buckets = &Archives{}
	}
	return &BlobStore{Store: st, location: location, buckets: buckets}, nil
}

// Unwrap returns the store under the decorator.
func (s *BlobStore) Unwrap() store.Store { return s.Store }

// Location is where the decorator writes blobs ("": the database).
func (s *BlobStore) Location() string { return s.location }

// Observer is the store under it's, if it says (see [SealedStore.Observer]).
func (s *BlobStore) Observer() store.Observer {
	if r, ok := s.Store.(interface{ Observer() store.Observer }); ok {
		return r.Observer()
	}
	return nil
}

// put writes b's bytes to the blob store and returns the row to write in
// their place (b itself when blobs stay in the database).
func (s *BlobStore) put(ctx context.Context, b *store.Blob) (*store.Blob, error) {
	if s.location == "" || b.Location != "" {
		return b, nil
	}
	bucket, err := s.buckets.open(s.location)
	if err != nil {
		return nil, err
	}
	name, err := object.StoredBlob(b.Namespace, b.TaskID, b.Key)
	if err != nil {
		return nil, err
	}
	if err := bucket.Put(ctx, name, b.Data); err != nil {
		return nil, errors.Wrapf(err, "write blob %s to %s", b.Key, bucket)
	}
	row := *b
	row.Data, row.Size, row.Location = nil, int64(len(b.Data)), s.location
	return &row, nil
}

// drop deletes the objects put wrote for rows that were not written (a
// start that found its key taken, or failed), best effort.
func (s *BlobStore) drop(ctx context.Context, rows []*store.Blob) {
	for _, b := range rows {
		if b.Location == "" {
			continue
		}
		if bucket, err := s.buckets.open(b.Location); err == nil {
			if name, err := object.StoredBlob(b.Namespace, b.TaskID, b.Key); err == nil {
				_ = bucket.Delete(ctx, name)
			}
		}
	}
}

// Object reads the object holding blob key of task id of namespace in the
// decorator's blob store (what an operator, or a test, checks).
func (s *BlobStore) Object(ctx context.Context, namespace string, id uuid.UUID, key string) ([]byte, error) {
	bucket, err := s.buckets.open(s.location)
	if err != nil {
		return nil, err
	}
	name, err := object.StoredBlob(namespace, id, key)
	if err != nil {
		return nil, err
	}
	return bucket.Get(ctx, name)
}

// PutStartBlobs writes the bytes of p's blobs and returns p with their
// rows in place: for a start made through a driver's own method
// (pgstore.TaskStartTx) under the decorator.
func (s *BlobStore) PutStartBlobs(ctx context.Context, p *store.TaskStartParams) (*store.TaskStartParams, error) {
	ps, err := s.startBlobs(ctx, []*store.TaskStartParams{p})
	if err != nil {
		return nil, err
	}
	return ps[0], nil
}

// BlobPut implements [store.Store].
func (s *BlobStore) BlobPut(ctx context.Context, b *store.Blob) error {
	row, err := s.put(ctx, b)
	if err != nil {
		return err
	}
	if err := s.Store.BlobPut(ctx, row); err != nil {
		s.drop(ctx, []*store.Blob{row})
		return err
	}
	return nil
}

// BlobGet implements [store.Store]: the bytes from the row's location.
func (s *BlobStore) BlobGet(ctx context.Context, namespace, key string) (*store.Blob, error) {
	b, err := s.Store.BlobGet(ctx, namespace, key)
	if err != nil || b.Location == "" {
		return b, err
	}
	bucket, err := s.buckets.open(b.Location)
	if err != nil {
		return nil, errors.Wrapf(err, "blob %s", key)
	}
	name, err := object.StoredBlob(namespace, b.TaskID, key)
	if err != nil {
		return nil, err
	}
	if b.Data, err = bucket.Get(ctx, name); err != nil {
		return nil, errors.Wrapf(err, "read blob %s from %s", key, bucket)
	}
	return b, nil
}

// startBlobs writes the bytes of starts' blobs (inputs kept by reference)
// and returns the starts with their rows in place.
func (s *BlobStore) startBlobs(ctx context.Context, ps []*store.TaskStartParams) ([]*store.TaskStartParams, error) {
	if s.location == "" {
		return ps, nil
	}
	out := make([]*store.TaskStartParams, len(ps))
	for i, p := range ps {
		out[i] = p
		if len(p.Blobs) == 0 {
			continue
		}
		q := *p
		q.Blobs = make([]*store.Blob, len(p.Blobs))
		for j, b := range p.Blobs {
			row, err := s.put(ctx, b)
			if err != nil {
				return nil, err
			}
			q.Blobs[j] = row
		}
		out[i] = &q
	}
	return out, nil
}

// TaskStart implements [store.Store].
func (s *BlobStore) TaskStart(ctx context.Context, p *store.TaskStartParams) (store.TaskStartResult, error) {
	res, err := s.TaskStartMany(ctx, []*store.TaskStartParams{p})
	if err != nil {
		return store.TaskStartResult{}, err
	}
	return res[0], nil
}

// TaskStartMany implements [store.Store]: the objects of a start that
// made no task (its key was taken, or the batch failed) are deleted.
func (s *BlobStore) TaskStartMany(ctx context.Context, ps []*store.TaskStartParams) ([]store.TaskStartResult, error) {
	qs, err := s.startBlobs(ctx, ps)
	if err != nil {
		return nil, err
	}
	var res []store.TaskStartResult
	if len(qs) == 1 {
		var one store.TaskStartResult
		if one, err = s.Store.TaskStart(ctx, qs[0]); err == nil {
			res = []store.TaskStartResult{one}
		}
	} else {
		res, err = s.Store.TaskStartMany(ctx, qs)
	}
	for i, q := range qs {
		if len(q.Blobs) > 0 && (err != nil || res[i].Existing) {
			s.drop(ctx, q.Blobs)
		}
	}
	return res, err
}

// TaskRemoveFinished implements [store.Store]: after the removal, the
// objects of the blobs it took are deleted. One that cannot be is an
// error (the tasks are removed all the same; the object stays, unread).
func (s *BlobStore) TaskRemoveFinished(ctx context.Context, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	res, err := s.Store.TaskRemoveFinished(ctx, p)
	if err != nil {
		return res, err
	}
	var errs error
	for _, b := range res.StoredBlobs {
		bucket, err := s.buckets.open(b.Location)
		if err == nil {
			var name string
			if name, err = object.StoredBlob(b.Namespace, b.TaskID, b.Key); err == nil {
				err = bucket.Delete(ctx, name)
			}
		}
		errs = errors.CombineErrors(errs, errors.Wrapf(err, "delete blob %s of removed task %s", b.Key, b.TaskID))
	}
	return res, errs
}
