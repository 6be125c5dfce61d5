package archive_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/internal/archive"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/bucket"
	"github.com/cairnflow/cairn/internal/s3test"
)

// locations returns an archive of each kind: a directory, and a prefix of a
// bucket on an S3-protocol server on loopback.
func locations(t *testing.T) map[string]string {
	t.Setenv("AWS_ACCESS_KEY_ID", "cairn-test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cairn-test-secret")
	return map[string]string{
		"Directory": "file://" + filepath.ToSlash(t.TempDir()),
		"S3":        s3test.Start(t, "archive", "cairn/histories"),
	}
}

func history3(t testing.TB, id uuid.UUID, n int) archive.Record {
	t.Helper()
	at := time.Date(2026, 12, 1, 9, 30, 0, 123456000, time.UTC)
	events := []history.Event{{Seq: 1, At: at, Data: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "q", MaxAttempts: 3, Input: json.RawMessage(`{"doc":"é\u2028"}`)}}}
	for seq := 2; seq <= n; seq++ {
		events = append(events, history.Event{Seq: int64(seq), At: at.Add(time.Duration(seq) * time.Millisecond), Attempt: 1,
			Data: history.StepCompletedData{Position: seq - 2, Name: "s", Output: json.RawMessage(`[1,2]`)}})
	}
	return archive.Record{Namespace: "tenant-a", TaskID: id, Events: events}
}

// Records written are found again by id, equal to what was written, on
// both kinds of archive; the copy with the most events wins; another
// namespace's task and a task never archived are not found.
func TestArchiveRoundTrip(t *testing.T) {
	ctx := context.Background()
	for name, location := range locations(t) {
		t.Run(name, func(t *testing.T) {
			b, err := bucket.Open(location)
			require.NoError(t, err)
			a, c := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			old := uuid.Must(uuid.FromBytes(append([]byte{0, 0, 0x01, 0x80, 0, 0, 0x70, 0, 0x80}, make([]byte, 7)...)))
			require.NoError(t, archive.Write(ctx, b, []archive.Record{history3(t, a, 3), history3(t, old, 2)}))
			require.NoError(t, archive.Write(ctx, b, []archive.Record{history3(t, a, 5), history3(t, c, 1)}))

			got, err := archive.Find(ctx, b, "tenant-a", a)
			require.NoError(t, err)
			want, err := json.Marshal(history3(t, a, 5).Events)
			require.NoError(t, err)
			gotJSON, err := json.Marshal(got)
			require.NoError(t, err)
			require.Equal(t, string(want), string(gotJSON), "the copy with the most events, byte-equal as JSON")

			got, err = archive.Find(ctx, b, "tenant-a", old)
			require.NoError(t, err, "a task of another hour is in another slice")
			require.Len(t, got, 2)

			_, err = archive.Find(ctx, b, "tenant-b", a)
			require.ErrorIs(t, err, archive.ErrNotArchived)
			_, err = archive.Find(ctx, b, "tenant-a", uuid.Must(uuid.NewV7()))
			require.ErrorIs(t, err, archive.ErrNotArchived)

			var seen []uuid.UUID
			require.NoError(t, archive.Scan(ctx, b, "tenant-a", time.Time{}, func(r archive.Record) error {
				seen = append(seen, r.TaskID)
				return nil
			}))
			require.ElementsMatch(t, []uuid.UUID{a, old, a, c}, seen, "every copy, each once")
		})
	}
}

// A directory archive's objects are gzip-compressed JSON lines under the
// namespace and the hour the tasks were created.
func TestDirectoryArchiveLayout(t *testing.T) {
	dir := t.TempDir()
	b, err := bucket.Open("file://" + filepath.ToSlash(dir))
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, archive.Write(context.Background(), b, []archive.Record{history3(t, id, 2)}))
	sec, nsec := id.Time().UnixTime()
	hour := time.Unix(sec, nsec).UTC().Format("2006/01/02/15")
	objects, err := filepath.Glob(filepath.Join(dir, "tenant-a", filepath.FromSlash(hour), "*.jsonl.gz"))
	require.NoError(t, err)
	require.Len(t, objects, 1)
	body, err := os.ReadFile(objects[0])
	require.NoError(t, err)
	require.Equal(t, []byte{0x1f, 0x8b}, body[:2], "gzip")
}

// Locations are checked before use, with what is wrong.
func TestOpenRefusesBadLocations(t *testing.T) {
	for location, says := range map[string]string{
		"relative/dir":                      "use file:///absolute/dir or s3://bucket/prefix",
		"file://host/dir":                   "with no host, query or fragment",
		"file:///dir?x=1":                   "with no host, query or fragment",
		"file:///dir#1":                     "with no host, query or fragment",
		"s3://b/p?endpoint=http://h:9000":   "endpoint is host:port, without a scheme",
		"s3://b/p?secret_key=hunter2":       `archive "s3://b/p": unknown setting "secret_key"`,
		"s3:///prefix":                      "s3://bucket/prefix",
		"s3://key:secret@bucket/prefix":     "credentials do not belong in the location",
		"s3://bucket/prefix?endpoint=h&x=1": `unknown setting "x"`,
		"https://example.com/archive":       "use file:///absolute/dir",
	} {
		_, err := bucket.Open(location)
		require.ErrorContains(t, err, says, location)
	}
}

// A stray file in the archive's folder is not read as an object; a record
// of another namespace reached through a shared folder is not handed out;
// a namespace that is not one folder name is refused.
func TestDirectoryArchiveSkipsWhatIsNotItsOwn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := bucket.Open("file://" + filepath.ToSlash(dir))
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, archive.Write(ctx, b, []archive.Record{history3(t, id, 2)}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tenant-a", ".DS_Store"), []byte("junk"), 0o600))
	got, err := archive.Find(ctx, b, "tenant-a", id)
	require.NoError(t, err, "the stray file is skipped")
	require.Len(t, got, 2)

	// The namespace "tenant-a" seen through a root one level up, as the
	// folder of namespace "x" would be if it pointed there.
	up, err := bucket.Open("file://" + filepath.ToSlash(filepath.Dir(dir)))
	require.NoError(t, err)
	n := 0
	require.NoError(t, archive.Scan(ctx, up, filepath.Base(dir), time.Time{}, func(archive.Record) error { n++; return nil }))
	require.Zero(t, n, "records name their namespace; another's are not handed out")

	for _, bad := range []string{"..", ".", "a/b", `a\b`, ""} {
		_, err := archive.Find(ctx, b, bad, id)
		require.ErrorContains(t, err, "cannot name a folder", bad)
	}
}
