package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/servertest"
	"github.com/cairnflow/cairn/server/internal/web"
	"github.com/cairnflow/cairn/workflow"
)

// The budgets page shows a scope budget's window as bars and, to
// operators only, its Raise form; the form is checked (role, origin,
// amounts, the budget) and records the console's requester; a task over
// its own budget shows the banner and the form on its page, which lands
// back there with the task it woke, and the ledger reads as sentences.
func TestConsoleBudgetsPageAndRaiseForm(t *testing.T) {
	t.Parallel()
	tokens := []web.Token{
		{Name: "ops", SHA256: web.HashToken("ops-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleRead, web.RoleOperate}},
		{Name: "viewer", SHA256: web.HashToken("view-token"), Namespaces: []string{"*"}, Roles: []web.Role{web.RoleRead}},
	}
	for _, ns := range servertest.BothStores(t) {
		t.Run(ns.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, err := sdk.NewClient(sdk.ClientConfig{Store: ns.Store})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			require.NoError(t, client.SetBudget(ctx, sdk.BudgetScope{}, sdk.Budget{USD: 1, Tokens: 50_000, Window: time.Hour}))
			h := testConsole(t, ns.Store, tokens...)
			ops, viewer := []string{"Authorization", "Bearer ops-token"}, []string{"Authorization", "Bearer view-token"}

			page := string(servertest.Send(t, h, "GET", "/console/budgets", nil, viewer...).Body)
			require.Contains(t, page, `aria-current="page">Budgets</a>`)
			section := budgetSection(t, page, "namespace")
			require.Contains(t, section, "every task of the namespace")
			require.Contains(t, section, "$0.0000 spent, $0.0000 reserved, of $1.0000")
			require.Contains(t, section, "0 tokens spent, 0 tokens reserved, of 50000 tokens")
			require.Contains(t, section, "fail (budget_exhausted)")
			require.NotContains(t, section, "raise-budget", "a reader gets no Raise form")
			require.Contains(t, string(servertest.Send(t, h, "GET", "/console/budgets", nil, ops...).Body), `class="raise-budget"`)

			raise := func(token string, form url.Values) (int, string) {
				w := consoleForm(t, h, "/console/budgets/raise", token, form)
				if w.Code != http.StatusSeeOther {
					return w.Code, w.Body.String()
				}
				return w.Code, string(servertest.Send(t, h, "GET", w.Header().Get("Location"), nil, ops...).Body)
			}
			code, _ := raise("view-token", url.Values{"ref": {"namespace"}, "usd": {"1"}})
			require.Equal(t, http.StatusForbidden, code, "a reader cannot raise")
			for form, want := range map[string]string{
				"ref=namespace&usd=abc":       `USD &#34;abc&#34; is not an amount`,
				"ref=namespace&usd=NaN":       `is not an amount`,
				"ref=namespace&tokens=-5":     `is not a whole number`,
				"ref=namespace":               "give an amount in USD, in tokens or both",
				"ref=type:nope&usd=1":         "no such budget",
				"ref=nonsense&usd=1":          "not one of namespace",
				"ref=namespace&usd=1&task=42": "not a task id",
			} {
				values, err := url.ParseQuery(form)
				require.NoError(t, err)
				_, landing := raise("ops-token", values)
				require.Contains(t, landing, want, form)
			}
			r := httptest.NewRequest("POST", "/console/budgets/raise", strings.NewReader("ref=namespace&usd=1"))
			r.Host = "localhost"
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Sec-Fetch-Site", "cross-site")
			r.Header.Set("Authorization", "Bearer ops-token")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			require.Equal(t, http.StatusForbidden, rec.Code, "a raise from another origin is refused")

			code, landing := raise("ops-token", url.Values{"ref": {"namespace"}, "usd": {"$0.5"}, "tokens": {"1000"}})
			require.Equal(t, http.StatusSeeOther, code)
			require.Contains(t, landing, "Raised namespace by 1000 tokens · $0.5000 (by console:ops): no task was waiting on it.")
			require.Contains(t, budgetSection(t, landing, "namespace"), "of $1.5000 ($0.5000 raised)")
			budgets, err := client.Budgets(ctx)
			require.NoError(t, err)
			require.InDelta(t, 0.5, budgets[0].RaisedUSD, 1e-9)
			require.Equal(t, int64(1000), budgets[0].RaisedTokens)

			// A task over its own budget: 2 steps of $0.04 under $0.05.
			wf := sdk.NewWorkflow("console.budget", 1, func(ctx workflow.Context, n int) (int, error) {
				for i := range n {
					if _, err := workflow.Step(ctx, "llm", func(ctx context.Context) (int, error) {
						activities.RecordUsage(ctx, activities.Usage{Model: "gpt-x", InputTokens: 2000, OutputTokens: 1000, CostUSD: 0.03})
						return i, nil
					}, &workflow.StepOpts{Spend: &workflow.Spend{Model: "gpt-x", Tokens: 4000, CostUSD: 0.04}}); err != nil {
						return 0, err
					}
				}
				return n, nil
			}, nil)
			worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: ns.Store, Concurrency: 2, PollInterval: 20 * time.Millisecond, RescueInterval: -1})
			require.NoError(t, err)
			sdk.Register(worker, wf)
			require.NoError(t, worker.Start(ctx))
			t.Cleanup(func() { require.NoError(t, worker.StopAndCancel(context.Background())) })
			run, err := sdk.Start(ctx, client, wf, 2, &sdk.StartOpts{Budget: &sdk.Budget{USD: 0.05, OnExhausted: sdk.BudgetWait, WaitTimeout: time.Hour}})
			require.NoError(t, err)
			ref := "task:" + run.ID.String()
			waitUntil(t, "the task to wait over its budget", func() bool {
				events, err := client.RawHistory(ctx, run.ID)
				require.NoError(t, err)
				_, ok := sdk.BudgetWaitOf(events)
				return ok
			})
			taskPage := "/console/tasks/" + run.ID.String()
			body := string(servertest.Send(t, h, "GET", taskPage, nil, ops...).Body)
			require.Contains(t, body, "Over budget: waiting for a raise until")
			require.Contains(t, body, "Step 1 (llm) asked 4000 tokens · $0.0400 of budget")
			require.Contains(t, body, `name="task" value="`+run.ID.String()+`"`, "the form lands back on the task")
			require.Contains(t, body, "reserved 4000 tokens · $0.0400 for step 0 (llm) against namespace@") // and the task's own
			require.Contains(t, body, ":00Z, "+ref)
			require.Contains(t, body, "settled step 0 (llm), step completed: charged 3000 tokens · $0.0300 of 4000 tokens · $0.0400 reserved")
			require.Contains(t, body, "over budget "+ref+": step 1 (llm) asked 4000 tokens · $0.0400 with 3000 tokens · $0.0300 spent")
			require.NotContains(t, string(servertest.Send(t, h, "GET", taskPage, nil, viewer...).Body), "raise-budget")
			require.Contains(t, budgetSection(t, string(servertest.Send(t, h, "GET", "/console/budgets", nil, ops...).Body), ref),
				"/console/tasks/"+run.ID.String(), "the budgets page lists the task under its own budget")

			w := consoleForm(t, h, "/console/budgets/raise", "ops-token",
				url.Values{"ref": {ref}, "usd": {"0.05"}, "reason": {"a long contract"}, "task": {run.ID.String()}})
			require.Equal(t, http.StatusSeeOther, w.Code)
			require.True(t, strings.HasPrefix(w.Header().Get("Location"), taskPage+"?"), w.Header().Get("Location"))
			landing = string(servertest.Send(t, h, "GET", w.Header().Get("Location"), nil, ops...).Body)
			require.Contains(t, landing, "woke 1 task.")
			require.Contains(t, landing, `id="notice-tasks"`)
			waitUntil(t, "the task to complete", func() bool {
				info, err := client.Get(ctx, run.ID)
				require.NoError(t, err)
				return info.Status == history.StatusCompleted
			})
			body = string(servertest.Send(t, h, "GET", taskPage, nil, ops...).Body)
			require.Contains(t, body, "budget "+ref+" raised by $0.0500 by console:ops (a long contract): limit now $0.1000")
			require.NotContains(t, body, "Over budget: waiting")
		})
	}
}
