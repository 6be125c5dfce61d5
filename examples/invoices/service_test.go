package invoices_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/examples/invoices"
	"github.com/cairnflow/cairn/internal/doccheck"
	"github.com/cairnflow/cairn/sdk"
)

// TestGettingStartedShowsThisCode holds docs/getting-started.md to the
// service's code.
func TestGettingStartedShowsThisCode(t *testing.T) {
	require.NoError(t, doccheck.Check("../../docs/getting-started.md", "../.."))
}

// TestServiceOnBothStores runs the service of the getting-started page as
// a client of it would: upload, look, approve, read the result; and an
// invoice without a total, which is dead-lettered with its reason.
func TestServiceOnBothStores(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		store, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "invoices.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close() })
		testService(t, sdk.ClientConfig{Store: store}, sdk.WorkerConfig{Store: store})
	})
	t.Run("postgres", func(t *testing.T) {
		pool, schema := enginetest.Pool(t), enginetest.Schema(t)
		testService(t, sdk.ClientConfig{Pool: pool, Schema: schema}, sdk.WorkerConfig{Pool: pool, Schema: schema})
	})
}

func testService(t *testing.T, clientCfg sdk.ClientConfig, workerCfg sdk.WorkerConfig) {
	ctx := context.Background()
	client, err := sdk.NewClient(clientCfg)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	worker, err := invoices.NewWorker(workerCfg)
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(context.Background())) })
	api := httptest.NewServer(invoices.Handler(client))
	t.Cleanup(api.Close)

	upload := invoices.Invoice{ID: "inv-7", Pages: []string{"acme ltd, 1 main st", "total 42 EUR"}}
	var started struct {
		TaskID string `json:"task_id"`
	}
	call(t, api, "POST", "/invoices", upload, http.StatusAccepted, &started)
	var again struct {
		TaskID string `json:"task_id"`
	}
	call(t, api, "POST", "/invoices", upload, http.StatusAccepted, &again)
	require.Equal(t, started.TaskID, again.TaskID, "a retried upload is the same task")

	var running struct{ Status string }
	call(t, api, "GET", "/invoices/"+started.TaskID, nil, http.StatusAccepted, &running)
	require.NotEmpty(t, running.Status)

	call(t, api, "POST", "/invoices/"+started.TaskID+"/approval", map[string]any{"approved": true, "comment": "matches the PO"}, http.StatusAccepted, nil)
	var done struct {
		Status string
		Result invoices.Result
	}
	waitFinished(t, api, started.TaskID, &done)
	require.Equal(t, "completed", done.Status)
	require.Equal(t, invoices.Result{ID: "inv-7", Total: "42 EUR", Approved: true, Comment: "matches the PO"}, done.Result)

	var bad struct {
		TaskID string `json:"task_id"`
	}
	call(t, api, "POST", "/invoices", invoices.Invoice{ID: "inv-8", Pages: []string{"no amount here"}}, http.StatusAccepted, &bad)
	var failed struct{ Status, Error string }
	waitFinished(t, api, bad.TaskID, &failed)
	require.Equal(t, "dead_lettered", failed.Status)
	require.Contains(t, failed.Error, "no total on 1 pages")

	call(t, api, "POST", "/invoices/"+bad.TaskID+"/approval", map[string]any{"approved": true}, http.StatusConflict, nil)
}

// call sends body as JSON to path, requires status, and decodes the answer
// into out (unless nil).
func call(t *testing.T, api *httptest.Server, method, path string, body any, status int, out any) {
	t.Helper()
	var buf bytes.Buffer
	if body != nil {
		require.NoError(t, json.NewEncoder(&buf).Encode(body))
	}
	req, err := http.NewRequest(method, api.URL+path, &buf)
	require.NoError(t, err)
	resp, err := api.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, status, resp.StatusCode, "%s %s", method, path)
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
}

// waitFinished polls GET /invoices/{id} until it answers 200 (the task
// finished), decoding the answer into out.
func waitFinished(t *testing.T, api *httptest.Server, id string, out any) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := api.Client().Get(api.URL + "/invoices/" + id)
		require.NoError(t, err)
		if resp.StatusCode == http.StatusOK {
			defer resp.Body.Close()
			require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
			return
		}
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		require.True(t, time.Now().Before(deadline), "task %s did not finish in a minute", id)
		time.Sleep(50 * time.Millisecond)
	}
}
