package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/sdk"
)

// cairn budget set, list, raise and delete, and task start's budget, on
// both stores; bad budgets are refused with the SDK's words.
func TestBudgetCommands(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			tg := target(t)
			out, _ := tg.mustRun(t, "budget", "set", "--tenant", "acme", "--usd", "50", "--window", "24h")
			require.Equal(t, "budget fairness_key:acme: $50 and unlimited tokens per 24h0m0s, then fail\n", out)
			out, _ = tg.mustRun(t, "budget", "set", "--tokens", "100000", "--on-exhausted", "wait", "--wait-timeout", "2h")
			require.Equal(t, "budget namespace: unlimited USD and 100000 tokens per 1h0m0s, then wait up to 2h0m0s\n", out)
			for args, says := range map[string]string{
				"budget set --tenant a --type b --usd 1":             "give --tenant or --type, not both",
				"budget set --type doc":                              "give --usd, --tokens or both",
				"budget set --type doc --usd 1 --window 30s":         "window 30s is outside 1m0s..8784h0m0s",
				"budget set --type doc --usd -1":                     "USD -1 is not a finite number >= 0",
				"budget set --type doc --usd 1 --on-exhausted maybe": `OnExhausted "maybe" is not "fail" or "wait"`,
				"budget raise namespace --usd 1":                     "--by (who raises it, for the ledger) is required",
				"budget raise tenant:acme --usd 1 --by a":            "not one of namespace, task:<id>",
				"budget raise type:none --usd 1 --by a":              "no such budget",
			} {
				_, stderr, err := tg.run(t, strings.Fields(args)...)
				require.Error(t, err, args)
				require.Contains(t, stderr+err.Error(), says, args)
			}

			out, _ = tg.mustRun(t, "budget", "raise", "fairness_key:acme", "--usd", "2.5", "--by", "alice", "--reason", "month end")
			require.Equal(t, "budget fairness_key:acme raised by $2.5 and 0 tokens; 0 waiting tasks woken\n", out)
			out, _ = tg.mustRun(t, "budget", "list")
			require.Contains(t, out, "BUDGET")
			require.Contains(t, out, "fairness_key:acme")
			require.Contains(t, out, "wait up to 2h0m0s")
			out, _ = tg.mustRun(t, "budget", "list", "-o", "json")
			var budgets []sdk.BudgetInfo
			require.NoError(t, json.Unmarshal([]byte(out), &budgets), out)
			require.Len(t, budgets, 2)
			require.Equal(t, sdk.BudgetScope{FairnessKey: "acme"}, budgets[0].Scope)
			require.Equal(t, 2.5, budgets[0].RaisedUSD)
			require.Equal(t, sdk.Budget{Tokens: 100000, Window: time.Hour, OnExhausted: sdk.BudgetWait, WaitTimeout: 2 * time.Hour}, budgets[1].Budget)

			// A task started with a budget has one to raise; one without
			// has none.
			startCLIWorker(t, tg)
			out, _ = tg.mustRun(t, "task", "start", "cli.greet", "--input", `"ada"`, "--budget-usd", "1")
			id := strings.TrimSpace(out)
			out, _ = tg.mustRun(t, "budget", "raise", "task:"+id, "--tokens", "10", "--by", "bob", "-o", "json")
			require.JSONEq(t, `{"ref":"task:`+id+`","by":"bob","woken":[]}`, out)
			out, _ = tg.mustRun(t, "task", "start", "cli.greet", "--input", `"bo"`)
			_, stderr, err := tg.run(t, "budget", "raise", "task:"+strings.TrimSpace(out), "--usd", "1", "--by", "bob")
			require.Error(t, err)
			require.Contains(t, stderr+err.Error(), "the task was started without a budget")

			out, _ = tg.mustRun(t, "budget", "delete", "--tenant", "acme")
			require.Equal(t, "budget fairness_key:acme: removed\n", out)
			_, _, err = tg.run(t, "budget", "delete", "--tenant", "acme")
			require.Error(t, err, "no budget to remove")
		})
	}
}
