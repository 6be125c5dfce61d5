package archive_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/internal/bucket"
)

// plantedLine is the probe's object: a line of n bytes, head and then
// one byte repeated, with no newline; about a thousandth of n as gzip.
// It is made of 1 MiB gzip members (a gzip stream may be several), so
// making it costs compressing 2 MiB, not n.
func plantedLine(tb testing.TB, head string, n int) []byte {
	tb.Helper()
	member := func(s string) []byte {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		require.NoError(tb, err)
		_, err = zw.Write([]byte(s))
		require.NoError(tb, err)
		require.NoError(tb, zw.Close())
		return buf.Bytes()
	}
	const mib = 1 << 20
	body := member(head + strings.Repeat("a", mib-len(head)))
	body = append(body, bytes.Repeat(member(strings.Repeat("a", mib)), n/mib-1)...)
	return append(body, member(strings.Repeat("a", n%mib))...)
}

// BenchmarkFindBesidePlantedLine reads a task archived in the hour where
// a 200 MB line was planted: junk, or a line that begins as another
// task's record.
func BenchmarkFindBesidePlantedLine(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"Junk", "OtherTask"} {
		b.Run(kind, func(b *testing.B) {
			bucket, err := bucket.Open("file://" + filepath.ToSlash(b.TempDir()))
			require.NoError(b, err)
			id := uuid.Must(uuid.NewV7())
			require.NoError(b, archive.Write(ctx, bucket, []archive.Record{history3(b, id, 3)}))
			head := ""
			if kind == "OtherTask" {
				head = `{"namespace":"tenant-a","task_id":"` + uuid.Must(uuid.NewV7()).String() + `","events":[{"seq":1,"type":"task_scheduled","data":{"input":"`
			}
			body := plantedLine(b, head, 200<<20)
			b.Logf("planted object: %d bytes", len(body))
			require.NoError(b, bucket.Put(ctx, hourKey(id, "00000000-0000-7000-8000-000000000000"), body))
			reads := archive.WatchReads(b)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, err := archive.Find(ctx, bucket, "tenant-a", id)
				b.Logf("find: %v", err)
			}
			b.StopTimer()
			var decompressed, held int64
			for _, r := range *reads {
				decompressed, held = decompressed+r.Decompressed, max(held, r.Held)
			}
			b.ReportMetric(float64(decompressed)/float64(b.N), "decompressed-B/op")
			b.ReportMetric(float64(held), "held-B")
		})
	}
}
