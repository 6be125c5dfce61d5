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
