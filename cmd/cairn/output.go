package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/cairnflow/cairn/sdk"
	"github.com/spf13/cobra"
)

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(cmd *cobra.Command) *tabwriter.Writer { return newTableTo(cmd.OutOrStdout()) }

// listCmd is a command that reads a list through a client and prints it:
// as JSON with -o json, else as a table of header (tab-separated) and one
// row per item (row's tab-separated cells).
func listCmd[T any](g *globals, use, short, header string, read func(*sdk.Client, context.Context) ([]T, error), row func(T) string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeDB, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			items, err := read(c, cmd.Context())
			return printList(cmd, g, header, items, err, row)
		},
	}
}

// printList prints items as a table (or JSON with -o json). A read that
// failed part-way (a cell that did not answer) still prints what it read,
// then fails with readErr; one that read nothing fails at once.
func printList[T any](cmd *cobra.Command, g *globals, header string, items []T, readErr error, row func(T) string) error {
	if readErr != nil && len(items) == 0 {
		return readErr
	}
	if g.output == "json" {
		if err := printJSON(cmd, items); err != nil {
			return err
		}
		return readErr
	}
	w := newTable(cmd)
	fmt.Fprintln(w, header)
	for _, item := range items {
		fmt.Fprintln(w, row(item))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return readErr
}

// newTableTo is newTable writing to out.
func newTableTo(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}
