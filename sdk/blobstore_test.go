package sdk_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/s3test"
	"github.com/cairnflow/cairn/payload/offload"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// With a blob store, blobs keep their bytes in a directory or an
// S3-compatible bucket (a real S3-protocol server on loopback) instead of
// the database: the row names the location and holds no data; every
// client reads them, with or without a blob store of its own; an input by
// reference goes there too; an encrypted namespace's objects are sealed;
// retention deletes the objects with their tasks. On both stores.
func TestBlobStoresKeepTheBytesOutOfTheDatabase(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		for name, location := range map[string]string{
			"directory": "file://" + filepath.ToSlash(t.TempDir()),
			"S3":        s3test.Start(t, "blobs", "cairn"),
		} {
			t.Run(name, func(t *testing.T) {
				codec, err := seal.ParseKeys(keysJSON(t, map[string][]byte{"k1": newKey(t)}, "k1"))
				require.NoError(t, err)
				// One location for the blob store and the archive: their
				// object names must not meet.
				b := setup(t, sdk.WorkerConfig{BlobStore: location, DefaultArchive: location, BlobThreshold: 100,
					RescueInterval: 20 * time.Millisecond, Keys: codec})
				wf := sdk.NewWorkflow("scan.keep", 1, func(ctx workflow.Context, in string) (sdk.Blob, error) {
					if _, err := workflow.Step(ctx, "ocr", func(context.Context) (string, error) { return strings.Repeat("text ", 100), nil }, nil); err != nil {
						return sdk.Blob{}, err
					}
					return workflow.Step(ctx, "keep", func(ctx context.Context) (sdk.Blob, error) {
						return activities.PutBlob(ctx, "image/png", []byte("png of "+secret+" "+in[:10]))
					}, nil)
				}, nil)
				sdk.Register(b.worker, wf)
				startWorker(t, b.worker)
				ctx := context.Background()
				writer, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), BlobStore: location, Keys: codec})
				require.NoError(t, err)
				t.Cleanup(writer.Close)
				input := strings.Repeat("scan ", 30_000) // by reference, into the blob store
				res, err := sdk.Start(ctx, writer, wf, input, nil)
				require.NoError(t, err)
				ref, err := res.Result(ctx)
				require.NoError(t, err)

				row, err := sdk.ClientStore(b.client).BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: ref.Key})
				require.NoError(t, err)
				require.Equal(t, location, row.Location)
				// The database's row itself: the location, the size, no data.
				var dataLen, size int64
				if b.store != nil {
					raw, err := b.store.BlobGet(ctx, &store.BlobGetParams{Namespace: store.DefaultNamespace, Key: ref.Key})
					require.NoError(t, err)
					dataLen, size = int64(len(raw.Data)), raw.Length()
				} else {
					require.NoError(t, b.pool.QueryRow(ctx, "SELECT length(data), size FROM "+pgx.Identifier{b.schema, "blobs"}.Sanitize()+" WHERE key = $1", ref.Key).Scan(&dataLen, &size))
				}
				require.Zero(t, dataLen, "the row holds no data")
				require.Positive(t, size, "but the blob's size")
				data, err := writer.GetBlob(ctx, ref)
				require.NoError(t, err)
				require.Equal(t, "png of "+secret+" scan scan ", string(data))
				reader, err := sdk.NewClient(sdk.ClientConfig{Store: sdk.ClientStore(b.client), Keys: codec})
				require.NoError(t, err)
				t.Cleanup(reader.Close)
				data, err = reader.GetBlob(ctx, ref)
				require.NoError(t, err, "a client without a blob store reads where the row says")
				require.Equal(t, "png of "+secret+" scan scan ", string(data))
				raw, err := reader.RawHistory(ctx, res.ID)
				require.NoError(t, err)
				inRef, ok := history.ParseBlobEnvelope(raw[0].Data.(history.TaskScheduledData).Input)
				require.True(t, ok)
				info, err := reader.Get(ctx, res.ID)
				require.NoError(t, err)
				require.Equal(t, `"`+input+`"`, string(info.Input))

				object, err := offload.Object(ctx, location, store.DefaultNamespace, res.ID, ref.Key)
				require.NoError(t, err, "the bytes are in the blob store")
				require.True(t, seal.BlobSealed(object), "sealed before they left")
				require.NotContains(t, string(object), secret)
				_, err = offload.Object(ctx, location, store.DefaultNamespace, res.ID, inRef.Key)
				require.NoError(t, err, "the input kept by reference too")

				require.NoError(t, b.client.SetNamespace(ctx, store.DefaultNamespace, sdk.NamespaceSettings{Retention: time.Millisecond}))
				require.Eventually(t, func() bool {
					_, err := b.client.Get(ctx, res.ID)
					return errors.Is(err, sdk.ErrNotFound)
				}, 10*time.Second, 20*time.Millisecond, "retention removes the task")
				for _, key := range []string{ref.Key, inRef.Key} {
					// The objects go right after the removal commits.
					require.Eventually(t, func() bool {
						_, err := offload.Object(ctx, location, store.DefaultNamespace, res.ID, key)
						return err != nil
					}, 10*time.Second, 20*time.Millisecond, "retention deletes the blob store's object %s", key)
				}
				data, err = reader.GetBlob(ctx, ref)
				require.NoError(t, err, "the archived copy, in the same location, outlives the blob store's object")
				require.Equal(t, "png of "+secret+" scan scan ", string(data))

				// Retention of a millisecond would remove the next task, and its
				// object, as soon as it finished: before the check below.
				require.NoError(t, b.client.SetNamespace(ctx, store.DefaultNamespace, sdk.NamespaceSettings{Retention: 24 * time.Hour}))
				again, err := sdk.Start(ctx, writer, wf, input, &sdk.StartOpts{IdempotencyKey: "once"})
				require.NoError(t, err)
				dup, err := sdk.Start(ctx, writer, wf, input, &sdk.StartOpts{IdempotencyKey: "once"})
				require.NoError(t, err)
				require.True(t, dup.Existing)
				raw, err = reader.RawHistory(ctx, again.ID)
				require.NoError(t, err)
				kept, _ := history.ParseBlobEnvelope(raw[0].Data.(history.TaskScheduledData).Input)
				_, err = offload.Object(ctx, location, store.DefaultNamespace, again.ID, kept.Key)
				require.NoError(t, err, "the first start's input object stays")
			})
		}
	})
}
