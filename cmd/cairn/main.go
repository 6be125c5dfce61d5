// Command cairn is the command line for cairn: migrations, the document
// pipeline demo, and questions about tasks.
//
// It imports sdk and engine, and exports nothing.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/payload/seal"
	"github.com/cairnflow/cairn/sdk"
)

// Exit codes.
const (
	exitError  = 1 // the command failed
	exitConfig = 2 // the command could not start: bad flags, no database
)

// configError marks errors the user fixes by configuring something; they
// exit with exitConfig and print one line.
var configError = errors.New("configuration error")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if code := reportError(os.Stderr, newRootCmd().ExecuteContext(ctx)); code != 0 {
		os.Exit(code)
	}
}

// reportError prints err, credentials masked, on w and returns the exit
// code it calls for: 0 without an error.
func reportError(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(w, "cairn: "+redact(err.Error()))
	if errors.Is(err, configError) {
		return exitConfig
	}
	return exitError
}

// globals are the flags every command shares.
type globals struct {
	databaseURL envFlag // read with url(): a URL may hold a password, so --help never shows it
	dbPath      string  // the embedded store's file, used when databaseURL is empty
	// listenURL is --listen-database-url: the listener's own connection
	// string ("": the database URL's).
	listenURL envFlag
	// pooler is --pooler: what the database URL points at (pgstore.Pooler).
	pooler string
	// placement is --placement: the placement map's file; placed is the
	// URL of --namespace's cell in it, set before the command runs.
	placement, placed string
	placedListen      string             // the listen_url of --namespace's cell
	placedCell        string             // the name of --namespace's cell, for errors
	cells             *pgstore.Placement // the placement map, for a command that works in every cell
	schema            string
	namespace         string
	output            string
	// filters bound every filtered command and, for server and dev, every
	// filtered request (zero fields: the sdk's defaults).
	filters sdk.FilterLimits
	// maxPayload bounds a task's input (and, for dev's demo worker, the
	// outputs), as sdk.ClientConfig.MaxPayloadBytes.
	maxPayload int
	// archive is --default-archive: where removed tasks' histories are read from,
	// and where the leader writes them, for namespaces without an archive
	// of their own (read with defaultArchive()).
	archive string
	// keys is --keys: the keys file of the namespaces whose payloads are
	// encrypted at rest (payload/seal); CAIRN_KEYS may hold its JSON instead.
	keys string
	// blobStore is --blob-store: where the blobs this process writes keep
	// their bytes ("": the database).
	blobStore string
	// stage is what keys and blobStore configure, once read
	// (payloadStage).
	stage *payloadStage
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "cairn",
		Short: "cairn: a durable workflow engine and task queue on PostgreSQL",
		Long: `cairn runs slow, flaky work (OCR, extraction, LLM calls, webhooks) off the
request path: tasks are persisted as append-only event logs in PostgreSQL,
claimed by workers under leases, retried, and always answerable.

Without --database-url (or CAIRN_DATABASE_URL), commands use the embedded
store: one SQLite file (--db, default ./cairn-dev.db), for one process.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if g.output != "text" && g.output != "json" {
				return errmark.Mark(errors.Newf("--output %q: use text or json", g.output), configError)
			}
			if g.maxPayload < 1 {
				return errmark.Mark(errors.Newf("--max-payload-bytes %d: must be positive", g.maxPayload), configError)
			}
			return g.place(cmd, args)
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return errmark.Mark(err, configError)
	})
	pf := root.PersistentFlags()
	g.databaseURL.env = "CAIRN_DATABASE_URL"
	pf.Var(&g.databaseURL, "database-url", "PostgreSQL URL (env CAIRN_DATABASE_URL); unset: the embedded store in --db")
	g.listenURL.env = "CAIRN_LISTEN_DATABASE_URL"
	pf.Var(&g.listenURL, "listen-database-url", "PostgreSQL URL of the connection that LISTENs for wake-ups, when --database-url goes through a pooler in transaction mode: PostgreSQL itself or a session-mode pool (env CAIRN_LISTEN_DATABASE_URL; default: --database-url)")
	pf.StringVar(&g.placement, "placement", os.Getenv("CAIRN_PLACEMENT"), `placement map: a JSON file {"cells": {name: URL}, "namespaces": {namespace: cell}} saying which PostgreSQL holds each namespace; --namespace's cell is the database (env CAIRN_PLACEMENT; instead of --database-url)`)
	pf.StringVar(&g.pooler, "pooler", envOr("CAIRN_POOLER", string(pgstore.PoolerNone)), "what --database-url points at: none (PostgreSQL, or a TCP proxy), session (a pooler in session mode) or transaction (PgBouncer pool_mode=transaction: statements are sent unnamed, as it needs) (env CAIRN_POOLER)")
	pf.StringVar(&g.dbPath, "db", envOr("CAIRN_DB", "cairn-dev.db"), "the embedded SQLite store's file, used when no --database-url is set (env CAIRN_DB)")
	pf.StringVar(&g.schema, "schema", envOr("CAIRN_SCHEMA", pgstore.DefaultSchema), "schema holding cairn's tables (env CAIRN_SCHEMA)")
	pf.StringVar(&g.namespace, "namespace", envOr("CAIRN_NAMESPACE", "default"), "namespace of tasks (env CAIRN_NAMESPACE)")
	pf.StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	pf.DurationVar(&g.filters.Timeout, "filter-timeout", sdk.DefaultFilterTimeout, "the most time a command or request with a CEL filter spends reading and evaluating")
	pf.Uint64Var(&g.filters.Cost, "filter-cost", sdk.DefaultFilterCost, "the most CEL cost a command or request with a filter spends, all its evaluations together")
	pf.IntVar(&g.maxPayload, "max-payload-bytes", sdk.DefaultMaxPayloadBytes,
		"the most bytes of JSON a task's input may hold (a schedule's, a start through the API); a worker bounds outputs the same")
	pf.StringVar(&g.archive, "default-archive", os.Getenv("CAIRN_DEFAULT_ARCHIVE"),
		"where the histories of tasks retention removed are kept, for namespaces without an archive of their own: a directory or s3://bucket/prefix?endpoint=host:port (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); read by task history and audit --archive, written by the leader of server and dev (env CAIRN_DEFAULT_ARCHIVE; default with the embedded store: the directory <db>.archive beside it)")
	pf.StringVar(&g.keys, "keys", os.Getenv(seal.EnvKeysFile),
		"keys file of the namespaces whose payloads are encrypted at rest (AES-256-GCM, a data key per task); every process of those namespaces needs it: servers and workers seal and open, the CLI opens (env CAIRN_KEYS_FILE; CAIRN_KEYS may hold the file's JSON instead)")
	pf.StringVar(&g.blobStore, "blob-store", os.Getenv("CAIRN_BLOB_STORE"),
		"where the blobs this process writes (payloads kept by reference, activities.PutBlob) keep their bytes: a directory or s3://bucket/prefix?endpoint=host:port (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); blobs are read from wherever they were written (env CAIRN_BLOB_STORE; default: the database)")
	pf.IntVar(&g.filters.MaxScan, "filter-max-scan", sdk.DefaultFilterScan, "the most rows a command or request with a filter reads to evaluate it")
	root.AddCommand(newMigrateCmd(g), newTaskCmd(g), newDLQCmd(g), newQueueCmd(g), newNamespaceCmd(g), newScheduleCmd(g), newDemoCmd(g),
		newModelLimitCmd(g), newBudgetCmd(g))
	root.AddCommand(newServerCmd(g), newDevCmd(g), newTokenCmd())
	root.AddCommand(newAuditCmd(g), newBenchCmd(g), newReplayCmd(g), newUsageCmd(g))
	markUsageErrors(root)
	return root
}

// markUsageErrors makes wrong arguments a configError, as a bad flag is
// (exit 2), on c and every command under it: a command's own argument
// check, and an unknown subcommand of a command that only groups others
// (which then runs: with no arguments it prints its help, as before).
func markUsageErrors(c *cobra.Command) {
	if !c.Runnable() && c.HasSubCommands() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return errmark.Mark(errors.Newf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath()), configError)
			}
			return cmd.Help()
		}
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return errmark.Mark(err, configError)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}

// envFlag is a string flag whose value, unless the flag is given, is read
// from an environment variable when it is used rather than when the flag
// is defined, so no --help prints it.
type envFlag struct {
	env   string
	value string
	set   bool
}

func (f *envFlag) String() string     { return f.value }
func (f *envFlag) Type() string       { return "string" }
func (f *envFlag) Set(v string) error { f.value, f.set = v, true; return nil }

// get returns the flag's value, or the environment's when it was not given.
func (f *envFlag) get() string {
	if f.set {
		return f.value
	}
	return os.Getenv(f.env)
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
