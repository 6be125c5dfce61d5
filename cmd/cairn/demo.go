package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// demoFlags are the flags the demo commands share.
type demoFlags struct {
	documents       int
	concurrency     int
	maxConns        int // --max-conns; 0: workerConns(concurrency)
	failureRate     float64
	latency         time.Duration
	seed            uint64
	leaseTTL        time.Duration
	heartbeat       time.Duration
	failover        time.Duration
	rescueInterval  time.Duration
	shutdownTimeout time.Duration
	// lowConfidence is the share of documents that are poor scans, read
	// with low confidence: each waits for an approval.
	lowConfidence float64
	// approve says who answers the approvals (intake.ApproveModes).
	approve string
	// approvalTimeout is the first wait for a decision; 0: the mode's
	// simulatedApprovalTimeout, or personApprovalTimeout for manual.
	approvalTimeout time.Duration
	reviewerDelay   time.Duration
	callbackSecret  envFlag // read with get(): a secret, so --help never shows it
	callbackBase    string
	// remoteOCR hands the OCR to remote workers (demo run only): the run
	// serves the worker protocol on remoteListen and starts ocrWorker.
	remoteOCR    bool
	remoteListen string
	ocrWorker    string
	// healthListen, when set, is where demo worker serves its /healthz,
	// /readyz and /metrics (sdk.Worker.HealthHandler).
	healthListen string
}

// The first wait for a decision, unless --approval-timeout says: short when
// a simulated reviewer answers, long enough for a person otherwise.
const (
	simulatedApprovalTimeout = 300 * time.Millisecond
	personApprovalTimeout    = 10 * time.Minute
)

// timeout is the first wait for a decision.
func (f *demoFlags) timeout() time.Duration {
	switch {
	case f.approvalTimeout > 0:
		return f.approvalTimeout
	case f.approve == intake.ApproveManual:
		return personApprovalTimeout
	}
	return simulatedApprovalTimeout
}

// config is the demo workflows' configuration, with reviewers hearing of
// the approvals.
func (f *demoFlags) config(reviewers intake.Notifier) intake.Config {
	return intake.Config{FailureRate: f.failureRate, Latency: f.latency, ApprovalTimeout: f.timeout(), Reviewers: reviewers}
}

func (f *demoFlags) validate() error {
	switch {
	case f.documents < 1 || f.documents > 1_000_000:
		return errmark.Mark(errors.Newf("--documents %d: use 1 to 1000000", f.documents), configError)
	case f.concurrency < 1 || f.concurrency > 1000:
		return errmark.Mark(errors.Newf("--concurrency %d: use 1 to 1000", f.concurrency), configError)
	case f.maxConns != 0 && (f.maxConns < 2 || f.maxConns > 1000):
		return errmark.Mark(errors.Newf("--max-conns %d: use 2 to 1000", f.maxConns), configError)
	case f.failureRate < 0 || f.failureRate >= 1:
		return errmark.Mark(errors.Newf("--failure-rate %g: use 0 up to (not including) 1", f.failureRate), configError)
	case f.latency < 0:
		return errmark.Mark(errors.New("--latency must not be negative"), configError)
	case f.leaseTTL < 300*time.Millisecond:
		return errmark.Mark(errors.Newf("--lease-ttl %s: use at least 300ms", f.leaseTTL), configError)
	case f.heartbeat < 0 || f.heartbeat >= f.leaseTTL:
		return errmark.Mark(errors.Newf("--heartbeat-interval %s: use 0 (a third of --lease-ttl) or less than --lease-ttl %s", f.heartbeat, f.leaseTTL), configError)
	case f.failover < 0:
		return errmark.Mark(errors.Newf("--expected-failover %s must not be negative", f.failover), configError)
	case f.lowConfidence < 0 || f.lowConfidence > 1:
		return errmark.Mark(errors.Newf("--low-confidence %g: use 0 to 1", f.lowConfidence), configError)
	case !slices.Contains(intake.ApproveModes(), f.approve):
		return errmark.Mark(errors.Newf("--approve %q: use one of %s", f.approve, strings.Join(intake.ApproveModes(), ", ")), configError)
	case f.approvalTimeout < 0 || f.reviewerDelay < 0:
		return errmark.Mark(errors.New("--approval-timeout and --reviewer-delay must not be negative"), configError)
	case f.approvalTimeout > 0 && f.approvalTimeout < 10*time.Millisecond:
		return errmark.Mark(errors.Newf("--approval-timeout %s: use at least 10ms", f.approvalTimeout), configError)
	}
	if s := f.callbackSecret.get(); s != "" && len(s) < sdk.MinCallbackSecretBytes {
		return errmark.Mark(errors.Newf("--callback-secret: use at least %d bytes", sdk.MinCallbackSecretBytes), configError)
	}
	return nil
}

func newDemoCmd(g *globals) *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The document intake demo: parallel OCR → extract → validate → approval when unsure",
		Long: `The document intake demo runs the workflow document.process over generated
sample documents: it OCRs a document's pages in parallel (a step a page),
extracts fields with a simulated LLM (reporting its token usage), and
validates them with a confidence score. A document read with low confidence
(--low-confidence of them, poor scans) waits for a person's approval, the
signal "approval": {"approved": true|false, "comment": "..."}. With no
answer in --approval-timeout a supervisor is notified (the step escalate)
and it waits three times as long again; with no answer then either, the
default decides: rejected, comment "no decision", outcome manual_review.

Latency is simulated, and so are transient failures (retried) and a few
corrupt documents that fail permanently. It applies cairn's migrations first.

--approve says who answers: auto (default), a simulated reviewer that
answers after about --reviewer-delay, approving most, rejecting some and
missing a few (they escalate, and the supervisor answers or nobody does);
approve or reject, the same reviewer deciding every one alike; timeout,
nobody answering; manual, a person: the worker prints each approval and how
to answer it (the console's Waiting page, cairn task signal ID approval
--payload '{"approved":true}', or, with --callback-secret, a signed URL).`,
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&f.documents, "documents", 100, "number of sample documents")
	pf.IntVar(&f.concurrency, "concurrency", 32, "tasks a worker runs at once")
	pf.IntVar(&f.maxConns, "max-conns", 0, maxConnsHelp+" (default: 4 + concurrency/16, at most 20)")
	pf.Float64Var(&f.failureRate, "failure-rate", 0.1, "chance a simulated OCR or LLM call fails transiently")
	pf.DurationVar(&f.latency, "latency", 20*time.Millisecond, "typical simulated step latency")
	pf.Uint64Var(&f.seed, "seed", uint64(time.Now().UnixNano()), "seed for generated documents")
	pf.DurationVar(&f.leaseTTL, "lease-ttl", sdk.DefaultLeaseTTL, "worker lease TTL: a crashed worker's tasks resume after it")
	pf.DurationVar(&f.heartbeat, "heartbeat-interval", 0, "between lease renewals (default: a third of --lease-ttl)")
	pf.DurationVar(&f.failover, "expected-failover", 0,
		"the longest database failover the worker's leases should ride out: it warns at start when they do not (default: 30s with a URL of several hosts)")
	pf.DurationVar(&f.rescueInterval, "rescue-interval", 5*time.Second, "how often the rescuer looks for expired leases")
	pf.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a stopping worker lets running steps finish")
	addApprovalFlags(cmd, f)
	run := newDemoRunCmd(g, f)
	run.Flags().BoolVar(&f.remoteOCR, "remote-ocr", false, "hand each page's OCR to a remote worker (Python) over the HTTP worker protocol")
	run.Flags().StringVar(&f.remoteListen, "remote-listen", "127.0.0.1:0", "with --remote-ocr: where the worker protocol is served")
	run.Flags().StringVar(&f.ocrWorker, "ocr-worker", "clients/python/examples/ocr_worker.py",
		"with --remote-ocr: the Python OCR worker started (\"\": none, start your own)")
	worker := newDemoWorkerCmd(g, f)
	worker.Flags().StringVar(&f.healthListen, "health-listen", "",
		"serve the worker's /healthz, /readyz and /metrics on this address (e.g. 127.0.0.1:9091; default: none)")
	cmd.AddCommand(run, newDemoSubmitCmd(g, f), worker)
	return cmd
}

// addApprovalFlags adds the flags of the approvals the demo's workers wait
// for.
func addApprovalFlags(cmd *cobra.Command, f *demoFlags) {
	pf := cmd.PersistentFlags()
	pf.Float64Var(&f.lowConfidence, "low-confidence", 0.15, "share of documents read with low confidence, which wait for an approval (0 to 1)")
	pf.StringVar(&f.approve, "approve", intake.ApproveAuto, "who answers approvals: auto, approve, reject (a simulated reviewer), timeout (nobody), manual (a person)")
	pf.DurationVar(&f.approvalTimeout, "approval-timeout", 0,
		fmt.Sprintf("how long an approval waits before it escalates (then 3× as long again); 0: %s, or %s with --approve manual",
			simulatedApprovalTimeout, personApprovalTimeout))
	pf.DurationVar(&f.reviewerDelay, "reviewer-delay", 100*time.Millisecond, "how long the simulated reviewer takes to answer, give or take half")
	f.callbackSecret.env = "CAIRN_CALLBACK_SECRET"
	pf.Var(&f.callbackSecret, "callback-secret",
		"with --approve manual, sign a one-time callback URL for each approval with this secret (cairn server's --callback-secret; env CAIRN_CALLBACK_SECRET)")
	pf.StringVar(&f.callbackBase, "callback-base", "http://127.0.0.1:7233", "the address of the server the callback URLs are for")
}

// demoSetup opens the configured store (migrated) and a client over it;
// it returns the store too, for the demo's worker.
func demoSetup(ctx context.Context, g *globals, f *demoFlags) (*sdk.Client, store.Store, func(), error) {
	if err := f.validate(); err != nil {
		return nil, nil, nil, err
	}
	maxConns := f.maxConns
	if maxConns == 0 {
		maxConns = workerConns(f.concurrency)
	}
	return g.clientAndStore(ctx, storeOpts{maxConns: int32(maxConns), runsWorkers: true, migrate: true})
}

// demoReviewers is who hears of the approvals the demo's worker asks for,
// as --approve says, and how to stop them (after the worker).
func demoReviewers(c *sdk.Client, g *globals, f *demoFlags, out io.Writer) (intake.Notifier, func()) {
	if f.approve != intake.ApproveManual {
		r := intake.NewSimulatedReviewer(c, f.approve, f.reviewerDelay, func(task uuid.UUID, err error) {
			fmt.Fprintf(out, "simulated reviewer: task %s: %s\n", task, redact(err.Error()))
		})
		return r, r.Stop
	}
	howTo := fmt.Sprintf(`approvals: --approve manual: each low-confidence document waits up to %s for your decision, then a
supervisor is notified and it waits %s more, then it is rejected ("no decision"). Answer each with
  the web console: run cairn server on the same store, open http://127.0.0.1:7233/console/waiting, Approve or Reject;
  the command line: %s ID %s --payload '{"approved":true,"comment":"ok"}';
  or a signed URL, printed for each when --callback-secret is set (the secret cairn server has).
`, f.timeout(), f.timeout()*intake.EscalationFactor, signalCommand(g), intake.ApprovalSignal)
	return &intake.PersonNotifier{Out: out, HowTo: howTo, Signal: signalCommand(g), Namespace: g.namespace,
		CallbackSecret: []byte(f.callbackSecret.get()), CallbackBase: f.callbackBase}, func() {}
}

// newDemoWorker is a worker over st, the store of the demo's client, that
// runs the demo's workflows, as f configures them.
func newDemoWorker(st store.Store, g *globals, f *demoFlags, reviewers intake.Notifier, metrics *sdk.Metrics) (*sdk.Worker, error) {
	archive, err := g.defaultArchive()
	if err != nil {
		return nil, err
	}
	stage, err := g.payloadStage()
	if err != nil {
		return nil, err
	}
	w, err := sdk.NewWorker(sdk.WorkerConfig{
		Store: st, Namespace: g.namespace, Concurrency: f.concurrency, DefaultArchive: archive,
		Keys: stage.keys, BlobStore: stage.blobStore,
		LeaseTTL: f.leaseTTL, HeartbeatInterval: f.heartbeat, ExpectedFailover: f.failover,
		RescueInterval: f.rescueInterval, PollInterval: 500 * time.Millisecond,
		MaxPayloadBytes: g.maxPayload, Metrics: metrics,
		Logger: newRedactingLogger(os.Stderr, slog.LevelWarn),
	})
	if err != nil {
		return nil, err
	}
	return w, intake.Register(w, f.config(reviewers))
}

// submitDocuments starts document.process for each of --documents
// generated documents, each a task of its own (idempotency key
// demo/<document id>).
func submitDocuments(ctx context.Context, c *sdk.Client, f *demoFlags) ([]uuid.UUID, error) {
	return intake.Submit(ctx, c, intake.GenerateDocuments(f.documents, f.seed, intake.NewBatchID(), f.lowConfidence))
}

func newDemoSubmitCmd(g *globals, f *demoFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "submit",
		Short: "Submit --documents sample documents and print their task ids",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, closeDB, err := demoSetup(cmd.Context(), g, f)
			if err != nil {
				return err
			}
			defer closeDB()
			ids, err := submitDocuments(cmd.Context(), c, f)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd, ids)
			}
			for _, id := range ids {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		},
	}
}

func newDemoWorkerCmd(g *globals, f *demoFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run a worker for the demo workflow until SIGINT or SIGTERM, then shut down gracefully",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, st, closeDB, err := demoSetup(ctx, g, f)
			if err != nil {
				return err
			}
			defer closeDB()
			out := &lockedWriter{w: cmd.ErrOrStderr()}
			reviewers, stopReviewers := demoReviewers(c, g, f, out)
			defer stopReviewers()
			reg, metrics, err := workerMetrics(f)
			if err != nil {
				return err
			}
			w, err := newDemoWorker(st, g, f, reviewers, metrics)
			if err != nil {
				return err
			}
			stopHealth, err := serveWorkerHealth(w, reg, f.healthListen, out)
			if err != nil {
				return err
			}
			defer stopHealth()
			// The worker outlives the signal context: the signal starts a
			// graceful stop, not a crash.
			if err := w.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			fmt.Fprintf(out, "worker %s running %s@%d with concurrency %d, approvals --approve %s; SIGINT or SIGTERM stops it\n",
				w.WorkerID(), intake.DocumentType, intake.DocumentVersion, f.concurrency, f.approve)
			<-ctx.Done()
			fmt.Fprintf(out, "worker %s stopping: finishing running steps (up to %s)\n", w.WorkerID(), f.shutdownTimeout)
			stopCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
			defer cancel()
			if err := w.Stop(stopCtx); err != nil {
				return errors.Wrap(err, "graceful shutdown")
			}
			fmt.Fprintf(out, "worker %s stopped\n", w.WorkerID())
			return nil
		},
	}
}

func newDemoRunCmd(g *globals, f *demoFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the whole demo in one process: submit --documents, work them off (answering approvals), print a summary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, st, closeDB, err := demoSetup(ctx, g, f)
			if err != nil {
				return err
			}
			defer closeDB()
			out := &lockedWriter{w: cmd.ErrOrStderr()}
			reviewers, stopReviewers := demoReviewers(c, g, f, out)
			defer stopReviewers()
			w, err := newDemoWorker(st, g, f, reviewers, nil)
			if err != nil {
				return err
			}
			if err := w.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
				defer cancel()
				_ = w.Stop(stopCtx)
			}()
			if f.remoteOCR {
				stopRemote, err := serveRemoteOCR(st, g, f, out)
				if err != nil {
					return err
				}
				defer stopRemote()
			}
			started := time.Now()
			batchID := intake.NewBatchID()
			docs := intake.GenerateDocuments(f.documents, f.seed, batchID, f.lowConfidence)
			for i := range docs {
				docs[i].RemoteOCR = f.remoteOCR
			}
			parents, err := intake.SubmitBatches(ctx, c, batchID, docs)
			if err != nil {
				return err
			}
			var progress func(finished int)
			if g.output != "json" {
				fmt.Fprintf(out, "submitted %d documents in %d batch workflow(s) (%s, a child per document) in %s; worker %s running with concurrency %d; approvals: --approve %s\n",
					len(docs), len(parents), intake.BatchType, time.Since(started).Round(time.Millisecond), w.WorkerID(), f.concurrency, f.approve)
				progress = func(finished int) {
					fmt.Fprintf(out, "progress: %d/%d documents finished\n", finished, len(docs))
				}
			}
			s, err := intake.Await(ctx, c, parents, started, progress)
			if err != nil {
				return err
			}
			s.Approve, s.ApprovalTimeout = f.approve, f.timeout().Seconds()
			if g.output == "json" {
				return printJSON(cmd, s)
			}
			_ = intake.WriteSummary(cmd.OutOrStdout(), s, f.timeout())
			return nil
		},
	}
}

// lockedWriter serializes writes to w: the demo's progress and the
// notifications of steps running concurrently share the terminal.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// shellQuote is s as one word of a POSIX shell: itself when it holds
// nothing a shell reads specially, else single-quoted.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:,@=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// signalCommand is the command line that signals a task in g's store.
func signalCommand(g *globals) string {
	cmd := "cairn"
	if g.embedded() && g.dbPath != "cairn-dev.db" {
		cmd += " --db " + shellQuote(g.dbPath)
	}
	if !g.embedded() {
		cmd += " --database-url \"$CAIRN_DATABASE_URL\""
		if g.schema != pgstore.DefaultSchema {
			cmd += " --schema " + g.schema
		}
	}
	if g.namespace != "default" {
		cmd += " --namespace " + g.namespace
	}
	return cmd + " task signal"
}

// workerMetrics is the registry and metrics of a demo worker that serves
// its health (--health-listen): the process's and the worker's, as
// cairn server's /metrics has them. Without --health-listen, none.
func workerMetrics(f *demoFlags) (*prometheus.Registry, *sdk.Metrics, error) {
	if f.healthListen == "" {
		return nil, nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := sdk.NewMetrics(reg, nil)
	return reg, metrics, err
}

// serveWorkerHealth serves w's /healthz, /readyz and /metrics on addr
// (nothing when addr is empty) until the returned stop.
func serveWorkerHealth(w *sdk.Worker, reg *prometheus.Registry, addr string, out io.Writer) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Wrapf(err, "--health-listen %s", addr)
	}
	srv := &http.Server{Handler: w.HealthHandler(&sdk.HealthOpts{Gatherer: reg}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(out, "worker health on http://%s (/healthz, /readyz, /metrics)\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
