package archive_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/bucket"
)

// hourKey is the name of an object planted in the hour of task id.
func hourKey(id uuid.UUID, name string) string {
	sec, _ := id.Time().UnixTime()
	return "tenant-a/" + time.Unix(sec, 0).UTC().Format("2006/01/02/15") + "/" + name + ".jsonl.gz"
}

// The security probe's object, planted in the hour of an archived task:
// 200 MB of one byte on one line, 204 KB of gzip. A lookup of the task
// reads none of the line past its beginning and says which object is
// corrupt; a planted line that begins as another task's record is
// skipped without being held, and the task is found. Both kinds of
// archive.
func TestPlantedLineIsReadWithinBounds(t *testing.T) {
	ctx := context.Background()
	junk := plantedLine(t, "", 200<<20)
	other := plantedLine(t, `{"namespace":"tenant-a","task_id":"`+uuid.Must(uuid.NewV7()).String()+`","events":[{"seq":1,"data":{"input":"`, 200<<20)
	for name, location := range locations(t) {
		t.Run(name, func(t *testing.T) {
			b, err := bucket.Open(location)
			require.NoError(t, err)
			id := uuid.Must(uuid.NewV7())
			require.NoError(t, archive.Write(ctx, b, []archive.Record{history3(t, id, 3)}))

			planted := hourKey(id, "00000000-0000-7000-8000-000000000001")
			require.NoError(t, b.Put(ctx, planted, junk))
			reads := archive.WatchReads(t)
			_, err = archive.Find(ctx, b, "tenant-a", id)
			require.ErrorContains(t, err, planted, "the error names the object")
			require.ErrorContains(t, err, "line 1 is not a record")
			require.ErrorIs(t, err, archive.ErrCorrupt)
			require.NotEmpty(t, *reads)
			require.Equal(t, planted, (*reads)[0].Key)
			require.LessOrEqual(t, (*reads)[0].Decompressed, int64(128<<10), "the line's beginning only")

			require.NoError(t, b.Delete(ctx, planted))
			require.NoError(t, b.Put(ctx, planted, other))
			*reads = nil
			got, err := archive.Find(ctx, b, "tenant-a", id)
			require.NoError(t, err, "another task's line is skipped")
			require.Len(t, got, 3)
			require.Equal(t, planted, (*reads)[0].Key)
			require.Equal(t, int64(200<<20), (*reads)[0].Decompressed, "read through once")
			require.Zero(t, (*reads)[0].Held, "and none of it held")
		})
	}
}

// sized is a record of task id whose line is about n bytes.
func sized(t testing.TB, id uuid.UUID, n int) archive.Record {
	r := history3(t, id, 1)
	r.Events[0].Data = history.TaskScheduledData{TaskType: "doc", TypeVersion: 1, Queue: "q", MaxAttempts: 3,
		Input: json.RawMessage(`"` + strings.Repeat("x", n) + `"`)}
	return r
}

// line is a record's line as Write writes it.
func line(t testing.TB, r archive.Record) string {
	b, err := json.Marshal(r)
	require.NoError(t, err)
	return string(b) + "\n"
}

// gz is body compressed.
func gz(t testing.TB, body string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write([]byte(body))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// Write keeps each object within the bound on an object (decompressed),
// starting another as needed, and refuses a record over the bound on a
// line; every record reads back.
func TestWriteKeepsObjectsWithinTheBound(t *testing.T) {
	ctx := context.Background()
	archive.SetBounds(t, 100<<10, 256<<10)
	b, err := bucket.Open("file://" + filepath.ToSlash(t.TempDir()))
	require.NoError(t, err)
	var records []archive.Record
	for range 10 {
		records = append(records, sized(t, uuid.Must(uuid.NewV7()), 60<<10))
	}
	require.NoError(t, archive.Write(ctx, b, records))
	reads := archive.WatchReads(t)
	for _, r := range records {
		got, err := archive.Find(ctx, b, "tenant-a", r.TaskID)
		require.NoError(t, err)
		require.Len(t, got, 1)
	}
	objects := map[string]int64{}
	for _, r := range *reads {
		objects[r.Key] = r.Decompressed
	}
	require.GreaterOrEqual(t, len(objects), 3, "600 KB in objects of 256 KiB at most")
	for key, n := range objects {
		require.LessOrEqual(t, n, int64(256<<10), key)
	}

	err = archive.Write(ctx, b, []archive.Record{sized(t, uuid.Must(uuid.NewV7()), 100<<10)})
	require.ErrorContains(t, err, "over the archive's 102400 per task")
}

// An object that is not as Write writes it is refused with an error that
// names it and says what is wrong, having read no more than the bounds:
// over the bound on an object (decompressed or stored), a line over the
// bound on a record (the task's or another's), a line whose beginning
// and body name different tasks, and an object that is not gzip.
func TestObjectsOverTheBoundsAreCorrupt(t *testing.T) {
	ctx := context.Background()
	const record, object = 100 << 10, 256 << 10
	archive.SetBounds(t, record, object)
	id, other := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	small := line(t, sized(t, other, 50<<10))
	long := line(t, sized(t, other, 150<<10))
	mine := line(t, sized(t, id, 150<<10))
	// A line that begins as the task sought and holds another (JSON
	// takes the last of a member named twice).
	twoNames := strings.Replace(line(t, history3(t, id, 2)), `"events"`, `"task_id":"`+other.String()+`","events"`, 1)
	emptyMembers := bytes.Repeat(gz(t, ""), 2*object/20) // each decompresses to nothing
	for name, c := range map[string]struct {
		body             []byte
		says             string
		stored, unpacked int64 // at most, read from the object
	}{
		"OverTheObjectBound":       {gz(t, strings.Repeat(small, 10)), "the object is over 262144 bytes decompressed", 2 * object, object + 1},
		"OverTheObjectBoundStored": {emptyMembers, "the object is over 262144 bytes stored", object + 1, 0},
		"AnotherTasksLongLine":     {gz(t, long), "line 1 (task " + other.String() + "): the line is over 102400 bytes", object, record + 64<<10},
		"TheTasksLongLine":         {gz(t, mine), "line 1 (task " + id.String() + "): the line is over 102400 bytes", object, record + 64<<10},
		"TwoTasksInOneLine":        {gz(t, twoNames), "line 1: it begins with task " + id.String() + ` of "tenant-a" and holds task ` + other.String(), object, 64 << 10},
		"NotGzip":                  {[]byte(small), "not gzip", 64 << 10, 0},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := bucket.Open("file://" + filepath.ToSlash(t.TempDir()))
			require.NoError(t, err)
			planted := hourKey(id, "00000000-0000-7000-8000-000000000001")
			require.NoError(t, b.Put(ctx, planted, c.body))
			reads := archive.WatchReads(t)
			_, err = archive.Find(ctx, b, "tenant-a", id)
			require.ErrorIs(t, err, archive.ErrCorrupt)
			require.ErrorContains(t, err, "read archive object "+planted+" of "+b.String()+": the object is corrupt or not cairn's: ")
			require.ErrorContains(t, err, c.says)
			require.Len(t, *reads, 1)
			require.LessOrEqual(t, (*reads)[0].Compressed, c.stored)
			require.LessOrEqual(t, (*reads)[0].Decompressed, c.unpacked)
			require.LessOrEqual(t, (*reads)[0].Held, int64(2*record))
		})
	}
}

// breaking is a bucket whose objects fail after their first bytes.
type breaking struct{ bucket.Bucket }

func (b breaking) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	body, err := b.Bucket.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(io.MultiReader(bytes.NewReader(body[:len(body)/2]), iotest.ErrReader(errBroken))), nil
}

var errBroken = errors.New("connection reset")

// An object that cannot be read to its end is an error of the bucket,
// not a corrupt object.
func TestReadFailureIsNotCorruption(t *testing.T) {
	ctx := context.Background()
	b, err := bucket.Open("file://" + filepath.ToSlash(t.TempDir()))
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, archive.Write(ctx, b, []archive.Record{history3(t, id, 30)}))
	_, err = archive.Find(ctx, breaking{b}, "tenant-a", id)
	require.ErrorIs(t, err, errBroken)
	require.NotErrorIs(t, err, archive.ErrCorrupt)
}
