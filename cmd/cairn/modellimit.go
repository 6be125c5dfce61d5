package main

import (
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

func newModelLimitCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "model-limit", Short: "Model rate limits: tokens and requests per minute per model, across every worker"}
	cmd.AddCommand(newModelLimitSetCmd(g), newModelLimitListCmd(g), newModelLimitDeleteCmd(g))
	return cmd
}

func newModelLimitSetCmd(g *globals) *cobra.Command {
	var tpm, rpm int64
	cmd := &cobra.Command{
		Use:   "set MODEL",
		Short: "Set a model's rate limit: --tpm tokens and --rpm requests per minute",
		Long: `Sets the rate limit of MODEL (the name steps give in their Spend.Model: a
model, or a provider key) in the namespace: over any 60 seconds the steps
admitted declare at most --tpm tokens and make at most --rpm requests; a
step over it waits its turn, holding its worker slot (round robin across
fairness keys). 0 leaves a rate unlimited; set at least one. Bounds: --tpm
up to 10^12, --rpm up to 10^7. Workers apply it within a second
(PUT /v1/model-limits/{model} does the same).`,
		Example: `  cairn model-limit set gpt-4o --tpm 20000 --rpm 500`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("tpm") && !cmd.Flags().Changed("rpm") {
				return errmark.Mark(errors.New("model-limit set: give --tpm, --rpm or both"), configError)
			}
			c, closeDB, err := g.clientCreating(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := c.SetModelLimit(cmd.Context(), args[0], sdk.ModelLimit{TokensPerMinute: tpm, RequestsPerMinute: rpm}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "model %s: %s tokens and %s requests per minute\n", args[0], rate(tpm), rate(rpm))
			return nil
		},
	}
	cmd.Flags().Int64Var(&tpm, "tpm", 0, "tokens per minute (0: unlimited)")
	cmd.Flags().Int64Var(&rpm, "rpm", 0, "requests per minute (0: unlimited)")
	return cmd
}

// rate shows a limit's rate: "unlimited" for 0.
func rate(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func newModelLimitListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the namespace's model rate limits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			limits, err := c.ModelLimits(cmd.Context())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, limits)
			}
			w := newTable(cmd)
			fmt.Fprintln(w, "MODEL\tTOKENS/MIN\tREQUESTS/MIN\tUPDATED")
			for _, l := range limits {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.Model, rate(l.TokensPerMinute), rate(l.RequestsPerMinute), l.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"))
			}
			return w.Flush()
		},
	}
}

func newModelLimitDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete MODEL",
		Short: "Remove a model's rate limit: its waiting steps run at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			if err := c.DeleteModelLimit(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "model %s: limit removed\n", args[0])
			return nil
		},
	}
}
