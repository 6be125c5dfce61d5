package archive

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/bucket"
)

// Buckets opens archive locations once each and keeps them: the leader's
// writes and the readers' lookups share connections. Its zero value is
// ready to use, and it is safe for concurrent use.
type Buckets struct {
	buckets bucket.Set
}

// Open returns the bucket at location (see bucket.Open), opening it on
// first use.
func (a *Buckets) Open(location string) (bucket.Bucket, error) { return a.buckets.Open(location) }

// History returns the archived history of task id of namespace from the
// archive at location: the copy with the most events. A task not there is
// an error marked [ErrNotArchived].
func (a *Buckets) History(ctx context.Context, location, namespace string, id uuid.UUID) ([]history.Event, error) {
	r, err := a.Record(ctx, location, namespace, id)
	return r.Events, err
}

// Record is [Buckets.History] with the rest of the task's record (its
// wrapped data key, which opens its sealed payloads: payload/seal).
func (a *Buckets) Record(ctx context.Context, location, namespace string, id uuid.UUID) (Record, error) {
	b, err := a.Open(location)
	if err != nil {
		return Record{}, err
	}
	return FindRecord(ctx, b, namespace, id)
}

// Scan calls fn with every task of namespace archived at location that
// was created before until (zero: every task), in the order of the hours
// they were created; a task archived twice (changed between two tries of
// its removal) is seen twice.
func (a *Buckets) Scan(ctx context.Context, location, namespace string, until time.Time, fn func(Record) error) error {
	b, err := a.Open(location)
	if err != nil {
		return err
	}
	return Scan(ctx, b, namespace, until, fn)
}

// Blob reads blob key of namespace from the archive at location, with the
// task that wrote it: the bytes as the store held them (sealed when
// encrypted: payload/seal opens them with the record's data key). A blob
// not there is an error marked [ErrNotArchived].
func (a *Buckets) Blob(ctx context.Context, location, namespace, key string) (uuid.UUID, []byte, error) {
	b, err := a.Open(location)
	if err != nil {
		return uuid.Nil, nil, err
	}
	return FindBlob(ctx, b, namespace, key)
}
