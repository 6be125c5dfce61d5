package archive_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/archive"
)

// plantedLine is the probe's object: 200 MB of one byte and no newline,
// about 200 KB compressed.
func plantedLine(tb testing.TB, head string, n int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(tb, err)
	_, err = zw.Write([]byte(head))
	require.NoError(tb, err)
	chunk := []byte(strings.Repeat("a", 1<<20))
	for left := n - len(head); left > 0; left -= len(chunk) {
		_, err = zw.Write(chunk[:min(left, len(chunk))])
		require.NoError(tb, err)
	}
	require.NoError(tb, zw.Close())
	return buf.Bytes()
}

// BenchmarkFindBesidePlantedLine reads a task archived in the hour where
// a 200 MB line was planted: junk, or a line that begins as another
// task's record.
func BenchmarkFindBesidePlantedLine(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"Junk", "OtherTask"} {
		b.Run(kind, func(b *testing.B) {
			bucket, err := archive.Open("file://" + filepath.ToSlash(b.TempDir()))
			require.NoError(b, err)
			id := uuid.Must(uuid.NewV7())
			require.NoError(b, archive.Write(ctx, bucket, []archive.Record{history3(b, id, 3)}))
			head := ""
			if kind == "OtherTask" {
				head = `{"namespace":"tenant-a","task_id":"` + uuid.Must(uuid.NewV7()).String() + `","events":[{"seq":1,"type":"task_scheduled","data":{"input":"`
			}
			body := plantedLine(b, head, 200<<20)
			b.Logf("planted object: %d bytes", len(body))
			sec, _ := id.Time().UnixTime()
			hour := time.Unix(sec, 0).UTC().Format("2006/01/02/15")
			require.NoError(b, bucket.Put(ctx, "tenant-a/"+hour+"/00000000-0000-7000-8000-000000000000.jsonl.gz", body))
			b.ResetTimer()
			for range b.N {
				_, err := archive.Find(ctx, bucket, "tenant-a", id)
				b.Logf("find: %v", err)
			}
		})
	}
}
