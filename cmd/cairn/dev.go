package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
)

// devApprovalTimeout is how long cairn dev's approvals wait for a person
// before they escalate.
const devApprovalTimeout = 5 * time.Minute

func newDevCmd(g *globals) *cobra.Command {
	sf := &serverFlags{migrate: true, maxConns: defaultServerConns, maxListPayload: sdk.DefaultMaxListPayloadBytes, maxLongPolls: server.DefaultMaxLongPolls, rescueInterval: time.Second, shutdownTimeout: 5 * time.Second, consoleHint: true}
	df := &demoFlags{leaseTTL: sdk.DefaultLeaseTTL, rescueInterval: time.Second, shutdownTimeout: 5 * time.Second, approve: intake.ApproveManual}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Server, console and the demo worker in one process, on the embedded store: no PostgreSQL needed",
		Long: `cairn dev runs, in one process, what cairn server runs (the HTTP API, the
web console at /console/, the rescuer and cron) and a worker for the demo
workflow document.process, and submits --documents sample documents to watch.
A --low-confidence share of them (a quarter, by default) wait for your
approval: each is printed here with how to answer, and listed on the
console's Waiting page with Approve and Reject. Nobody answers for you: with
no decision in --approval-timeout a supervisor is notified (the step
escalate) and the document waits three times as long again, then is
rejected with "no decision". With --callback-secret each approval also gets
a signed one-time URL.

Without --database-url it keeps everything in the embedded SQLite store
(--db, default ./cairn-dev.db): stop it and start it again, and the tasks are
where they were. With --database-url it does the same on PostgreSQL.

It has no authentication: it answers only requests for localhost or a
loopback address (add names with --allowed-hosts), and listens on another
address only when told --insecure-no-auth. See docs/guarantees.md ("Security").`,
		Args: cobra.NoArgs,
		// Its server would take any namespace into the one database,
		// where the map places only some.
		Annotations: map[string]string{oneDatabaseAnnotation: "cairn dev runs on one database (--db or --database-url); serve cells with cairn server --placement"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if df.documents < 0 || df.documents > 100_000 {
				return errmark.Mark(errors.Newf("--documents %d: use 0 to 100000", df.documents), configError)
			}
			check := *df
			check.documents = max(1, check.documents) // 0 is fine here: submit none
			if err := check.validate(); err != nil {
				return err
			}
			where := "PostgreSQL"
			if g.embedded() {
				where = "the embedded store " + g.dbPath
			}
			return runServerWith(cmd, g, sf, func(ctx context.Context, store store.Store, _ *slog.Logger, addr string) (func(), error) {
				return startDevWorker(ctx, cmd, g, df, sf, store, where, addr)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&sf.listen, "listen", envOr("CAIRN_LISTEN", "127.0.0.1:7233"), "address to serve on (env CAIRN_LISTEN)")
	fl.StringVar(&sf.logLevel, "log-level", "warn", "debug, info, warn or error")
	addExposureFlags(cmd, sf)
	addCallbackSecretFlag(cmd, sf)
	fl.IntVar(&df.documents, "documents", 20, "sample documents to submit at start (0: none)")
	fl.IntVar(&df.concurrency, "concurrency", 8, "tasks the demo worker runs at once")
	fl.Float64Var(&df.failureRate, "failure-rate", 0.1, "chance a simulated OCR or LLM call fails transiently")
	fl.DurationVar(&df.latency, "latency", 200*time.Millisecond, "typical simulated step latency (slow enough to watch)")
	fl.Uint64Var(&df.seed, "seed", uint64(time.Now().UnixNano()), "seed for generated documents")
	fl.Float64Var(&df.lowConfidence, "low-confidence", 0.25, "share of documents read with low confidence, which wait for your approval (0 to 1)")
	fl.DurationVar(&df.approvalTimeout, "approval-timeout", devApprovalTimeout, "how long an approval waits for you before it escalates (then 3× as long again)")
	return cmd
}

// startDevWorker starts the demo worker over the server's store and
// submits the sample documents; addr is where the server listens, which
// the links it prints name.
func startDevWorker(ctx context.Context, cmd *cobra.Command, g *globals, df *demoFlags, sf *serverFlags, store store.Store, where, addr string) (func(), error) {
	c, err := sdk.NewClient(sdk.ClientConfig{Store: store, Namespace: g.namespace, Identity: cliIdentity(), MaxPayloadBytes: g.maxPayload})
	if err != nil {
		return nil, err
	}
	base := "http://" + linkAddr(addr)
	reviewers := &intake.PersonNotifier{Out: &lockedWriter{w: cmd.ErrOrStderr()}, Signal: signalCommand(g), Console: base,
		Namespace: g.namespace, CallbackSecret: callbackSecret(sf), CallbackBase: base,
		HowTo: fmt.Sprintf("approvals: a document read with low confidence waits up to %s for you (then a supervisor is notified, and it waits %s more);\n"+
			"answer on the console (%s/console/waiting: Approve or Reject), or as printed below\n",
			df.timeout(), df.timeout()*intake.EscalationFactor, base)}
	w, err := newDemoWorker(store, g, df, reviewers, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		c.Close()
		return nil, err
	}
	stop := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), df.shutdownTimeout)
		defer cancel()
		_ = w.Stop(stopCtx)
		c.Close()
	}
	out := cmd.ErrOrStderr()
	if df.documents > 0 {
		ids, err := submitDocuments(ctx, c, df)
		if err != nil {
			stop()
			return nil, err
		}
		fmt.Fprintf(out, "submitted %d sample documents (example task %s); %d of them are poor scans that will wait for your approval\n",
			len(ids), ids[0], int(math.Round(df.lowConfidence*float64(len(ids)))))
	}
	fmt.Fprintf(out, "cairn dev on %s, with a worker for %s@%d\n", where, intake.DocumentType, intake.DocumentVersion)
	return stop, nil
}

// linkAddr is addr, where the server listens, as links name it: an
// unspecified address (--listen :7233) as the loopback one, which a
// browser on the same machine reaches.
func linkAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
