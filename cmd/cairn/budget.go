package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newBudgetCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "budget", Short: "Spending budgets: a namespace's, a tenant's or a type's per window; raises"}
	cmd.AddCommand(newBudgetSetCmd(g), newBudgetListCmd(g), newBudgetDeleteCmd(g), newBudgetRaiseCmd(g))
	return cmd
}

// scopeFlags are --tenant and --type: the scope of a budget (neither: the
// namespace's).
type scopeFlags struct{ tenant, typ string }

func (s *scopeFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&s.tenant, "tenant", "", "the budget of this fairness key (a tenant)")
	fs.StringVar(&s.typ, "type", "", "the budget of this workflow type")
}

func (s *scopeFlags) scope() (sdk.BudgetScope, error) {
	if s.tenant != "" && s.typ != "" {
		return sdk.BudgetScope{}, errmark.Mark(errors.New("budget: give --tenant or --type, not both (neither: the namespace's budget)"), configError)
	}
	return sdk.BudgetScope{FairnessKey: s.tenant, Type: s.typ}, nil
}

func newBudgetSetCmd(g *globals) *cobra.Command {
	var (
		sc       scopeFlags
		usd      float64
		tokens   int64
		window   time.Duration
		action   string
		waitTime time.Duration
	)
	cmd := &cobra.Command{
		Use:   "set [--tenant KEY | --type TYPE]",
		Short: "Set a scope budget: --usd and --tokens per --window",
		Long: `Sets the budget of the namespace, of a fairness key (--tenant) or of a
workflow type (--type): the steps of its tasks that declare their spend
may reserve at most --usd dollars and --tokens tokens per --window (0 in a
unit: not limited in it; set at least one). Windows are fixed and aligned
to the Unix epoch in UTC (an hour's resets on the hour). At the limit a
task fails (--on-exhausted fail, the default; error kind budget_exhausted)
or waits for a raise, holding no worker slot (--on-exhausted wait), up to
--wait-timeout (default 24h). Bounds: --window 1m to 366 days in whole
seconds, --wait-timeout up to 366 days, 1,000 budgets a namespace.
Workers apply it within a second (PUT /v1/budgets/{ref} does the same).`,
		Example: `  cairn budget set --tenant acme --usd 50 --window 24h
  cairn budget set --usd 1 --window 1h --on-exhausted wait --wait-timeout 2h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scope, err := sc.scope()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("usd") && !cmd.Flags().Changed("tokens") {
				return errmark.Mark(errors.New("budget set: give --usd, --tokens or both"), configError)
			}
			c, closeDB, err := g.clientCreating(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			b := sdk.Budget{USD: usd, Tokens: tokens, Window: window, OnExhausted: sdk.BudgetAction(action), WaitTimeout: waitTime}
			if err := c.SetBudget(cmd.Context(), scope, b); err != nil {
				return err
			}
			ref, _ := scope.Ref()
			fmt.Fprintf(cmd.OutOrStdout(), "budget %s: %s and %s per %s, then %s\n", ref, usdLimit(usd), tokenLimit(tokens), window, onExhausted(b))
			return nil
		},
	}
	sc.add(cmd.Flags())
	cmd.Flags().Float64Var(&usd, "usd", 0, "US dollars per window (0: not limited)")
	cmd.Flags().Int64Var(&tokens, "tokens", 0, "tokens (input and output) per window (0: not limited)")
	cmd.Flags().DurationVar(&window, "window", time.Hour, "the window's length: 1m to 366 days, whole seconds")
	cmd.Flags().StringVar(&action, "on-exhausted", "fail", "at the limit: fail the task, or wait for a raise")
	cmd.Flags().DurationVar(&waitTime, "wait-timeout", 0, "with --on-exhausted wait, how long a task waits (0: 24h)")
	return cmd
}

// usdLimit and tokenLimit show a budget's limits: "unlimited" for 0.
func usdLimit(usd float64) string {
	if usd == 0 {
		return "unlimited USD"
	}
	return "$" + strconv.FormatFloat(usd, 'f', -1, 64)
}

func tokenLimit(tokens int64) string {
	if tokens == 0 {
		return "unlimited tokens"
	}
	return strconv.FormatInt(tokens, 10) + " tokens"
}

func onExhausted(b sdk.Budget) string {
	if b.OnExhausted != sdk.BudgetWait {
		return "fail"
	}
	timeout := b.WaitTimeout
	if timeout == 0 {
		timeout = store.DefaultBudgetWaitTimeout
	}
	return "wait up to " + timeout.String()
}

func newBudgetListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the namespace's scope budgets, with their current windows' spend",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			budgets, err := c.Budgets(cmd.Context())
			if err != nil {
				return err
			}
			if g.output == "json" {
				if budgets == nil {
					budgets = []sdk.BudgetInfo{}
				}
				return printJSON(cmd, budgets)
			}
			w := newTable(cmd)
			fmt.Fprintln(w, "BUDGET\tLIMIT\tWINDOW\tSPENT\tRESERVED\tRAISED\tAT LIMIT\tWINDOW START")
			for _, b := range budgets {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Ref, amounts(b.Budget.USD, b.Budget.Tokens), b.Budget.Window,
					amounts(b.SpentUSD, b.SpentTokens), amounts(b.ReservedUSD, b.ReservedTokens), amounts(b.RaisedUSD, b.RaisedTokens),
					onExhausted(b.Budget), b.WindowStart.UTC().Format("2006-01-02T15:04:05Z"))
			}
			return w.Flush()
		},
	}
}

// amounts shows dollars and tokens together: "$0.5 / 1200 tok".
func amounts(usd float64, tokens int64) string {
	return "$" + strconv.FormatFloat(usd, 'f', -1, 64) + " / " + strconv.FormatInt(tokens, 10) + " tok"
}

func newBudgetDeleteCmd(g *globals) *cobra.Command {
	var sc scopeFlags
	cmd := &cobra.Command{
		Use:   "delete [--tenant KEY | --type TYPE]",
		Short: "Remove a scope budget (its windows' counts are kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scope, err := sc.scope()
			if err != nil {
				return err
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := c.DeleteBudget(cmd.Context(), scope); err != nil {
				return err
			}
			ref, _ := scope.Ref()
			fmt.Fprintf(cmd.OutOrStdout(), "budget %s: removed\n", ref)
			return nil
		},
	}
	sc.add(cmd.Flags())
	return cmd
}

func newBudgetRaiseCmd(g *globals) *cobra.Command {
	var (
		usd        float64
		tokens     int64
		by, reason string
	)
	cmd := &cobra.Command{
		Use:   "raise REF --by NAME [--usd N] [--tokens N] [--reason TEXT]",
		Short: "Raise a budget; the tasks waiting on it retry their step",
		Long: `Raises the budget REF names by --usd dollars and --tokens tokens:
"namespace", "fairness_key:<key>" or "type:<name>" (the current window of
a scope budget), or "task:<id>" (a task's own budget, which covers its
descendants). Each task waiting on it (refused with --on-exhausted wait)
gets budget_raised in its history, naming --by and --reason, and retries
the refused step at once; their ids are printed. --by is required: who
allowed the spend, for the ledger.`,
		Example: `  cairn budget raise fairness_key:acme --usd 10 --by alice --reason "month-end batch"
  cairn budget raise task:01935c6e-… --tokens 50000 --by bob`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				return errmark.Mark(errors.New("budget raise: --by (who raises it, for the ledger) is required"), configError)
			}
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			woken, err := c.RaiseBudget(cmd.Context(), args[0], sdk.BudgetRaise{USD: usd, Tokens: tokens, By: by, Reason: reason})
			if err != nil {
				return err
			}
			if g.output == "json" {
				ids := make([]string, len(woken))
				for i, id := range woken {
					ids[i] = id.String()
				}
				return printJSON(cmd, map[string]any{"ref": args[0], "by": by, "woken": ids})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "budget %s raised by $%s and %d tokens; %d waiting tasks woken\n", args[0],
				strconv.FormatFloat(usd, 'f', -1, 64), tokens, len(woken))
			for _, id := range woken {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		},
	}
	cmd.Flags().Float64Var(&usd, "usd", 0, "US dollars to add")
	cmd.Flags().Int64Var(&tokens, "tokens", 0, "tokens to add")
	cmd.Flags().StringVar(&by, "by", "", "who raises it (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the ledger")
	return cmd
}
