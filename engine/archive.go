package engine

import (
	"github.com/cairnflow/cairn/engine/internal/archive"
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
// writes and the readers' lookups share connections. Its zero value is
// ready to use. For the SDK (sdk.Archives is its users' name).
type Archives = archive.Buckets
