package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/cairnflow/cairn/sdk"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/s3test"
	"github.com/cairnflow/cairn/payload"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// GET /v1/tasks/{id}/history answers for a task retention archived and
// removed with the same bytes it answered before, from a namespace's own
// archive (an S3-protocol server) and from the server's default (a
// directory), on both stores.
func TestHistoryOfAnArchivedTaskIsTheSameOverHTTP(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := "file://" + filepath.ToSlash(t.TempDir())
			s3 := s3test.Start(t, "archive", "cairn")
			require.NoError(t, st.Store.NamespaceSet(ctx, &store.NamespaceSetParams{Namespace: "on-s3", Archive: s3}))
			srv, err := New(Config{Store: st.Store, DefaultArchive: dir})
			require.NoError(t, err)
			h := srv.Handler()

			ids := map[string]string{}
			before := map[string][]byte{}
			for _, ns := range []string{"default", "on-s3"} {
				id := finishTask(t, st.Store, ns)
				ids[ns] = id
				a := servertest.Send(t, h, "GET", "/v1/tasks/"+id+"/history?namespace="+ns, nil)
				require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
				before[ns] = a.Body
			}
			r, err := sdk.NewMaintainer(sdk.MaintainerConfig{Store: st.Store, Owner: "leader", Interval: 20 * time.Millisecond,
				Logger: enginetest.Logger(t), DefaultRetention: time.Millisecond, DefaultArchive: dir})
			require.NoError(t, err)
			require.NoError(t, r.Start(ctx))
			t.Cleanup(r.Stop)
			for ns, id := range ids {
				enginetest.WaitFor(t, "the task of "+ns+" removed", func() bool {
					return servertest.Send(t, h, "GET", "/v1/tasks/"+id+"?namespace="+ns, nil).Status == http.StatusNotFound
				})
				after := servertest.Send(t, h, "GET", "/v1/tasks/"+id+"/history?namespace="+ns, nil)
				require.Equal(t, http.StatusOK, after.Status, "%s", after.Body)
				require.Equal(t, string(before[ns]), string(after.Body), "the archived history of %s, byte for byte", ns)
			}
			other := servertest.Send(t, h, "GET", "/v1/tasks/"+ids["on-s3"]+"/history?namespace=default", nil)
			require.Equal(t, http.StatusNotFound, other.Status, "another namespace's archived task is not found")
		})
	}
}

// finishTask starts a task of type doc in namespace, runs one step and
// completes it, and returns its id.
func finishTask(t *testing.T, s store.Store, namespace string) string {
	t.Helper()
	ctx := context.Background()
	servertest.RegisterDoc(t, s, namespace)
	res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: namespace, Scheduled: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "default", MaxAttempts: 3, Input: []byte(`{"invoice":"n°7"}`)}})
	require.NoError(t, err)
	claimedRes, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: namespace, Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	claimed := claimedRes.Tasks
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0]
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
		Attempt: c.State.Attempt, Payloads: []history.Payload{
			history.StepCompletedData{Position: 0, Name: "ocr", Output: []byte(`{"text":"total 12,50 €"}`)},
			history.TaskCompletedData{Output: []byte(`{"total":12.5}`)}}})
	require.NoError(t, err)
	return res.ID.String()
}

// GET /v1/blobs/{key} sends a blob's bytes with its content type, on both
// stores; a damaged blob is a 500 naming it, never the wrong bytes; another
// namespace's blob is not found.
func TestBlobDownload(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			id, err := uuid.Parse(finishTask(t, st.Store, "default"))
			require.NoError(t, err)
			data := bytes.Repeat([]byte("%PDF\x00\xff"), 50_000)
			ref := putBlob(t, st.Store, "default", id, "application/pdf", data)
			h := testServer(t, st.Store)
			got := servertest.Send(t, h, "GET", "/v1/blobs/"+ref.Key, nil)
			require.Equal(t, http.StatusOK, got.Status)
			require.True(t, bytes.Equal(data, got.Body))
			require.Equal(t, http.StatusNotFound, servertest.Send(t, h, "GET", "/v1/blobs/"+ref.Key+"?namespace=other", nil).Status)

			damage(t, st.Store, ref.Key)
			bad := servertest.Send(t, h, "GET", "/v1/blobs/"+ref.Key, nil)
			require.Equal(t, http.StatusInternalServerError, bad.Status)
			require.Equal(t, "blob_corrupt", bad.Problem.Code)
			require.Contains(t, bad.Problem.Detail, "blob "+ref.Key+" of task "+id.String()+" is damaged")
		})
	}
}

// damage overwrites a blob's bytes with others of the same length.
func damage(t *testing.T, s store.Store, key string) {
	t.Helper()
	ctx := context.Background()
	switch s := s.(type) {
	case *sqlitestore.Store:
		_, err := s.DB().ExecContext(ctx, `UPDATE blobs SET data = zeroblob(length(data)) WHERE key = ?`, key)
		require.NoError(t, err)
	case *pgstore.Store:
		_, err := s.Pool().Exec(ctx, `UPDATE `+enginetest.TableName(s, "blobs")+` SET data = overlay(data PLACING '\x00'::bytea FROM 7 FOR 1) WHERE key = $1`, key)
		require.NoError(t, err)
	default:
		t.Fatalf("no way to damage a blob in %T", s)
	}
}

// An output kept as a blob is answered by reference over HTTP (a link,
// not the bytes: {"cairn_blob": …}, downloaded from GET /v1/blobs/{key}),
// and the console's task page shows its size with a download link that
// sends the bytes. On both stores.
func TestOutputKeptAsABlobIsALink(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			servertest.RegisterDoc(t, st.Store, "default")
			id := uuid.Must(uuid.NewV7())
			input := []byte(`"` + strings.Repeat("scanned page\n", 8_000) + `"`)
			inRef, inBlob, err := payload.NewBlob("default", id, "application/json", input)
			require.NoError(t, err)
			res, err := st.Store.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", ID: id, Blobs: []*store.Blob{{
				Namespace: inBlob.Namespace, Key: inBlob.Key, TaskID: inBlob.TaskID, ContentType: inBlob.ContentType, SHA256: inBlob.SHA256, Data: inBlob.Data}},
				Scheduled: history.TaskScheduledData{TaskType: "doc", TypeVersion: 1, Queue: "default", MaxAttempts: 3,
					Input: history.InputEnvelope(inRef, strings.Repeat("0", 64))}})
			require.NoError(t, err)
			claimedRes, err := st.Store.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"default"},
				Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
			claimed := claimedRes.Tasks
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			c := claimed[0]
			output := []byte(`"` + strings.Repeat("report line\n", 10_000) + `"`)
			ref := putBlob(t, st.Store, "default", res.ID, "application/json", output)
			_, err = st.Store.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
				Attempt: c.State.Attempt, Payloads: []history.Payload{history.TaskCompletedData{Output: history.BlobEnvelope(ref)}}})
			require.NoError(t, err)

			h := testServer(t, st.Store)
			got := servertest.Send(t, h, "GET", "/v1/tasks/"+res.ID.String(), nil)
			require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
			var info struct {
				Output json.RawMessage `json:"output"`
			}
			require.NoError(t, json.Unmarshal(got.Body, &info))
			linked, ok := history.ParseBlobEnvelope(info.Output)
			require.True(t, ok, "the API answers the reference: %s", info.Output)
			require.Equal(t, ref, linked)

			page := servertest.SendHTML(t, h, "/console/tasks/"+res.ID.String(), http.StatusOK)
			require.Contains(t, page, fmt.Sprintf("Kept as a blob: %d bytes (application/json)", len(output)))
			require.Contains(t, page, fmt.Sprintf("Kept as a blob: %d bytes (application/json)", len(input)), "the input's link too")
			require.Contains(t, page, `href="/console/blobs/`+inRef.Key+`?namespace=default"`)
			link := "/console/blobs/" + ref.Key + "?namespace=default"
			require.Contains(t, page, `href="`+link+`"`)
			r := httptest.NewRequest(http.MethodGet, link, nil)
			r.Host = "localhost"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
			require.Equal(t, output, w.Body.Bytes())
			require.Equal(t, "attachment", w.Header().Get("Content-Disposition"))
		})
	}
}
