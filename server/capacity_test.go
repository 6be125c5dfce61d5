package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/stretchr/testify/require"
)

// A retried start of an accepted task into a full queue answers with the
// existing task, not 429: the idempotency key is looked up before the
// queue's capacity. Keys k1, k2, k3, k1 into a queue of two: 202, 202,
// 429, 200 existing.
func TestRetriedStartIntoFullQueueIsExisting(t *testing.T) {
	t.Parallel()
	for _, ns := range bothStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			t.Parallel()
			registerDoc(t, ns.store, store.DefaultNamespace)
			require.NoError(t, ns.store.QueueSet(context.Background(),
				&store.QueueSetParams{Namespace: store.DefaultNamespace, Name: "default", MaxWaiting: 2}))
			h := testServer(t, ns.store)
			startWithKey := func(key string) answer {
				return send(t, h, "POST", "/v1/tasks", []byte(`{"type":"doc","input":{"id":"`+key+`"},"idempotency_key":"`+key+`"}`))
			}
			decode := func(a answer) startResponse {
				var res startResponse
				require.NoError(t, json.Unmarshal(a.body, &res), "%s", a.body)
				return res
			}

			k1 := startWithKey("k1")
			require.Equal(t, http.StatusAccepted, k1.status, "%s", k1.body)
			k2 := startWithKey("k2")
			require.Equal(t, http.StatusAccepted, k2.status, "%s", k2.body)
			k3 := startWithKey("k3")
			require.Equal(t, http.StatusTooManyRequests, k3.status, "%s", k3.body)
			again := startWithKey("k1")
			require.Equal(t, http.StatusOK, again.status, "%s", again.body)
			res := decode(again)
			require.True(t, res.Existing)
			require.Equal(t, decode(k1).ID, res.ID)
		})
	}
}
