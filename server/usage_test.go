package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// spendingTask finishes a task of type doc, for fairness key key, whose
// step reported usage.
func spendingTask(t *testing.T, s store.Store, key string, usage ...history.Usage) string {
	t.Helper()
	ctx := context.Background()
	servertest.RegisterDoc(t, s, "default")
	res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: history.TaskScheduledData{
		TaskType: "doc", TypeVersion: 1, Queue: "default", MaxAttempts: 3, FairnessKey: key}})
	require.NoError(t, err)
	claimed, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed.Tasks, 1)
	c := claimed.Tasks[0]
	_, err = s.EventAppend(ctx, &store.EventAppendParams{TaskID: c.Task.ID, State: c.State, Epoch: c.State.Lease.Epoch,
		Attempt: c.State.Attempt, Payloads: []history.Payload{
			history.StepCompletedData{Position: 0, Name: "extract", Usage: usage},
			history.TaskCompletedData{}}})
	require.NoError(t, err)
	return res.ID.String()
}

// GET /v1/tasks/{id}/usage and GET /v1/usage answer what the steps
// reported, as openapi.yaml describes, on both stores.
func TestUsageEndpoints(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			small := history.Usage{Model: "small", InputTokens: 100, OutputTokens: 10, CostUSD: 0.5}
			large := history.Usage{Model: "large", InputTokens: 7, OutputTokens: 3, CostUSD: 2}
			a := spendingTask(t, ns.Store, "tenant-a", small, large)
			spendingTask(t, ns.Store, "tenant-b", small)
			srv, err := New(Config{Store: ns.Store, Gatherer: prometheus.NewRegistry()})
			require.NoError(t, err)
			h := srv.Handler()
			before := len(OpenAPIViolations())

			got := servertest.Send(t, h, "GET", "/v1/tasks/"+a+"/usage?children=true", nil)
			require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
			var u cairntype.TaskUsage
			require.NoError(t, json.Unmarshal(got.Body, &u))
			require.Equal(t, cairntype.UsageTotal{InputTokens: 107, OutputTokens: 13, CostUSD: 2.5, Reports: 2}, u.Total)
			require.Equal(t, u.Total, u.Own)
			require.Equal(t, "tenant-a", u.FairnessKey)
			require.Equal(t, []string{"large", "small"}, []string{u.ByModel[0].Model, u.ByModel[1].Model})
			require.True(t, u.WithChildren)

			got = servertest.Send(t, h, "GET", "/v1/usage?by=tenant&since=2h&step=1h", nil)
			require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
			var series usageSeriesView
			require.NoError(t, json.Unmarshal(got.Body, &series))
			require.Equal(t, cairntype.UsageByFairnessKey, series.By)
			require.Equal(t, 3600.0, series.StepSeconds)
			require.Len(t, series.Keys, 2)
			require.Equal(t, []string{"tenant-a", "tenant-b"}, []string{series.Keys[0].Key, series.Keys[1].Key}, "by cost, highest first")
			require.Equal(t, 3.0, series.Total.CostUSD)
			require.Len(t, series.Keys[0].Points, int(series.Until.Sub(series.From)/time.Hour))

			got = servertest.Send(t, h, "GET", "/v1/usage?step=1h", nil)
			require.Equal(t, http.StatusBadRequest, got.Status)
			require.Contains(t, got.Problem.Detail, "is not one of fairness_key")
			require.Empty(t, strings.Join(OpenAPIViolations()[before:], "\n"))
		})
	}
}
