package maintenance

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/engine/internal/service"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/bucket"
)

// archiver is the leader's service that removes, at each pass, the
// finished tasks past their retention in the namespaces whose tasks go to
// an archive (their own, or the default), writing their histories and
// blobs there first (see archiveThenRemove); it records the default
// archive it was given in the database, for leaders given none. Retention
// does the same without a copy where there is no archive.
type archiver struct {
	cfg Config
	svc service.Base
	// next is the namespace the next pass begins with (see
	// removeFinished). Only the service's goroutine uses it.
	next string
}

// Start archives and removes finished tasks until Stop or until ctx is
// done.
func (a *archiver) Start(ctx context.Context) error {
	return a.svc.Start(ctx, func(ctx context.Context) { every(ctx, a.cfg.Interval, a.pass) })
}

// Stop stops archiving and waits.
func (a *archiver) Stop() { a.svc.Stop() }

// pass archives and removes within the budget.
func (a *archiver) pass(ctx context.Context) {
	res, err := removeFinished(ctx, a.cfg.Store, a.cfg.Clock, a.cfg.Retention, a.cfg.Retention.Budget, &a.next, true)
	logRemoved(ctx, a.cfg.Logger, res, err)
}

// archiveBlobs copies the blobs of the archived tasks to the archive
// before the removal takes them, each on its own (a blob may be large),
// as the store holds them (sealed when encrypted; from the bucket its row
// names, for a blob kept in a blob store): references in the archived
// histories stay readable (archive.Buckets.Blob).
func archiveBlobs(ctx context.Context, s store.Store, archives *archive.Buckets, b bucket.Bucket, namespace string, records []archive.Record) error {
	ids := make([]uuid.UUID, len(records))
	for i, r := range records {
		ids[i] = r.TaskID
	}
	keys, err := s.BlobKeysByTasks(ctx, &store.BlobKeysByTasksParams{Namespace: namespace, IDs: ids})
	if err != nil {
		return err
	}
	for _, id := range ids {
		for _, key := range keys[id] {
			blob, err := s.BlobGet(ctx, &store.BlobGetParams{Namespace: namespace, Key: key})
			if err != nil {
				return err
			}
			if blob.Location != "" {
				if blob.Data, err = storedBlob(ctx, archives, blob); err != nil {
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

// archiveTimeout bounds the writing of one batch to its archive.
const archiveTimeout = 10 * time.Second

// archiveThenRemove removes up to p.Max removable tasks of p.Namespace
// after writing their histories to the archive at location: the removal
// takes only the tasks archived, each at the last seq archived, so no
// event is removed that the archive does not hold. A task that changed
// in between is kept for a later pass (and archived again then).
func archiveThenRemove(ctx context.Context, s store.Store, archives *archive.Buckets, location string, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	b, err := archives.Open(location)
	if err != nil {
		return store.RemoveResult{}, errors.Wrapf(err, "archive of namespace %s", p.Namespace)
	}
	removable, err := s.TaskRemovableList(ctx, &store.TaskRemovableListParams{
		Namespace: p.Namespace, Before: p.Before, TypeBefore: p.TypeBefore, Max: p.Max,
	})
	if err != nil || len(removable) == 0 {
		return store.RemoveResult{}, err
	}
	ids := make([]uuid.UUID, len(removable))
	for i, t := range removable {
		ids[i] = t.ID
	}
	// The archive keeps what the database holds: sealed payloads stay
	// sealed, with the task's wrapped data key beside them.
	events, err := s.EventList(ctx, store.EventListAll("", ids...))
	if err != nil {
		return store.RemoveResult{}, err
	}
	dataKeys, err := s.TaskDataKeys(ctx, &store.TaskDataKeysParams{Namespace: p.Namespace, IDs: ids})
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

// removeTasks removes what p names (RemoveFinished), then
// deletes the objects of the blobs it took whose bytes were in a blob
// store (payload/offload). An object that cannot be deleted is an error;
// the tasks are removed all the same, and the object stays, unread.
func removeTasks(ctx context.Context, s store.Store, archives *archive.Buckets, p *store.RemoveFinishedParams) (store.RemoveResult, error) {
	res, err := RemoveFinished(ctx, s, p)
	if err != nil {
		return res, err
	}
	var errs error
	for _, b := range res.StoredBlobs {
		bk, err := archives.Open(b.Location)
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
func storedBlob(ctx context.Context, archives *archive.Buckets, b *store.Blob) ([]byte, error) {
	bk, err := archives.Open(b.Location)
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
