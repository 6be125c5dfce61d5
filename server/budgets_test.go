package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/server/internal/servertest"
)

// budgetWaiter starts a "doc" task of the default namespace (with
// scheduled's budget fields), claims it, and makes it wait on the window
// key over a step at position 2 that asked for 500 tokens and $0.25, as a
// worker's refusal of BudgetWait does: budget_refused with a deadline an
// hour off, and the store's record of the wait.
func budgetWaiter(t *testing.T, s store.Store, key store.BudgetWindowKey, scheduled history.TaskScheduledData) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	servertest.RegisterDoc(t, s, "default")
	scheduled.TaskType, scheduled.TypeVersion, scheduled.Queue, scheduled.MaxAttempts = "doc", 1, "default", 3
	res, err := s.TaskStart(ctx, &store.TaskStartParams{Namespace: "default", Scheduled: scheduled})
	require.NoError(t, err)
	if key.Ref == "" {
		key.Ref = history.BudgetRefTaskPrefix + res.ID.String()
	}
	// Claim it among the due ones (tasks a raise woke before are due too).
	claimed, err := s.TaskClaim(ctx, &store.TaskClaimParams{Namespace: "default", Queues: []string{"default"},
		Types: []store.TypeKey{{Type: "doc", Version: 1}}, Owner: "w", Max: 100, LeaseTTL: time.Minute})
	require.NoError(t, err)
	i := slices.IndexFunc(claimed.Tasks, func(ct *store.ClaimedTask) bool { return ct.Task.ID == res.ID })
	require.GreaterOrEqual(t, i, 0, "the task was claimed")
	ct := claimed.Tasks[i]
	deadline := time.Now().Add(time.Hour).UTC()
	servertest.AppendFor(t, s, ct, history.BudgetRefusedData{Position: 2, Step: "llm", Budget: key.History(), Action: history.BudgetWait,
		Tokens: 500, CostUSD: 0.25, LimitUSD: 1, SpentUSD: 0.9, Deadline: &deadline})
	require.NoError(t, s.BudgetWaitInsert(ctx, &store.BudgetWaitParams{Namespace: "default", Key: key, TaskID: res.ID}))
	return res.ID
}

// budgetLedger is the budget_raised events of task id.
func budgetRaises(t *testing.T, s store.Store, id uuid.UUID) []history.BudgetRaisedData {
	t.Helper()
	events, err := store.TaskEvents(context.Background(), s, "default", id)
	require.NoError(t, err)
	var out []history.BudgetRaisedData
	for _, e := range events {
		if r, ok := e.Data.(history.BudgetRaisedData); ok {
			out = append(out, r)
		}
	}
	return out
}

// /v1/budgets sets, lists, raises and deletes a namespace's scope
// budgets, alike on both stores: bad budgets are refused with what was
// wrong; only an admin sets and deletes them, an operator raises them
// (recorded as the token's name) and the raise wakes exactly the task
// waiting on it; a start takes a task budget.
func TestBudgetsOverHTTP(t *testing.T) {
	t.Parallel()
	const adminToken, operatorToken, readerToken = "admin-secret", "operator-secret", "reader-secret"
	tokens := []Token{
		{Name: "admin", SHA256: HashToken(adminToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleAdmin}},
		{Name: "ops", SHA256: HashToken(operatorToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleOperate}},
		{Name: "reader", SHA256: HashToken(readerToken), Namespaces: []string{AllNamespaces}, Roles: []Role{RoleRead, RoleSubmit}},
	}
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			h := testServer(t, st.Store, tokens...)
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
			before := len(OpenAPIViolations())

			put := servertest.Send(t, h, "PUT", "/v1/budgets/fairness_key%3Atenant%2F1",
				[]byte(`{"usd":1,"window_seconds":3600,"on_exhausted":"wait","wait_timeout_seconds":7200}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, put.Status, "%s", put.Body)
			var got budgetView
			require.NoError(t, json.Unmarshal(put.Body, &got))
			require.Equal(t, "fairness_key:tenant/1", got.Ref)
			require.Equal(t, "tenant/1", got.FairnessKey)
			require.Equal(t, 1.0, got.USD)
			require.Equal(t, int64(3600), got.WindowSeconds)
			require.Equal(t, "wait", got.OnExhausted)
			require.Equal(t, 7200.0, got.WaitTimeoutSeconds)
			require.Equal(t, store.BudgetWindowStart(time.Hour, time.Now()), got.WindowStart)
			put = servertest.Send(t, h, "PUT", "/v1/budgets/namespace", []byte(`{"tokens":1000000,"window_seconds":86400}`), as(adminToken)...)
			require.Equal(t, http.StatusOK, put.Status, "%s", put.Body)
			require.NoError(t, json.Unmarshal(put.Body, &got))
			require.Equal(t, "fail", got.OnExhausted, "the default action")

			for target, bad := range map[string]map[string]string{
				"/v1/budgets/type:doc": {
					`{"usd":1}`:                                               "window_seconds 0 is not between 60",
					`{"usd":1,"window_seconds:":59}`:                          "window_seconds:",
					`{"usd":1,"window_seconds":59}`:                           "window 59s is outside 1m0s..8784h0m0s",
					`{"window_seconds":60}`:                                   "limits nothing (set USD, Tokens or both)",
					`{"usd":-1,"window_seconds":60}`:                          "USD -1 is not a finite number >= 0",
					`{"usd":1,"window_seconds":60,"on_exhausted":"maybe"}`:    `OnExhausted "maybe" is not "fail" or "wait"`,
					`{"usd":1,"window_seconds":60,"wait_timeout_seconds":60}`: `WaitTimeout 1m0s without OnExhausted "wait"`,
					`{"usd":1,"window_seconds":60,"wait_timeout_seconds":-1}`: "wait_timeout_seconds -1 is not a number of seconds",
				},
				"/v1/budgets/task:" + uuid.NewString(): {`{"usd":1,"window_seconds":60}`: "a task's budget is set when it starts"},
				"/v1/budgets/tenant":                   {`{"usd":1,"window_seconds":60}`: "not one of namespace, task:<id>, fairness_key:<key>, type:<name>"},
				"/v1/budgets/type:":                    {`{"usd":1,"window_seconds":60}`: `no name after "type:"`},
			} {
				for body, says := range bad {
					res := servertest.Send(t, h, "PUT", target, []byte(body), as(adminToken)...)
					require.Equal(t, http.StatusBadRequest, res.Status, "%s %s: %s", target, body, res.Body)
					require.Contains(t, res.Problem.Detail, says, "%s %s", target, body)
				}
			}
			refused := servertest.Send(t, h, "PUT", "/v1/budgets/namespace", []byte(`{"usd":1,"window_seconds":60}`), as(operatorToken)...)
			require.Equal(t, http.StatusForbidden, refused.Status)

			list := servertest.Send(t, h, "GET", "/v1/budgets", nil, as(readerToken)...)
			require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
			var listed struct {
				Budgets []budgetView `json:"budgets"`
			}
			require.NoError(t, json.Unmarshal(list.Body, &listed))
			require.Len(t, listed.Budgets, 2, "refused budgets wrote nothing")
			require.Equal(t, []string{"fairness_key:tenant/1", "namespace"}, []string{listed.Budgets[0].Ref, listed.Budgets[1].Ref})

			// A task waits on the tenant's window; a raise by an operator
			// wakes it, recorded as the token's.
			key := store.BudgetWindowKey{Ref: "fairness_key:tenant/1", Start: listed.Budgets[0].WindowStart}
			waiter := budgetWaiter(t, st.Store, key, history.TaskScheduledData{FairnessKey: "tenant/1"})
			raise := servertest.Send(t, h, "POST", "/v1/budgets/fairness_key:tenant%2F1/raise", []byte(`{"usd":0.5,"reason":"quarter end"}`),
				as(readerToken)...)
			require.Equal(t, http.StatusForbidden, raise.Status, "a reader does not raise")
			raise = servertest.Send(t, h, "POST", "/v1/budgets/fairness_key:tenant%2F1/raise", []byte(`{"usd":0.5,"by":"me"}`), as(operatorToken)...)
			require.Equal(t, http.StatusBadRequest, raise.Status, "%s", raise.Body)
			require.Contains(t, raise.Problem.Detail, "recorded as the token's (api:ops)")
			raise = servertest.Send(t, h, "POST", "/v1/budgets/fairness_key:tenant%2F1/raise", []byte(`{"usd":0.5,"reason":"quarter end"}`),
				as(operatorToken)...)
			require.Equal(t, http.StatusOK, raise.Status, "%s", raise.Body)
			var raised raiseResponse
			require.NoError(t, json.Unmarshal(raise.Body, &raised))
			require.Equal(t, raiseResponse{Ref: "fairness_key:tenant/1", By: "api:ops", Woken: []uuid.UUID{waiter}}, raised)
			ledger := budgetRaises(t, st.Store, waiter)
			require.Len(t, ledger, 1)
			require.Equal(t, "api:ops", ledger[0].By)
			require.Equal(t, "quarter end", ledger[0].Reason)
			require.Equal(t, 1.5, ledger[0].LimitUSD)
			raise = servertest.Send(t, h, "POST", "/v1/budgets/fairness_key:tenant%2F1/raise", []byte(`{"tokens":10}`), as(operatorToken)...)
			require.Equal(t, http.StatusOK, raise.Status, "%s", raise.Body)
			require.NoError(t, json.Unmarshal(raise.Body, &raised))
			require.Empty(t, raised.Woken, "the task woke already")
			require.Equal(t, "[]", strings.TrimSpace(string(mustField(t, raise.Body, "woken"))))

			list = servertest.Send(t, h, "GET", "/v1/budgets", nil, as(readerToken)...)
			require.NoError(t, json.Unmarshal(list.Body, &listed))
			require.Equal(t, 0.5, listed.Budgets[0].RaisedUSD)
			require.Equal(t, int64(10), listed.Budgets[0].RaisedTokens)

			for body, want := range map[string]string{
				`{}`:         "limits nothing (set USD, Tokens or both)",
				`{"usd":-2}`: "USD -2 is not a finite number >= 0",
				`{"usd":1,"reason":"` + strings.Repeat("x", 1001) + `"}`: "Reason is over",
			} {
				res := servertest.Send(t, h, "POST", "/v1/budgets/namespace/raise", []byte(body), as(operatorToken)...)
				require.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", body, res.Body)
				require.Contains(t, res.Problem.Detail, want, body)
			}
			res := servertest.Send(t, h, "POST", "/v1/budgets/type:nothing/raise", []byte(`{"usd":1}`), as(operatorToken)...)
			require.Equal(t, http.StatusNotFound, res.Status, "%s", res.Body)
			res = servertest.Send(t, h, "POST", "/v1/budgets/task:"+uuid.NewString()+"/raise", []byte(`{"usd":1}`), as(operatorToken)...)
			require.Equal(t, http.StatusNotFound, res.Status, "%s", res.Body)

			// A start's budget is the task's own, without a window.
			start := servertest.Send(t, h, "POST", "/v1/tasks",
				[]byte(`{"type":"doc","budget":{"usd":2,"tokens":5000,"on_exhausted":"wait","wait_timeout_seconds":60}}`), as(readerToken)...)
			require.Equal(t, http.StatusAccepted, start.Status, "%s", start.Body)
			var started startResponse
			require.NoError(t, json.Unmarshal(start.Body, &started))
			events, err := store.TaskEvents(context.Background(), st.Store, "default", started.ID)
			require.NoError(t, err)
			require.Equal(t, &history.TaskBudget{USD: 2, Tokens: 5000, OnExhausted: "wait", WaitTimeoutMillis: 60_000},
				events[0].Data.(history.TaskScheduledData).Budget)
			for body, says := range map[string]string{
				`{"type":"doc","budget":{"usd":1,"window_seconds":60}}`:        "window_seconds",
				`{"type":"doc","budget":{}}`:                                   "limits nothing",
				`{"type":"doc","budget":{"usd":1,"wait_timeout_seconds":1e9}}`: "budget.wait_timeout_seconds 1e+09 is not",
			} {
				res := servertest.Send(t, h, "POST", "/v1/tasks", []byte(body), as(readerToken)...)
				require.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", body, res.Body)
				require.Contains(t, res.Problem.Detail, says, body)
			}

			del := servertest.Send(t, h, "DELETE", "/v1/budgets/fairness_key%3Atenant%2F1", []byte(`{}`), as(adminToken)...)
			require.Equal(t, http.StatusNoContent, del.Status, "%s", del.Body)
			del = servertest.Send(t, h, "DELETE", "/v1/budgets/fairness_key%3Atenant%2F1", []byte(`{}`), as(adminToken)...)
			require.Equal(t, http.StatusNotFound, del.Status, "%s", del.Body)
			require.Empty(t, strings.Join(OpenAPIViolations()[before:], "\n"))
		})
	}
}

// A server without API tokens records who raised a budget from the body,
// where it is then required; a task's budget is raised by its ref.
func TestBudgetRaiseWithoutTokensNamesWho(t *testing.T) {
	t.Parallel()
	for _, st := range servertest.BothStores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			h := testServer(t, st.Store)
			waiter := budgetWaiter(t, st.Store, store.BudgetWindowKey{}, history.TaskScheduledData{Budget: &history.TaskBudget{USD: 1, OnExhausted: "wait"}})
			target := "/v1/budgets/task:" + waiter.String() + "/raise"
			res := servertest.Send(t, h, "POST", target, []byte(`{"usd":1}`))
			require.Equal(t, http.StatusBadRequest, res.Status, "%s", res.Body)
			require.Contains(t, res.Problem.Detail, "by (who raises the budget, for the ledger) is required")
			res = servertest.Send(t, h, "POST", target, []byte(`{"usd":1,"by":"alice","reason":"ok"}`))
			require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
			var raised raiseResponse
			require.NoError(t, json.Unmarshal(res.Body, &raised))
			require.Equal(t, []uuid.UUID{waiter}, raised.Woken)
			ledger := budgetRaises(t, st.Store, waiter)
			require.Len(t, ledger, 1)
			require.Equal(t, "alice", ledger[0].By)
			require.Equal(t, 2.0, ledger[0].LimitUSD)
		})
	}
}

// mustField is the raw JSON of body's member name.
func mustField(t *testing.T, body []byte, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	return m[name]
}
