package archive

import "testing"

// ObjectRead is what reading one archive object took.
type ObjectRead = objectRead

// WatchReads records what each object read takes until the test ends.
func WatchReads(t testing.TB) *[]ObjectRead {
	var reads []ObjectRead
	readStats = func(r objectRead) { reads = append(reads, r) }
	t.Cleanup(func() { readStats = nil })
	return &reads
}

// SetBounds lowers the bounds on a record's line and on an object until
// the test ends.
func SetBounds(t testing.TB, record int, object int64) {
	r, o := maxRecordBytes, maxObjectBytes
	maxRecordBytes, maxObjectBytes = record, object
	t.Cleanup(func() { maxRecordBytes, maxObjectBytes = r, o })
}
