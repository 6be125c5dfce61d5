package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// fakeCRM is an HTTP CRM: contacts listed in outages answer 503 that many
// times before they succeed; a request without the current token gets 401.
type fakeCRM struct {
	mu      sync.Mutex
	outages map[string]int
	token   string
	calls   map[string]int
}

func (c *fakeCRM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	contact := strings.TrimPrefix(r.URL.Path, "/contacts/")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[contact]++
	switch {
	case r.Header.Get("Authorization") != "Bearer "+c.token:
		http.Error(w, "invalid token", http.StatusUnauthorized)
	case c.outages[contact] > 0:
		c.outages[contact]--
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	default:
		fmt.Fprintf(w, `{"synced":%q}`, contact)
	}
}

// pushContact is the step: one HTTP call, its status attached to the error.
func pushContact(ctx context.Context, url, token, contact string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/contacts/"+contact, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	step, _ := activities.GetInfo(ctx)
	req.Header.Set("Idempotency-Key", step.IdempotencyKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", errors.Wrap(err, "crm")
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		err := errors.Newf("crm answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		return "", activities.WithAttrs(activities.WithStatus(err, resp.StatusCode), map[string]string{"contact": contact})
	}
	return string(body), nil
}

// TestCRMFailures is the case the failure-handling issue describes: a CRM
// step fails three times with 503 and then succeeds; another fails with 401
// and is dead-lettered after one attempt; an operator finds it with the CLI,
// fixes the token and requeues it, and it completes.
func TestCRMFailures(t *testing.T) {
	t.Parallel()
	crm := &fakeCRM{outages: map[string]int{"c-503": 3}, token: "good", calls: map[string]int{}}
	server := httptest.NewServer(crm)
	t.Cleanup(server.Close)
	var token atomic.Value
	token.Store("stale")

	c := newCLI(t)
	pool := enginetest.Pool(t)
	client := newClient(t, c.schema)
	retry := &activities.RetryPolicy{MaxAttempts: 5, InitialInterval: 20 * time.Millisecond, Multiplier: 2,
		MaxInterval: 100 * time.Millisecond, Classifier: activities.MustPolicy("http", "error.status == 429 || error.status >= 500")}
	wf := sdk.NewWorkflow("crm.sync", 1, func(ctx workflow.Context, contact string) (string, error) {
		return workflow.Step(ctx, "push", func(ctx context.Context) (string, error) {
			return pushContact(ctx, server.URL, token.Load().(string), contact)
		}, nil)
	}, &sdk.WorkflowOpts{Retry: retry})
	worker, err := sdk.NewWorker(sdk.WorkerConfig{Pool: pool, Schema: c.schema, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	sdk.Register(worker, wf)
	require.NoError(t, worker.Start(context.Background()))
	t.Cleanup(func() { _ = worker.StopAndCancel(context.Background()) })

	token.Store("good")
	ctx := context.Background()
	flaky, err := sdk.Start(ctx, client, wf, "c-503", nil)
	require.NoError(t, err)
	info := waitDone(t, client, flaky.ID)
	require.Equal(t, history.StatusCompleted, info.Status)
	require.Equal(t, 4, info.Attempt)
	events, err := client.History(ctx, flaky.ID)
	require.NoError(t, err)
	var failures int
	for _, e := range events {
		f, ok := e.Data.(history.AttemptFailedData)
		if !ok {
			continue
		}
		failures++
		require.Equal(t, failures, e.Attempt, "evidence names the attempt")
		require.Equal(t, history.Transient, f.Error.Class)
		require.Equal(t, 503, f.Error.Status)
		require.Contains(t, f.Error.Message, "crm answered 503: maintenance")
		require.Equal(t, map[string]string{"contact": "c-503"}, f.Error.Attrs)
		require.Equal(t, "push", f.Error.Step)
		require.Equal(t, "policy:http", f.Error.ClassifiedBy)
		require.Equal(t, "error.status == 429 || error.status >= 500", f.Error.Policy)
		require.NotNil(t, f.NextRunAt, "a retried attempt records when the next one runs")
		require.False(t, f.NextRunAt.Before(e.At))
	}
	require.Equal(t, 3, failures)

	token.Store("stale")
	locked, err := sdk.Start(ctx, client, wf, "c-401", nil)
	require.NoError(t, err)
	info = waitDone(t, client, locked.ID)
	require.Equal(t, history.StatusDeadLettered, info.Status)
	require.Equal(t, 1, info.Attempt, "a 401 is not retried")
	require.Equal(t, history.Permanent, info.LastError.Class)
	require.Equal(t, 401, info.LastError.Status)
	require.Equal(t, "policy:http", info.LastError.ClassifiedBy)

	// The operator's view.
	var dead []taskJSON
	require.NoError(t, json.Unmarshal(c.run("dlq", "list", "--filter", "error.status == 401", "-o", "json"), &dead))
	require.Len(t, dead, 1)
	require.Equal(t, locked.ID, dead[0].ID)
	text := string(c.run("dlq", "list"))
	require.Contains(t, text, locked.ID.String())
	require.Contains(t, text, "crm answered 401")

	bad := c.command("dlq", "list", "--filter", "error.status ==")
	out, err := bad.CombinedOutput()
	require.Error(t, err, "a filter that does not compile is refused")
	require.Contains(t, string(out), "--filter")
	require.Contains(t, string(out), "1:16")

	token.Store("good")
	retried := string(c.run("dlq", "retry", "--filter", "error.status == 401", "--reason", "token rotated"))
	require.Contains(t, retried, "requeued 1 task(s)")
	info = waitDone(t, client, locked.ID)
	require.Equal(t, history.StatusCompleted, info.Status)
	require.Equal(t, 2, info.Attempt)

	var events2 []eventJSON
	require.NoError(t, json.Unmarshal(c.run("task", "history", locked.ID.String(), "-o", "json"), &events2))
	var requeue history.TaskRequeuedData
	for _, e := range events2 {
		if e.Type == history.TaskRequeued {
			require.NoError(t, json.Unmarshal(e.Data, &requeue))
		}
	}
	require.Equal(t, "token rotated", requeue.Reason)
	require.True(t, strings.HasPrefix(requeue.By, "cli:"), "by %q", requeue.By)

	again := c.command("task", "retry", locked.ID.String())
	out, err = again.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "it is completed; only a dead-lettered task can be retried")

	crm.mu.Lock()
	require.Equal(t, 4, crm.calls["c-503"])
	require.Equal(t, 2, crm.calls["c-401"])
	crm.mu.Unlock()

	require.NoError(t, worker.Stop(context.Background()))
	enginetest.RequireProjectionsMatch(t, newStore(t, enginetest.Pool(t), c.schema))
}

func waitDone(t *testing.T, c *sdk.Client, id uuid.UUID) *sdk.TaskInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Wait(ctx, id)
	require.NoError(t, err)
	return info
}
