package sdk

import "github.com/cairnflow/cairn/engine"

// Archives opens archive locations once each and keeps them, so the
// clients given one ([ClientConfig.Archives]) share their connections. Its
// zero value is ready to use, and it is safe for concurrent use.
type Archives = engine.Archives

// CheckArchive checks an archive location: file:///absolute/dir, or
// s3://bucket/prefix?endpoint=host:port&secure=false&region=r (endpoint
// defaults to AWS's; credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, never from the location). The same locations
// hold blobs ([WorkerConfig.BlobStore]).
func CheckArchive(location string) error { return engine.CheckArchive(location) }
