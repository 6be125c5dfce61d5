package sdk

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/history"
)

// The exit codes of [ReplayMain] (and `cairn replay`).
const (
	ReplayExitOK       = 0 // every history replayed
	ReplayExitDiverged = 1 // some would not replay (or had no definition)
	ReplayExitUsage    = 2 // bad flags, or the histories could not be read
)

// ReplayMainOpts configure [ReplayMain]; nil takes every default.
type ReplayMainOpts struct {
	// Stdout receives the report, Stderr usage and errors. Default
	// os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Client opens the client of --database-url (a PostgreSQL URL by
	// default) in --schema and --namespace; the returned func closes it.
	// Set it to read another store (the embedded one of
	// engine/sqlitestore, say, whose path is then the URL).
	Client func(ctx context.Context, databaseURL, schema, namespace string) (*Client, func(), error)
}

// ReplayMain is `cairn replay` for a program's own workflows: a command
// line users build into a binary of theirs (the cairn binary knows only
// the workflows compiled into it, the demo's), typically for CI:
//
//	func main() {
//		r := sdk.NewReplayer()
//		_ = sdk.RegisterReplay(r, billing.InvoiceWorkflow)
//		os.Exit(sdk.ReplayMain(context.Background(), r, os.Args[1:], nil))
//	}
//
// args are the flags: --dir FOLDER (files written by `cairn task history
// ID -o json`), or --database-url URL (env CAIRN_DATABASE_URL) with
// --schema, --namespace and the filters --type, --status (comma-separated)
// and --limit; --output text|json. It prints a report and returns
// [ReplayExitOK], [ReplayExitDiverged] or [ReplayExitUsage].
func ReplayMain(ctx context.Context, r *Replayer, args []string, opts *ReplayMainOpts) int {
	o := orZero(opts)
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(o.Stderr)
	dir := fs.String("dir", "", "replay the history files (*.json, as `cairn task history ID -o json` writes them) in this folder")
	dbURL := fs.String("database-url", "", "replay tasks of this database (env CAIRN_DATABASE_URL)")
	schema := fs.String("schema", "", "the schema of cairn's tables (default cairn)")
	namespace := fs.String("namespace", "", "the namespace of the tasks (default default)")
	typ := fs.String("type", "", "replay tasks of this type only (default: every type the program defines)")
	statuses := fs.String("status", "", "replay tasks in these statuses only, comma-separated (pending,running,retrying,completed,failed,cancelled,dead_lettered,expired,continued)")
	limit := fs.Int("limit", 1000, fmt.Sprintf("replay at most this many tasks per type, newest first (1..%d)", MaxReplayTasks))
	output := fs.String("output", "text", "the report's form: text or json")
	if err := fs.Parse(args); err != nil {
		return ReplayExitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(o.Stderr, "replay: "+format+"\n", a...)
		return ReplayExitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q: every option is a flag", fs.Arg(0))
	}
	if *dbURL == "" && *dir == "" {
		*dbURL = os.Getenv("CAIRN_DATABASE_URL")
	}
	if *output != "text" && *output != "json" {
		return usage("--output %q: use text or json", *output)
	}
	var res ReplayResult
	var err error
	switch {
	case *dir != "" && *dbURL != "":
		return usage("--dir and --database-url are both set: replay one source at a time")
	case *dir != "":
		if *typ != "" || *statuses != "" {
			return usage("--type and --status filter a database's tasks, not --dir's files")
		}
		res, err = r.ReplayDir(ctx, *dir)
	case *dbURL != "":
		topts, perr := ParseReplayFilters(*typ, *statuses, *limit)
		if perr != nil {
			return usage("%v", perr)
		}
		open := o.Client
		if open == nil {
			open = openPostgresClient
		}
		c, closeClient, oerr := open(ctx, *dbURL, *schema, *namespace)
		if oerr != nil {
			return usage("%v", oerr)
		}
		defer closeClient()
		res, err = r.ReplayTasks(ctx, c, topts)
	default:
		return usage("set --dir FOLDER, or --database-url (env CAIRN_DATABASE_URL)")
	}
	if err != nil {
		fmt.Fprintf(o.Stderr, "replay: %v\n", err)
		return ReplayExitUsage
	}
	if err := WriteReplayReport(o.Stdout, res, *output == "json"); err != nil {
		fmt.Fprintf(o.Stderr, "replay: %v\n", err)
		return ReplayExitUsage
	}
	if !res.OK() {
		return ReplayExitDiverged
	}
	return ReplayExitOK
}

// ParseReplayFilters makes [ReplayTasksOpts] of the command line's
// --type, --status (comma-separated) and --limit, refusing what is not
// valid.
func ParseReplayFilters(typ, statuses string, limit int) (*ReplayTasksOpts, error) {
	o := &ReplayTasksOpts{Type: typ, Limit: limit}
	if limit < 1 || limit > MaxReplayTasks {
		return nil, errors.Newf("--limit %d is outside 1..%d", limit, MaxReplayTasks)
	}
	if statuses != "" {
		for _, s := range strings.Split(statuses, ",") {
			st := history.Status(strings.TrimSpace(s))
			found := false
			for _, known := range allStatuses {
				found = found || st == known
			}
			if !found {
				return nil, errors.Newf("--status %q is not one of %v", s, allStatuses)
			}
			o.Statuses = append(o.Statuses, st)
		}
	}
	return o, nil
}

// WriteReplayReport writes res as `cairn replay` prints it: a line per
// history that would not replay and a summary line, or, asJSON, res as
// JSON.
func WriteReplayReport(w io.Writer, res ReplayResult, asJSON bool) error {
	if asJSON {
		if res.Divergences == nil {
			res.Divergences = []Divergence{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	for _, d := range res.Divergences {
		if _, err := fmt.Fprintln(w, d.String()); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d histories replayed, %d would not replay\n", res.Replayed, len(res.Divergences))
	return err
}

func openPostgresClient(ctx context.Context, url, schema, namespace string) (*Client, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, errors.Wrap(err, "--database-url")
	}
	c, err := NewClient(ClientConfig{Pool: pool, Schema: schema, Namespace: namespace})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); pool.Close() }, nil
}
