package engine

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/bucket"
)

// ArchivedTask is one task's history as an archive holds it.
type ArchivedTask = archive.Record

// ErrNotArchived marks a read of a task its archive does not hold.
var ErrNotArchived = archive.ErrNotArchived

// CheckArchive checks an archive location: file:///absolute/dir, or
// s3://bucket/prefix?endpoint=host:port&secure=false&region=r (endpoint
// defaults to AWS's; credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, never from the location).
func CheckArchive(location string) error {
	_, err := bucket.Parse(location)
	return err
}

// Archives opens archive locations once each and keeps them: the leader's
// writes and the readers' lookups share connections.
type Archives struct {
	buckets bucket.Set
}

func (a *Archives) open(location string) (bucket.Bucket, error) { return a.buckets.Open(location) }

// History returns the archived history of task id of namespace from the
// archive at location: the copy with the most events. A task not there is
// an error marked [ErrNotArchived].
func (a *Archives) History(ctx context.Context, location, namespace string, id uuid.UUID) ([]history.Event, error) {
	r, err := a.Record(ctx, location, namespace, id)
	return r.Events, err
}

// Record is [Archives.History] with the rest of the task's record (its
// wrapped data key, which opens its sealed payloads: payload/seal).
func (a *Archives) Record(ctx context.Context, location, namespace string, id uuid.UUID) (ArchivedTask, error) {
	b, err := a.open(location)
	if err != nil {
		return ArchivedTask{}, err
	}
	return archive.FindRecord(ctx, b, namespace, id)
}

// Scan calls fn with every task of namespace archived at location that
// was created before until (zero: every task), in the order of the hours
// they were created; a task archived twice (changed between two tries of
// its removal) is seen twice.
func (a *Archives) Scan(ctx context.Context, location, namespace string, until time.Time, fn func(ArchivedTask) error) error {
	b, err := a.open(location)
	if err != nil {
		return err
	}
	return archive.Scan(ctx, b, namespace, until, fn)
}

// archiveBlobs copies the blobs of the archived tasks to the archive
// before the removal takes them, each on its own (a blob may be large),
// as the store holds them (sealed when encrypted; from the bucket its row
// names, for a blob kept in a blob store): references in the archived
// histories stay readable ([Archives.Blob]).
func archiveBlobs(ctx context.Context, s store.Store, archives *Archives, b bucket.Bucket, namespace string, records []archive.Record) error {
	ids := make([]uuid.UUID, len(records))
	for i, r := range records {
		ids[i] = r.TaskID
	}
	keys, err := s.BlobKeysByTasks(ctx, namespace, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		for _, key := range keys[id] {
			blob, err := s.BlobGet(ctx, namespace, key)
			if err != nil {
				return err
			}
			if blob.Location != "" {
				if blob.Data, err = archives.storedBlob(ctx, blob); err != nil {
					return err
				}
			}
			wctx, cancel := context.WithTimeout(ctx, archiveTimeout+time.Duration(len(blob.Data)>>20)*time.Second)
			err = archive.WriteBlob(wctx, b, namespace, id, key, blob.Data)
			cancel()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Blob reads blob key of namespace from the archive at location, with the
// task that wrote it: the bytes as the store held them (sealed when
// encrypted: payload/seal opens them with the record's data key). A blob
// not there is an error marked [ErrNotArchived].
func (a *Archives) Blob(ctx context.Context, location, namespace, key string) (uuid.UUID, []byte, error) {
	b, err := a.open(location)
	if err != nil {
		return uuid.Nil, nil, err
	}
	return archive.FindBlob(ctx, b, namespace, key)
}

// archiveTimeout bounds the writing of one batch to its archive.
const archiveTimeout = 10 * time.Second

// archiveThenRemove removes up to p.Max removable tasks of p.Namespace
// after writing their histories to the archive at location: the removal
// takes only the tasks archived, each at the last seq archived, so no
// event is removed that the archive does not hold. A task that changed
// in between is kept for a later pass (and archived again then).
func archiveThenRemove(ctx context.Context, s store.Store, archives *Archives, location string, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	b, err := archives.open(location)
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(err, "archive of namespace %s", p.Namespace)
	}
	ids, err := s.TaskRemovableList(ctx, p)
	if err != nil || len(ids) == 0 {
		return store.RemoveResult{}, err
	}
	// The archive keeps what the database holds: sealed payloads stay
	// sealed, with the task's wrapped data key beside them.
	events, err := s.EventListByTasks(ctx, ids)
	if err != nil {
		return store.RemoveResult{}, err
	}
	dataKeys, err := s.TaskDataKeys(ctx, ids)
	if err != nil {
		return store.RemoveResult{}, err
	}
	records := make([]archive.Record, 0, len(ids))
	only := make(map[uuid.UUID]int64, len(ids))
	for _, id := range ids {
		evs := events[id]
		if len(evs) == 0 {
			continue // removed meanwhile by another pass
		}
		records = append(records, archive.Record{Namespace: p.Namespace, TaskID: id, Events: evs, DataKey: dataKeys[id]})
		only[id] = evs[len(evs)-1].Seq
	}
	// A store that does not answer must not hold the leader's pass (its
	// rescues and schedules) past its lease.
	wctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	if err := archive.Write(wctx, b, records); err != nil {
		return store.RemoveResult{}, errors.Wrapf(err, "archive namespace %s", p.Namespace)
	}
	if err := archiveBlobs(ctx, s, archives, b, p.Namespace, records); err != nil {
		return store.RemoveResult{}, errors.Wrapf(err, "archive namespace %s", p.Namespace)
	}
	q := *p
	q.Only = only
	return removeTasks(ctx, s, archives, &q)
}

// removeTasks removes what p names (store.Store.TaskRemoveFinished), then
// deletes the objects of the blobs it took whose bytes were in a blob
// store (payload/offload). An object that cannot be deleted is an error;
// the tasks are removed all the same, and the object stays, unread.
func removeTasks(ctx context.Context, s store.Store, archives *Archives, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	res, err := s.TaskRemoveFinished(ctx, p)
	if err != nil {
		return res, err
	}
	var errs error
	for _, b := range res.StoredBlobs {
		bk, err := archives.open(b.Location)
		if err == nil {
			var name string
			if name, err = bucket.StoredBlob(b.Namespace, b.TaskID, b.Key); err == nil {
				err = bk.Delete(ctx, name)
			}
		}
		errs = errors.CombineErrors(errs, errors.Wrapf(err, "delete blob %s of removed task %s", b.Key, b.TaskID))
	}
	return res, errs
}

// storedBlob reads the bytes of a blob kept in a blob store, from the
// bucket its row names.
func (a *Archives) storedBlob(ctx context.Context, b *store.Blob) ([]byte, error) {
	bk, err := a.open(b.Location)
	if err != nil {
		return nil, errors.Wrapf(err, "blob %s", b.Key)
	}
	name, err := bucket.StoredBlob(b.Namespace, b.TaskID, b.Key)
	if err != nil {
		return nil, err
	}
	data, err := bk.Get(ctx, name)
	return data, errors.Wrapf(err, "read blob %s from %s", b.Key, bk)
}
