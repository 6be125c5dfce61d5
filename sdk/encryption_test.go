package sdk_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// secret is what the encryption tests look for in the database's bytes:
// it is in every payload (input, step outputs, a blob, a signal, the
// output), so any of them stored in clear is found.
const secret = "SECRET-PASSPORT-X7Q2"

type claimForm struct {
	Applicant string `json:"applicant"`
}

// kycWorkflow handles personal data: it keeps a scan as a blob, waits for
// a reviewer's signal, and returns what it read.
var kycWorkflow = sdk.NewWorkflow("kyc.check", 1, func(ctx workflow.Context, in claimForm) (string, error) {
	scan, err := workflow.Step(ctx, "scan", func(ctx context.Context) (sdk.Blob, error) {
		return activities.PutBlob(ctx, "image/png", []byte("png bytes of "+in.Applicant))
	}, nil)
	if err != nil {
		return "", err
	}
	text, err := workflow.Step(ctx, "ocr", func(ctx context.Context) (string, error) {
		data, err := activities.GetBlob(ctx, scan)
		if err == nil {
			err = activities.Stream(ctx, "ocr", "reading "+string(data))
		}
		return "read: " + string(data) + strings.Repeat(" padding", 40), err // over the blob threshold
	}, nil)
	if err != nil {
		return "", err
	}
	note, _, err := workflow.Receive[string](ctx, "review", time.Minute)
	if err != nil {
		return "", err
	}
	return text[:40] + " / " + note, nil
}, nil)

// keysJSON is a keys file for namespace "default" with the named keys,
// the last current.
func keysJSON(t *testing.T, keys map[string][]byte, order ...string) []byte {
	t.Helper()
	var entries []seal.KeyEntry
	for _, id := range order {
		entries = append(entries, seal.KeyEntry{ID: id, Key: base64.StdEncoding.EncodeToString(keys[id])})
	}
	cfg := seal.Config{Namespaces: map[string]seal.NamespaceKeys{
		store.DefaultNamespace: {Current: order[len(order)-1], Keys: entries},
	}}
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	return data
}

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// parseKeys is the codec of keysJSON(t, keys, order...).
func parseKeys(t *testing.T, keys map[string][]byte, order ...string) *seal.Keys {
	t.Helper()
	codec, err := seal.ParseKeys(keysJSON(t, keys, order...))
	require.NoError(t, err)
	return codec
}

// oneKey is a codec for namespace "default" with one fresh key, "k1".
func oneKey(t *testing.T) *seal.Keys {
	t.Helper()
	return parseKeys(t, map[string][]byte{"k1": newKey(t)}, "k1")
}

// encryptedEnv is one store with a codec: clients with and without it, a
// worker with it, and a way to read the database's raw bytes.
type encryptedEnv struct {
	raw     store.Store // the driver, without the decorator
	client  *sdk.Client // with the codec
	blind   *sdk.Client // without it
	worker  *sdk.Worker
	rawScan func(t *testing.T, needle string) []string // where needle is found in the database, in clear
}

func newEncryptedEnv(t *testing.T, embedded bool, codec *seal.Keys) *encryptedEnv {
	t.Helper()
	return newEncryptedEnvArchiving(t, embedded, codec, "")
}

// newEncryptedEnvArchiving is newEncryptedEnv whose worker's leader archives
// to archive (a directory, "" for none) what retention removes, and whose
// clients read it there.
func newEncryptedEnvArchiving(t *testing.T, embedded bool, codec *seal.Keys, archive string) *encryptedEnv {
	t.Helper()
	ctx := context.Background()
	env := &encryptedEnv{}
	if embedded {
		dir := t.TempDir()
		lite, err := sqlitestore.Open(ctx, filepath.Join(dir, "cairn.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = lite.Close() })
		env.raw = lite
		env.rawScan = func(t *testing.T, needle string) []string {
			var found []string
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries { // the database and its write-ahead log
				data, err := os.ReadFile(filepath.Join(dir, e.Name()))
				require.NoError(t, err)
				if bytes.Contains(data, []byte(needle)) {
					found = append(found, e.Name())
				}
			}
			return found
		}
	} else {
		pg := enginetest.Store(t)
		env.raw = pg
		env.rawScan = func(t *testing.T, needle string) []string {
			var found []string
			for _, q := range []string{
				"SELECT count(*) FROM " + enginetest.TableName(pg, "events") + " WHERE data::text LIKE '%' || $1 || '%'",
				"SELECT count(*) FROM " + enginetest.TableName(pg, "tasks") + " WHERE coalesce(input::text, '') || coalesce(output::text, '') LIKE '%' || $1 || '%'",
				"SELECT count(*) FROM " + enginetest.TableName(pg, "blobs") + " WHERE position(convert_to($1, 'UTF8') in data) > 0",
				"SELECT count(*) FROM " + enginetest.TableName(pg, "stream_entries") + " WHERE position(convert_to($1, 'UTF8') in data) > 0",
			} {
				var n int
				require.NoError(t, pg.Pool().QueryRow(ctx, q, needle).Scan(&n))
				if n > 0 {
					found = append(found, q)
				}
			}
			return found
		}
	}
	var err error
	env.client = newClient(t, sdk.ClientConfig{Store: env.raw, Keys: codec, Identity: "dpo@example.com", DefaultArchive: archive})
	env.blind = newClient(t, sdk.ClientConfig{Store: env.raw, DefaultArchive: archive})
	env.worker, err = sdk.NewWorker(sdk.WorkerConfig{Store: env.raw, Keys: codec, PollInterval: 50 * time.Millisecond, BlobThreshold: 200,
		DefaultArchive: archive, RescueInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	sdk.Register(env.worker, kycWorkflow)
	require.NoError(t, env.worker.Start(ctx))
	t.Cleanup(func() { _ = env.worker.Stop(context.Background()) })
	return env
}

func onEachStoreEmbedded(t *testing.T, test func(t *testing.T, embedded bool)) {
	t.Run("PostgreSQL", func(t *testing.T) { t.Parallel(); test(t, false) })
	t.Run("SQLite", func(t *testing.T) { t.Parallel(); test(t, true) })
}

// runKYC starts the workflow, signals it once it waits, and waits for it.
func runKYC(t *testing.T, env *encryptedEnv, key string) (uuid.UUID, *sdk.TaskInfo) {
	t.Helper()
	ctx := context.Background()
	res, err := sdk.Start(ctx, env.client, kycWorkflow, claimForm{Applicant: secret}, &sdk.StartOpts{IdempotencyKey: key})
	require.NoError(t, err)
	waitForReview(t, env, res.ID)
	_, err = env.client.Signal(ctx, res.ID, "review", "approved for "+secret, nil)
	require.NoError(t, err)
	return res.ID, waitTask(t, env.client, res.ID)
}

// waitForReview waits until task id, a kycWorkflow, waits for its
// reviewer's signal.
func waitForReview(t *testing.T, env *encryptedEnv, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	enginetest.WaitFor(t, "the workflow waits for its review", func() bool {
		info, err := env.client.Get(ctx, id)
		return err == nil && info.Status == history.StatusPending && info.Attempt > 0
	})
}

// Every payload of an encrypted namespace is stored sealed, on both
// stores: the database's bytes hold the secret nowhere, while a client
// and a worker with the keys see plaintext (the workflow read its blob
// and its signal, and the history reads back whole), a client without
// them sees {"cairn_sealed": …}, and replay still equals the projection.
func TestEncryptedNamespaceStoresNoPlaintext(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		env := newEncryptedEnv(t, embedded, oneKey(t))

		id, info := runKYC(t, env, "kyc-1")
		require.Equal(t, history.StatusCompleted, info.Status, "%+v", info.LastError)
		var out string
		require.NoError(t, json.Unmarshal(info.Output, &out))
		require.Equal(t, ("read: png bytes of " + secret + strings.Repeat(" padding", 40))[:40]+" / approved for "+secret, out)

		big, err := env.client.StartDynamic(ctx, sdk.TypeRef{Name: "kyc.bulk", Version: 1}, strings.Repeat(secret+" ", 10_000), nil)
		require.NoError(t, err)
		bigInfo, err := env.client.Get(ctx, big.ID)
		require.NoError(t, err)
		require.Len(t, bigInfo.Input, 10_000*(len(secret)+1)+2, "an input kept by reference reads back whole")

		require.Empty(t, env.rawScan(t, secret), "the secret is stored in clear")
		chunks := func(c *sdk.Client) []sdk.StreamItem {
			var got []sdk.StreamItem
			for it, err := range c.Stream(ctx, id, 0, nil) {
				require.NoError(t, err)
				if it.Kind == sdk.StreamChunk {
					got = append(got, it)
				}
			}
			return got
		}
		streamed := chunks(env.client)
		require.Len(t, streamed, 1)
		require.Equal(t, "reading png bytes of "+secret, streamed[0].Text(), "a stream's chunk opens with the key")
		blindChunks := chunks(env.blind)
		require.Len(t, blindChunks, 1)
		_, sealed := history.ParseSealed(blindChunks[0].Data)
		require.True(t, sealed, "without keys a chunk reads sealed: %s", blindChunks[0].Data)

		events := taskHistory(t, env.client, id)
		require.Contains(t, string(events[0].Data.(history.TaskScheduledData).Input), secret)
		signals := eventsOf[history.SignalReceivedData](events)
		require.Len(t, signals, 1)
		require.Equal(t, `"approved for `+secret+`"`, string(signals[0].Payload))
		steps := eventsOf[history.StepCompletedData](events)
		require.Len(t, steps, 2)
		require.Contains(t, string(steps[1].Output), secret, "History resolves the sealed blob")
		rawEvents, err := env.client.RawHistory(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, eventsOf[history.StepCompletedData](rawEvents)[1].OutputRef, "the ocr output is over the blob threshold")

		blindEvents, err := env.blind.RawHistory(ctx, id)
		require.NoError(t, err)
		_, sealed = history.ParseSealed(blindEvents[0].Data.(history.TaskScheduledData).Input)
		require.True(t, sealed, "without keys the input reads sealed: %s", blindEvents[0].Data.(history.TaskScheduledData).Input)
		blindInfo, err := env.blind.Get(ctx, id)
		require.NoError(t, err)
		_, sealed = history.ParseSealed(blindInfo.Output)
		require.True(t, sealed, "without keys the output reads sealed: %s", blindInfo.Output)

		// The same start again is the same task: the sealed inputs are
		// compared by their keyed digests (RefuseKeyReuse).
		again, err := sdk.Start(ctx, env.client, kycWorkflow, claimForm{Applicant: secret}, &sdk.StartOpts{IdempotencyKey: "kyc-1"})
		require.NoError(t, err)
		require.Equal(t, id, again.ID)
		require.True(t, again.Existing)
		_, err = sdk.Start(ctx, env.client, kycWorkflow, claimForm{Applicant: "someone else"}, &sdk.StartOpts{IdempotencyKey: "kyc-1"})
		require.ErrorIs(t, err, sdk.ErrIdempotencyKeyReused)

		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(env.client))
	})
}

// Erasing a finished task destroys its data key: its events stay, with
// task_erased saying who and why, while every payload, the blob too,
// stays sealed even for a client with the keys. A running task is not
// erased, an erased one is neither retried nor compensated, and a task of
// a namespace without encryption has nothing to shred.
func TestEraseShredsAFinishedTasksPayloads(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		codec := oneKey(t)
		env := newEncryptedEnv(t, embedded, codec)

		waiting, err := sdk.Start(ctx, env.client, kycWorkflow, claimForm{Applicant: "pending"}, nil)
		require.NoError(t, err)
		waitForReview(t, env, waiting.ID)
		err = env.client.Erase(ctx, waiting.ID, "too early")
		require.ErrorIs(t, err, store.ErrTaskState)
		require.Contains(t, err.Error(), "only a finished task can be erased")

		id, info := runKYC(t, env, "kyc-erase")
		require.Equal(t, history.StatusCompleted, info.Status)
		steps := eventsOf[history.StepCompletedData](taskHistory(t, env.client, id))
		scan := steps[0]
		var ref sdk.Blob
		require.NoError(t, json.Unmarshal(scan.Output, &ref))
		_, err = env.client.GetBlob(ctx, ref)
		require.NoError(t, err)
		before := len(taskHistory(t, env.client, id))

		hasChunks := func() bool {
			for it, err := range env.client.Stream(ctx, id, 0, nil) {
				require.NoError(t, err)
				if it.Kind == sdk.StreamChunk {
					return true
				}
			}
			return false
		}
		require.True(t, hasChunks(), "the ocr step streamed")
		require.NoError(t, env.client.Erase(ctx, id, "GDPR art. 17 request #42"))
		require.False(t, hasChunks(), "an erasure removes the task's stream entries")

		raw, err := env.client.RawHistory(ctx, id)
		require.NoError(t, err)
		require.Len(t, raw, before+1, "the events stay, one more")
		erased, ok := raw[len(raw)-1].Data.(history.TaskErasedData)
		require.True(t, ok, "%T", raw[len(raw)-1].Data)
		require.Equal(t, history.TaskErasedData{By: "dpo@example.com", Reason: "GDPR art. 17 request #42"}, erased)
		_, sealed := history.ParseSealed(raw[0].Data.(history.TaskScheduledData).Input)
		require.True(t, sealed, "the input reads sealed after the erasure, keys or not")
		for _, e := range raw {
			if sig, ok := e.Data.(history.SignalReceivedData); ok {
				_, sealed := history.ParseSealed(sig.Payload)
				require.True(t, sealed, "the signal payload reads sealed after the erasure")
			}
		}
		got, err := env.client.Get(ctx, id)
		require.NoError(t, err)
		_, sealed = history.ParseSealed(got.Output)
		require.True(t, sealed, "the output reads sealed after the erasure: %s", got.Output)
		require.Equal(t, history.StatusCompleted, got.Status, "the outcome stays")
		_, err = env.client.GetBlob(ctx, ref)
		require.ErrorIs(t, err, payload.ErrSealed, "the blob is shredded with the task")

		require.NoError(t, env.client.Erase(ctx, id, "again"), "erasing twice changes nothing")
		require.Len(t, taskHistory(t, env.client, id), before+1)
		require.ErrorIs(t, env.client.Compensate(ctx, id, "undo"), store.ErrTaskState)
		require.Empty(t, env.rawScan(t, secret))
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(env.client))

		other := newClient(t, sdk.ClientConfig{Store: env.raw, Namespace: "plain", Keys: codec})
		plain, err := other.StartDynamic(ctx, sdk.TypeRef{Name: "kyc.unregistered", Version: 1}, map[string]string{"a": "b"}, nil)
		require.NoError(t, err)
		require.NoError(t, other.Cancel(ctx, plain.ID, "not needed"))
		err = other.Erase(ctx, plain.ID, "nothing to shred")
		require.ErrorIs(t, err, store.ErrTaskState)
		require.Contains(t, err.Error(), "no data key")
	})
}

// A key rotation: tasks started after the current key changed are sealed
// with the new key, those before stay readable while the old key is
// listed, and a codec without the old key reads them sealed.
func TestKeyRotationKeepsOldTasksReadable(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		keys := map[string][]byte{"2026-11": newKey(t), "2026-12": newKey(t)}
		old := parseKeys(t, keys, "2026-11")
		env := newEncryptedEnv(t, embedded, old)
		first, _ := runKYC(t, env, "kyc-before")

		rotated := parseKeys(t, keys, "2026-11", "2026-12")
		c := newClient(t, sdk.ClientConfig{Store: env.raw, Keys: rotated})
		second, err := sdk.Start(ctx, c, kycWorkflow, claimForm{Applicant: secret + "-2"}, nil)
		require.NoError(t, err)

		wrapped, err := env.raw.TaskDataKeys(ctx, &store.TaskDataKeysParams{Namespace: store.DefaultNamespace, IDs: []uuid.UUID{first, second.ID}})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(wrapped[first]), "ck1:2026-11:"), "the first task's key is wrapped by the old key")
		require.True(t, strings.HasPrefix(string(wrapped[second.ID]), "ck1:2026-12:"), "the second task's key is wrapped by the new key")
		for _, id := range []uuid.UUID{first, second.ID} {
			info, err := c.Get(ctx, id)
			require.NoError(t, err)
			require.Contains(t, string(info.Input), secret, "the rotated codec reads task %s", id)
		}

		newOnly := parseKeys(t, map[string][]byte{"2026-12": keys["2026-12"]}, "2026-12")
		c2 := newClient(t, sdk.ClientConfig{Store: env.raw, Keys: newOnly})
		info, err := c2.Get(ctx, first)
		require.NoError(t, err)
		_, sealed := history.ParseSealed(info.Input)
		require.True(t, sealed, "without the old key the first task reads sealed")
		info, err = c2.Get(ctx, second.ID)
		require.NoError(t, err)
		require.Contains(t, string(info.Input), secret)
	})
}

// Keys files are checked when they are read, with errors that say what is
// wrong.
func TestParseKeysRefusesBadKeys(t *testing.T) {
	t.Parallel()
	good := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, c := range []struct{ json, want string }{
		{`{"namespaces":{"default":{"current":"a","keys":[]}}}`, "no keys"},
		{`{"namespaces":{"default":{"current":"b","keys":[{"id":"a","key":"` + good + `"}]}}}`, `current key "b" is not among the keys listed`},
		{`{"namespaces":{"default":{"current":"a","keys":[{"id":"a","key":"c2hvcnQ="}]}}}`, "must be 32 bytes of base64"},
		{`{"namespaces":{"default":{"current":"a:b","keys":[{"id":"a:b","key":"` + good + `"}]}}}`, "without ':'"},
		{`{"namespaces":{"default":{"current":"a","keys":[{"id":"a","key":"` + good + `"},{"id":"a","key":"` + good + `"}]}}}`, "listed twice"},
		{`{"namespace":{}}`, "unknown field"},
	} {
		_, err := seal.ParseKeys([]byte(c.json))
		require.ErrorContains(t, err, c.want, c.json)
	}
}

// Retention archives an encrypted task as the database held it: sealed,
// with its wrapped data key. A client with the keys reads the archived
// history in clear, one without reads it sealed, an erased task's stays
// sealed, and the archive's bytes hold the secret nowhere.
func TestEncryptedTasksAreArchivedSealed(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		dir := t.TempDir()
		env := newEncryptedEnvArchiving(t, embedded, oneKey(t), "file://"+filepath.ToSlash(dir))
		kept, _ := runKYC(t, env, "kyc-kept")
		erased, _ := runKYC(t, env, "kyc-erased")
		require.NoError(t, env.client.Erase(ctx, erased, "closed account"))
		require.NoError(t, env.client.SetNamespace(ctx, store.DefaultNamespace, sdk.NamespaceSettings{Retention: time.Millisecond}))
		for _, id := range []uuid.UUID{kept, erased} {
			require.Eventually(t, func() bool {
				_, err := env.raw.TaskGet(ctx, &store.TaskGetParams{Namespace: store.DefaultNamespace, ID: id})
				return err != nil
			}, 10*time.Second, 20*time.Millisecond, "task %s is removed", id)
		}

		events, err := env.client.History(ctx, kept)
		require.NoError(t, err)
		require.Contains(t, string(events[0].Data.(history.TaskScheduledData).Input), secret, "opened from the archive")
		blind, err := env.blind.History(ctx, kept)
		require.NoError(t, err)
		_, sealed := history.ParseSealed(blind[0].Data.(history.TaskScheduledData).Input)
		require.True(t, sealed, "without keys the archived input reads sealed")
		gone, err := env.client.History(ctx, erased)
		require.NoError(t, err)
		_, sealed = history.ParseSealed(gone[0].Data.(history.TaskScheduledData).Input)
		require.True(t, sealed, "an erased task's archived input stays sealed")
		require.Equal(t, history.TaskErased, gone[len(gone)-1].Type())

		// The blobs went to the archive with their histories: the ocr
		// output (kept by reference) and the scan read back, opened.
		steps := eventsOf[history.StepCompletedData](events)
		require.Contains(t, string(steps[1].Output), secret, "the archived blob of the ocr output, opened")
		var scan sdk.Blob
		require.NoError(t, json.Unmarshal(steps[0].Output, &scan))
		data, err := env.client.GetBlob(ctx, scan)
		require.NoError(t, err)
		require.Equal(t, "png bytes of "+secret, string(data))
		_, err = env.blind.GetBlob(ctx, scan)
		require.ErrorIs(t, err, payload.ErrSealed, "without keys an archived blob stays sealed")

		var histories, blobs int
		require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			if strings.HasSuffix(path, ".blob") {
				blobs++
			} else {
				histories++
				zr, err := gzip.NewReader(bytes.NewReader(data))
				require.NoError(t, err)
				if data, err = io.ReadAll(zr); err != nil {
					return err
				}
			}
			require.NotContains(t, string(data), secret, path)
			return nil
		}))
		require.Positive(t, histories)
		require.Equal(t, 4, blobs, "two blobs of each task: the scan and the ocr output")
	})
}

type amount struct {
	Cents int `json:"cents"`
}

var (
	payoutChild = sdk.NewWorkflow("payout.amount", 1, func(ctx workflow.Context, in claimForm) (amount, error) {
		return amount{Cents: 4200}, nil
	}, &sdk.WorkflowOpts{Queue: "children"})
	payoutParent = sdk.NewWorkflow("payout.run", 1, func(ctx workflow.Context, in claimForm) (int, error) {
		a, err := workflow.StartChild(ctx, payoutChild, in, nil).Result(ctx)
		return a.Cents, err
	}, &sdk.WorkflowOpts{Queue: "parents", Retry: &activities.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond}})
)

// A parent whose finished child was erased before it read the child's
// output does not read a zero value: its run ends with an error saying the
// output is encrypted, and it never completes with a made-up amount.
func TestParentDoesNotReadAnErasedChildsOutput(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		codec := oneKey(t)
		env := newEncryptedEnv(t, embedded, codec)
		newWorker := func(queue string) *sdk.Worker {
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: env.raw, Keys: codec, Queues: []string{queue}, PollInterval: 20 * time.Millisecond})
			require.NoError(t, err)
			sdk.Register(w, payoutParent)
			sdk.Register(w, payoutChild)
			require.NoError(t, w.Start(ctx))
			return w
		}
		parents := newWorker("parents")
		res, err := sdk.Start(ctx, env.client, payoutParent, claimForm{Applicant: secret}, nil)
		require.NoError(t, err)
		enginetest.WaitFor(t, "the parent awaits its child", func() bool {
			return slices.Contains(eventTypesOf(t, env.client, res.ID), history.ChildWaitStarted)
		})
		require.NoError(t, parents.Stop(ctx))
		children := newWorker("children")
		t.Cleanup(func() { _ = children.Stop(context.Background()) })
		events := taskHistory(t, env.client, res.ID)
		child := eventsOf[history.ChildStartedData](events)[0].ChildID
		childInfo := waitTask(t, env.client, uuid.MustParse(child))
		require.Equal(t, history.StatusCompleted, childInfo.Status)
		require.NoError(t, env.client.Erase(ctx, childInfo.ID, "erased before the parent read it"))

		parents = newWorker("parents")
		t.Cleanup(func() { _ = parents.Stop(context.Background()) })
		info := waitTask(t, env.client, res.ID)
		require.NotEqual(t, history.StatusCompleted, info.Status, "the parent did not complete on a zero value")
		require.NotNil(t, info.LastError)
		require.Contains(t, info.LastError.Message, "the output of child 0 is encrypted")
	})
}

// Review findings, each a way a payload could reach the database in clear
// or be lost: a signal from a process without the task's key id, a start
// through a client with other keys, a value shaped like a sealed one, and
// a blob written before encryption (read back as it is). That every write
// of the SDK passes through the payload stage is by construction (the
// sdk's edge alone holds the store's payload-writing methods, and they
// take only what the stage encoded: TestOnlyTheEdgeWritesPayloads); this
// proves the stage itself lets nothing through.
func TestSealingHasNoBackDoors(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		keys := map[string][]byte{"k1": newKey(t), "k2": newKey(t)}
		rotated := parseKeys(t, keys, "k1", "k2")
		old := parseKeys(t, keys, "k1")
		env := newEncryptedEnv(t, embedded, rotated)

		waiting, err := sdk.Start(ctx, env.client, kycWorkflow, claimForm{Applicant: "a"}, nil)
		require.NoError(t, err)
		waitForReview(t, env, waiting.ID)
		behind := newClient(t, sdk.ClientConfig{Store: env.raw, Keys: old})
		_, err = behind.Signal(ctx, waiting.ID, "review", "note "+secret, nil)
		require.ErrorIs(t, err, payload.ErrSealed, "a process without the task's key id writes nothing")

		// A client over another client's store, with other keys: its own
		// stage seals, and another process opens.
		c := newClient(t, sdk.ClientConfig{Store: sdk.ClientStore(env.client), Keys: old})
		res, err := c.StartDynamic(ctx, sdk.TypeRef{Name: "kyc.other", Version: 1}, map[string]string{"a": secret}, nil)
		require.NoError(t, err)
		fresh := newClient(t, sdk.ClientConfig{Store: env.raw, Keys: rotated})
		info, err := fresh.Get(ctx, res.ID)
		require.NoError(t, err)
		require.Contains(t, string(info.Input), secret, "a start through another client opens in another process")

		shaped := json.RawMessage(`{"cairn_sealed":{"v":1,"task":"x","data":"AA=="},"ssn":"` + secret + `"}`)
		_, err = env.client.StartDynamic(ctx, sdk.TypeRef{Name: "kyc.other", Version: 1}, shaped, nil)
		require.ErrorIs(t, err, sdk.ErrInvalid, "the client refuses a payload shaped like a sealed one")
		// A step's output and a workflow's shaped like one are sealed all
		// the same.
		echo := sdk.NewWorkflow("kyc.shaped", 1, func(ctx workflow.Context, _ struct{}) (json.RawMessage, error) {
			return workflow.Step(ctx, "echo", func(context.Context) (json.RawMessage, error) { return shaped, nil }, nil)
		}, &sdk.WorkflowOpts{Queue: "shaped"})
		w, err := sdk.NewWorker(sdk.WorkerConfig{Store: env.raw, Keys: rotated, Queues: []string{"shaped"}, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		sdk.Register(w, echo)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		lookalike, err := sdk.Start(ctx, env.client, echo, struct{}{}, nil)
		require.NoError(t, err)
		info = waitTask(t, env.client, lookalike.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "%+v", info.LastError)
		require.Contains(t, string(info.Output), secret, "the worker's stage sealed it all the same")

		require.Empty(t, env.rawScan(t, secret), "the secret is stored in clear")

		plainNS := newClient(t, sdk.ClientConfig{Store: env.raw})
		before, err := plainNS.StartDynamic(ctx, sdk.TypeRef{Name: "kyc.other", Version: 1}, nil, nil)
		require.NoError(t, err)
		ref := putPlainBlob(t, env.raw, store.DefaultNamespace, before.ID, "text/plain", []byte("written before encryption"))
		data, err := env.client.GetBlob(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, "written before encryption", string(data))
	})
}

// The events after a seq (a page of a history that lacks the
// task_scheduled naming the namespace) open as the whole log's do, in a
// client that has read nothing of the task before: the signal's payload
// reads in clear.
func TestSealedEventsAfterASeqOpen(t *testing.T) {
	t.Parallel()
	onEachStoreEmbedded(t, func(t *testing.T, embedded bool) {
		ctx := context.Background()
		codec := oneKey(t)
		env := newEncryptedEnv(t, embedded, codec)
		id, info := runKYC(t, env, "kyc-after")
		require.Equal(t, history.StatusCompleted, info.Status, "%+v", info.LastError)

		whole, err := env.client.RawHistory(ctx, id)
		require.NoError(t, err)
		var signalSeq int64
		for _, e := range whole {
			if _, ok := e.Data.(history.SignalReceivedData); ok {
				signalSeq = e.Seq
			}
		}
		require.NotZero(t, signalSeq)
		raw, err := env.raw.EventList(ctx, &store.EventListParams{After: map[uuid.UUID]int64{id: signalSeq - 1}})
		require.NoError(t, err)
		_, sealed := history.ParseSealed(raw[id][0].Data.(history.SignalReceivedData).Payload)
		require.True(t, sealed, "the database holds the signal sealed")

		// A client of its own: no data key cached from the reads above.
		other := newClient(t, sdk.ClientConfig{Store: env.raw, Keys: codec})
		after, err := other.RawHistoryPage(ctx, id, sdk.HistoryPageOpts{After: signalSeq - 1})
		require.NoError(t, err)
		require.Equal(t, whole[signalSeq-1:], after.Events)
		require.Equal(t, `"approved for `+secret+`"`, string(after.Events[0].Data.(history.SignalReceivedData).Payload))
	})
}
