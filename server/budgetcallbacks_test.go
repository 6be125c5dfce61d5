package server

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// A task a budget refused with BudgetWait gets a one-time signed link: its
// page says what it raises, its POST raises the budget by the amounts
// signed in (what the refused step asked), recorded as by the link, once;
// a replayed, forged, expired or cross-kind token is refused and writes
// nothing, and concurrent uses of one link raise once. Both stores.
func TestBudgetCallbackLinkRaisesOnce(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv, err := New(Config{Store: st.Store, CallbackSecret: secret})
			require.NoError(t, err)
			h := srv.Handler()
			c, err := srv.client("default")
			require.NoError(t, err)
			before := len(OpenAPIViolations())
			require.NoError(t, c.SetBudget(ctx, sdk.BudgetScope{FairnessKey: "t1"}, sdk.Budget{USD: 1, Window: time.Hour, OnExhausted: sdk.BudgetWait}))
			key := store.BudgetWindowKey{Ref: "fairness_key:t1", Start: store.BudgetWindowStart(time.Hour, time.Now())}
			window := func() store.BudgetWindow {
				w, err := st.Store.BudgetWindowList(ctx, &store.BudgetWindowListParams{Namespace: "default", Keys: []store.BudgetWindowKey{key}})
				require.NoError(t, err)
				if len(w) == 0 {
					return store.BudgetWindow{} // not written yet
				}
				return w[0]
			}
			link := func(id uuid.UUID, expires time.Time) string {
				cb, err := c.BudgetCallback(ctx, id, expires, "alice")
				require.NoError(t, err)
				u, err := srv.BudgetCallbackURL("https://cairn.example.com/", cb)
				require.NoError(t, err)
				parsed, err := url.Parse(u)
				require.NoError(t, err)
				return parsed.Path
			}

			waiter := budgetWaiter(t, st.Store, key, history.TaskScheduledData{FairnessKey: "t1"})
			cb, err := c.BudgetCallback(ctx, waiter, time.Now().Add(time.Hour), "alice")
			require.NoError(t, err)
			require.Equal(t, "fairness_key:t1", cb.Ref)
			require.Equal(t, key.Start, cb.Window)
			require.Equal(t, 0.25, cb.USD, "the refused step's ask")
			require.Equal(t, int64(500), cb.Tokens)
			path := link(waiter, time.Now().Add(time.Hour))
			require.True(t, strings.HasPrefix(path, "/v1/callbacks/budget/"), path)

			page := servertest.SendHTML(t, h, path, http.StatusOK)
			require.Contains(t, page, "Raise by $0.25 and 500 tokens")
			require.Contains(t, page, waiter.String())
			require.Contains(t, page, "llm")

			// Refused, writing nothing: a forged token, a signal link's
			// token, an expired link.
			token := strings.TrimPrefix(path, "/v1/callbacks/budget/")
			forged := token[:len(token)-2] + map[bool]string{true: "AA", false: "BA"}[!strings.HasSuffix(token, "AA")]
			signalToken, err := sdk.CallbackToken(secret, sdk.Callback{Namespace: "default", TaskID: waiter, Name: "approval", Expires: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			expired := cb
			expired.Expires = time.Now().Add(-time.Second)
			expiredToken, err := sdk.BudgetCallbackToken(secret, expired)
			require.NoError(t, err)
			for _, bad := range []string{forged, signalToken, expiredToken} {
				res := servertest.Send(t, h, "POST", "/v1/callbacks/budget/"+bad, []byte(`{}`))
				require.Equal(t, http.StatusForbidden, res.Status, "%s", res.Body)
			}
			res := servertest.Send(t, h, "POST", "/v1/callbacks/budget/"+expiredToken, []byte(`{}`))
			require.Contains(t, res.Problem.Detail, "expired")
			res = servertest.Send(t, h, "POST", "/v1/callbacks/"+token, []byte(`{}`))
			require.Equal(t, http.StatusForbidden, res.Status, "a budget token is no signal link")
			require.Zero(t, window().RaisedUSD, "refusals wrote nothing")

			res = servertest.Send(t, h, "POST", path, []byte(`{"reason":"approved in chat"}`))
			require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
			require.Contains(t, string(res.Body), `"woken":["`+waiter.String()+`"]`)
			require.Contains(t, string(res.Body), `"by":"callback:alice"`)
			ledger := budgetRaises(t, st.Store, waiter)
			require.Len(t, ledger, 1)
			require.Equal(t, history.BudgetRaisedData{Budget: key.History(), By: "callback:alice", Reason: "approved in chat",
				USD: 0.25, Tokens: 500, LimitUSD: 1.25, LimitTokens: 500}, ledger[0])

			// Replayed: refused, the budget raised once.
			res = servertest.Send(t, h, "POST", path, []byte(`{}`))
			require.Equal(t, http.StatusGone, res.Status, "%s", res.Body)
			require.Equal(t, "callback_used", res.Problem.Code)
			servertest.SendHTML(t, h, path, http.StatusGone)
			require.Equal(t, 0.25, window().RaisedUSD)

			// Concurrent uses of a fresh link raise once.
			second := budgetWaiter(t, st.Store, key, history.TaskScheduledData{FairnessKey: "t1"})
			path = link(second, time.Now().Add(time.Hour))
			var wg sync.WaitGroup
			statuses := make([]int, 6)
			for i := range statuses {
				wg.Go(func() { statuses[i] = servertest.Send(t, h, "POST", path, []byte(`{}`)).Status })
			}
			wg.Wait()
			ok := 0
			for _, s := range statuses {
				if s == http.StatusOK {
					ok++
				} else {
					require.Equal(t, http.StatusGone, s)
				}
			}
			require.Equal(t, 1, ok, "%v", statuses)
			require.Equal(t, 0.5, window().RaisedUSD)

			// A wait raised another way ends the link; the page's form
			// post of a fresh one raises, answered with a page.
			third := budgetWaiter(t, st.Store, key, history.TaskScheduledData{FairnessKey: "t1"})
			path = link(third, time.Now().Add(time.Hour))
			_, err = c.RaiseBudget(ctx, "fairness_key:t1", sdk.BudgetRaise{USD: 1, By: "ops"})
			require.NoError(t, err)
			res = servertest.Send(t, h, "POST", path, []byte(`{}`))
			require.Equal(t, http.StatusGone, res.Status, "%s", res.Body)
			require.Equal(t, "wait_ended", res.Problem.Code)
			fourth := budgetWaiter(t, st.Store, key, history.TaskScheduledData{FairnessKey: "t1"})
			path = link(fourth, time.Now().Add(time.Hour))
			form := servertest.PostConsole(t, h, path, "application/x-www-form-urlencoded", strings.NewReader("comment=fine"), "")
			require.Equal(t, http.StatusOK, form.Code, form.Body.String())
			require.Contains(t, form.Body.String(), "Budget raised")
			require.Equal(t, "fine", budgetRaises(t, st.Store, fourth)[0].Reason)

			_, err = c.BudgetCallback(ctx, fourth, time.Now().Add(time.Hour), "")
			require.ErrorIs(t, err, sdk.ErrNotWaitingOnBudget)
			require.Empty(t, strings.Join(OpenAPIViolations()[before:], "\n"))
		})
	}
}
