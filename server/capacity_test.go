package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/stretchr/testify/require"
)

// A retried start of an accepted task into a full queue answers with the
// existing task, not 429: the idempotency key is looked up before the
// queue's capacity. Keys k1, k2, k3, k1 into a queue of two: 202, 202,
// 429, 200 existing.
func TestRetriedStartIntoFullQueueIsExisting(t *testing.T) {
	t.Parallel()
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			servertest.RegisterDoc(t, ns.Store, store.DefaultNamespace)
			require.NoError(t, ns.Store.QueueSet(context.Background(),
				&store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "default", MaxWaiting: 2}))
			h := testServer(t, ns.Store)
			startWithKey := func(key string) servertest.Answer {
				return servertest.Send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{"id":"`+key+`"},"idempotency_key":"`+key+`"}`))
			}
			decode := func(a servertest.Answer) startResponse {
				var res startResponse
				require.NoError(t, json.Unmarshal(a.Body, &res), "%s", a.Body)
				return res
			}

			k1 := startWithKey("k1")
			require.Equal(t, http.StatusAccepted, k1.Status, "%s", k1.Body)
			k2 := startWithKey("k2")
			require.Equal(t, http.StatusAccepted, k2.Status, "%s", k2.Body)
			k3 := startWithKey("k3")
			require.Equal(t, http.StatusTooManyRequests, k3.Status, "%s", k3.Body)
			again := startWithKey("k1")
			require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
			res := decode(again)
			require.True(t, res.Existing)
			require.Equal(t, decode(k1).ID, res.ID)
		})
	}
}
