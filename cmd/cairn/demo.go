package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnflow/cairn/engine"
	"github.com/cairnflow/cairn/history"
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
	rescueInterval  time.Duration
	shutdownTimeout time.Duration
	// lowConfidence is the share of documents that are poor scans, read
	// with low confidence: each waits for an approval.
	lowConfidence float64
	// approve says who answers the approvals (approveModes).
	approve string
	// approvalTimeout is the first wait for a decision; 0: the mode's
	// simulatedApprovalTimeout, or personApprovalTimeout for manual.
	approvalTimeout time.Duration
	reviewerDelay   time.Duration
	callbackSecret  envFlag // read with get(): a secret, so --help never shows it
	callbackBase    string
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
	case f.approve == approveManual:
		return personApprovalTimeout
	}
	return simulatedApprovalTimeout
}

func (f *demoFlags) pipeline(reviewers reviewNotifier) pipelineConfig {
	return pipelineConfig{failureRate: f.failureRate, latency: f.latency, approvalTimeout: f.timeout(), reviewers: reviewers}
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
	case f.lowConfidence < 0 || f.lowConfidence > 1:
		return errmark.Mark(errors.Newf("--low-confidence %g: use 0 to 1", f.lowConfidence), configError)
	case !slices.Contains(approveModes, f.approve):
		return errmark.Mark(errors.Newf("--approve %q: use one of %s", f.approve, strings.Join(approveModes, ", ")), configError)
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
	pf.DurationVar(&f.leaseTTL, "lease-ttl", engine.DefaultLeaseTTL, "worker lease TTL: a crashed worker's tasks resume after it")
	pf.DurationVar(&f.rescueInterval, "rescue-interval", 5*time.Second, "how often the rescuer looks for expired leases")
	pf.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a stopping worker lets running steps finish")
	addApprovalFlags(cmd, f)
	cmd.AddCommand(newDemoRunCmd(g, f), newDemoSubmitCmd(g, f), newDemoWorkerCmd(g, f))
	return cmd
}

// addApprovalFlags adds the flags of the approvals the demo's workers wait
// for.
func addApprovalFlags(cmd *cobra.Command, f *demoFlags) {
	pf := cmd.PersistentFlags()
	pf.Float64Var(&f.lowConfidence, "low-confidence", 0.15, "share of documents read with low confidence, which wait for an approval (0 to 1)")
	pf.StringVar(&f.approve, "approve", approveAuto, "who answers approvals: auto, approve, reject (a simulated reviewer), timeout (nobody), manual (a person)")
	pf.DurationVar(&f.approvalTimeout, "approval-timeout", 0,
		fmt.Sprintf("how long an approval waits before it escalates (then 3× as long again); 0: %s, or %s with --approve manual",
			simulatedApprovalTimeout, personApprovalTimeout))
	pf.DurationVar(&f.reviewerDelay, "reviewer-delay", 100*time.Millisecond, "how long the simulated reviewer takes to answer, give or take half")
	f.callbackSecret.env = "CAIRN_CALLBACK_SECRET"
	pf.Var(&f.callbackSecret, "callback-secret",
		"with --approve manual, sign a one-time callback URL for each approval with this secret (cairn server's --callback-secret; env CAIRN_CALLBACK_SECRET)")
	pf.StringVar(&f.callbackBase, "callback-base", "http://127.0.0.1:7233", "the address of the server the callback URLs are for")
}

// demoSetup opens the configured store (migrated) and a client over it.
func demoSetup(ctx context.Context, g *globals, f *demoFlags) (*sdk.Client, func(), error) {
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	maxConns := f.maxConns
	if maxConns == 0 {
		maxConns = workerConns(f.concurrency)
	}
	return g.clientWith(ctx, storeOpts{maxConns: int32(maxConns), runsWorkers: true, migrate: true})
}

// demoReviewers is who hears of the approvals the demo's worker asks for,
// as --approve says, and how to stop them (after the worker).
func demoReviewers(c *sdk.Client, g *globals, f *demoFlags, out io.Writer) (reviewNotifier, func()) {
	if f.approve != approveManual {
		r := newSimReviewer(c, f.approve, f.reviewerDelay, out)
		return r, r.stop
	}
	howTo := fmt.Sprintf(`approvals: --approve manual: each low-confidence document waits up to %s for your decision, then a
supervisor is notified and it waits %s more, then it is rejected ("no decision"). Answer each with
  the web console: run cairn server on the same store, open http://127.0.0.1:7233/console/waiting, Approve or Reject;
  the command line: %s ID %s --payload '{"approved":true,"comment":"ok"}';
  or a signed URL, printed for each when --callback-secret is set (the secret cairn server has).
`, f.timeout(), f.timeout()*escalationFactor, signalCommand(g), approvalSignal)
	return &personNotifier{out: out, howTo: howTo, signal: signalCommand(g), namespace: g.namespace,
		callbackSecret: []byte(f.callbackSecret.get()), callbackBase: f.callbackBase}, func() {}
}

func newDemoWorker(c *sdk.Client, g *globals, f *demoFlags, reviewers reviewNotifier) (*sdk.Worker, error) {
	archive, err := g.defaultArchive()
	if err != nil {
		return nil, err
	}
	w, err := sdk.NewWorker(sdk.WorkerConfig{
		Store: c.Store(), Namespace: g.namespace, Concurrency: f.concurrency, DefaultArchive: archive,
		LeaseTTL: f.leaseTTL, RescueInterval: f.rescueInterval, PollInterval: 500 * time.Millisecond,
		MaxPayloadBytes: g.maxPayload,
		Logger:          newRedactingLogger(os.Stderr, slog.LevelWarn),
	})
	if err != nil {
		return nil, err
	}
	doc := newDocumentPipeline(f.pipeline(reviewers))
	if err := sdk.RegisterSafely(w, doc); err != nil {
		return nil, err
	}
	return w, sdk.RegisterSafely(w, newBatchWorkflow(doc))
}

// submitDocuments starts document.process for each of --documents
// generated documents, each a task of its own (idempotency key
// demo/<document id>).
func submitDocuments(ctx context.Context, c *sdk.Client, f *demoFlags) ([]uuid.UUID, error) {
	batch := newBatchID()
	docs := generateDocuments(f.documents, f.seed, batch, f.lowConfidence)
	ids := make([]uuid.UUID, 0, len(docs))
	// Batches of 1,000 in one statement each, as an API taking an upload
	// of many documents would.
	for start := 0; start < len(docs); start += 1000 {
		batch := docs[start:min(start+1000, len(docs))]
		starts := make([]sdk.StartParams, len(batch))
		for i, doc := range batch {
			starts[i] = sdk.StartParams{Workflow: demoTypeRef, Input: doc, Opts: sdk.StartOpts{
				IdempotencyKey: "demo/" + doc.ID, MaxAttempts: demoRetry.MaxAttempts,
			}}
		}
		res, err := c.StartMany(ctx, starts)
		if err != nil {
			return ids, err
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

func newDemoSubmitCmd(g *globals, f *demoFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "submit",
		Short: "Submit --documents sample documents and print their task ids",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeDB, err := demoSetup(cmd.Context(), g, f)
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
			c, closeDB, err := demoSetup(ctx, g, f)
			if err != nil {
				return err
			}
			defer closeDB()
			out := &lockedWriter{w: cmd.ErrOrStderr()}
			reviewers, stopReviewers := demoReviewers(c, g, f, out)
			defer stopReviewers()
			w, err := newDemoWorker(c, g, f, reviewers)
			if err != nil {
				return err
			}
			// The worker outlives the signal context: the signal starts a
			// graceful stop, not a crash.
			if err := w.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			fmt.Fprintf(out, "worker %s running %s@%d with concurrency %d, approvals --approve %s; SIGINT or SIGTERM stops it\n",
				w.WorkerID(), demoTypeName, demoTypeVersion, f.concurrency, f.approve)
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

// demoSummary is what `demo run` reports.
type demoSummary struct {
	Documents    int `json:"documents"`
	Completed    int `json:"completed"`
	Failed       int `json:"failed"`
	DeadLettered int `json:"dead_lettered"`
	Unfinished   int `json:"unfinished"`
	// Outcomes counts the completed documents by Extraction.Outcome.
	Outcomes map[string]int `json:"outcomes"`
	// Retried counts the tasks with a failed attempt, retried; a task's
	// attempts count the resumptions after its waits for approval too.
	Retried        int             `json:"retried"`
	FailedAttempts int             `json:"failed_attempts"`
	Attempts       int             `json:"attempts"`
	Approvals      approvalSummary `json:"approvals"`
	Pages          int             `json:"ocr_pages"`
	LLMTokens      int64           `json:"llm_tokens"`
	LLMCostUSD     float64         `json:"llm_cost_usd"`
	P50Millis      float64         `json:"p50_ms"`
	P99Millis      float64         `json:"p99_ms"`
	WallSeconds    float64         `json:"wall_seconds"`
	TasksPerSec    float64         `json:"tasks_per_second"`
	ExampleID      string          `json:"example_task_id,omitempty"`
	ReviewedID     string          `json:"example_reviewed_task_id,omitempty"`
	// Approve and ApprovalTimeout are who answered and the first wait.
	Approve         string  `json:"approve"`
	ApprovalTimeout float64 `json:"approval_timeout_seconds"`
	// Batches is what the batch parents reported.
	Batches batchSummary `json:"batches"`
}

// approvalSummary counts the approvals the finished documents asked for.
type approvalSummary struct {
	Asked    int `json:"asked"`
	Approved int `json:"approved"`
	Rejected int `json:"rejected"` // by a reviewer
	// Escalated: the first wait timed out, a supervisor was notified.
	Escalated int `json:"escalated"`
	// TimedOut: the second wait timed out too; the default rejected them.
	TimedOut int `json:"timed_out"`
}

func newDemoRunCmd(g *globals, f *demoFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the whole demo in one process: submit --documents, work them off (answering approvals), print a summary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, closeDB, err := demoSetup(ctx, g, f)
			if err != nil {
				return err
			}
			defer closeDB()
			out := &lockedWriter{w: cmd.ErrOrStderr()}
			reviewers, stopReviewers := demoReviewers(c, g, f, out)
			defer stopReviewers()
			w, err := newDemoWorker(c, g, f, reviewers)
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
			started := time.Now()
			batchID := newBatchID()
			docs := generateDocuments(f.documents, f.seed, batchID, f.lowConfidence)
			parents, err := submitBatches(ctx, c, newBatchWorkflow(newDocumentPipeline(pipelineConfig{})), batchID, docs)
			if err != nil {
				return err
			}
			var progress io.Writer = out
			if g.output == "json" {
				progress = nil
			}
			if progress != nil {
				fmt.Fprintf(progress, "submitted %d documents in %d batch workflow(s) (%s, a child per document) in %s; worker %s running with concurrency %d; approvals: --approve %s\n",
					len(docs), len(parents), batchTypeName, time.Since(started).Round(time.Millisecond), w.WorkerID(), f.concurrency, f.approve)
			}
			batches, err := waitAll(ctx, c, parents, func(int, map[history.Status]int) {
				if progress == nil {
					return
				}
				if _, finished, err := batchChildren(ctx, c, parents); err == nil {
					fmt.Fprintf(progress, "progress: %d/%d documents finished\n", finished, len(docs))
				}
			})
			if err != nil {
				return err
			}
			wall := time.Since(started)
			infos, err := batchInfos(ctx, c, parents)
			if err != nil {
				return err
			}
			s, err := summarize(ctx, c, infos, wall)
			if err != nil {
				return err
			}
			if s.Batches, err = summarizeBatches(ctx, c, batches); err != nil {
				return err
			}
			s.Approve, s.ApprovalTimeout = f.approve, f.timeout().Seconds()
			if g.output == "json" {
				return printJSON(cmd, s)
			}
			printSummary(cmd, s, f)
			return nil
		},
	}
}

// waitAll polls until every task is finished, reporting progress.
func waitAll(ctx context.Context, c *sdk.Client, ids []uuid.UUID, report func(int, map[history.Status]int)) ([]*sdk.TaskInfo, error) {
	infos := make(map[uuid.UUID]*sdk.TaskInfo, len(ids))
	lastReport, lastDone := time.Now(), -1
	for {
		counts := map[history.Status]int{}
		done := 0
		for _, id := range ids {
			if info := infos[id]; info != nil && info.Status.Terminal() {
				counts[info.Status]++
				done++
				continue
			}
			info, err := c.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			infos[id] = info
			if info.Status.Terminal() {
				counts[info.Status]++
				done++
			}
		}
		// About once a second while tasks finish; while they wait (for a
		// person, say) every 15 seconds.
		if since := time.Since(lastReport); done == len(ids) || since >= 15*time.Second || since >= time.Second && done != lastDone {
			report(done, counts)
			lastReport, lastDone = time.Now(), done
		}
		if done == len(ids) {
			out := make([]*sdk.TaskInfo, 0, len(ids))
			for _, id := range ids {
				out = append(out, infos[id])
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.Wrap(ctx.Err(), "waiting for tasks")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// summarize reads what the finished tasks returned and what their
// histories say: failed attempts, and the AI usage of every step and
// failed attempt (a failed call is paid for too).
func summarize(ctx context.Context, c *sdk.Client, infos []*sdk.TaskInfo, wall time.Duration) (demoSummary, error) {
	s := demoSummary{Documents: len(infos), WallSeconds: wall.Seconds(), Outcomes: map[string]int{}}
	var durations []time.Duration
	for start := 0; start < len(infos); start += 1000 {
		chunk := infos[start:min(start+1000, len(infos))]
		ids := make([]uuid.UUID, len(chunk))
		for i, info := range chunk {
			ids[i] = info.ID
		}
		histories, err := c.Store().EventListByTasks(ctx, ids)
		if err != nil {
			return s, errors.Wrap(err, "read the histories")
		}
		for _, info := range chunk {
			s.count(info, histories[info.ID])
			if info.FinishedAt != nil {
				durations = append(durations, info.FinishedAt.Sub(info.CreatedAt))
			}
		}
	}
	slices.Sort(durations)
	s.P50Millis = percentileMillis(durations, 0.50)
	s.P99Millis = percentileMillis(durations, 0.99)
	if wall > 0 {
		s.TasksPerSec = float64(len(infos)) / wall.Seconds()
	}
	s.LLMCostUSD = math.Round(s.LLMCostUSD*1e6) / 1e6
	return s, nil
}

// count adds one task to the summary.
func (s *demoSummary) count(info *sdk.TaskInfo, events []history.Event) {
	switch info.Status {
	case history.StatusCompleted:
		s.Completed++
	case history.StatusFailed:
		s.Failed++
	case history.StatusDeadLettered:
		s.DeadLettered++
	default:
		s.Unfinished++
	}
	s.Attempts += info.Attempt
	failed := 0
	addUsage := func(us []history.Usage) {
		for _, u := range us {
			s.LLMTokens += u.InputTokens + u.OutputTokens
			s.LLMCostUSD += u.CostUSD
		}
	}
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.AttemptFailedData:
			failed++
			addUsage(p.Usage)
		case history.StepCompletedData:
			addUsage(p.Usage)
		}
	}
	s.FailedAttempts += failed
	if failed > 0 {
		s.Retried++
		if s.ExampleID == "" {
			s.ExampleID = info.ID.String()
		}
	}
	var out Extraction
	if info.Status != history.StatusCompleted || json.Unmarshal(info.Output, &out) != nil {
		return
	}
	s.Outcomes[out.Outcome]++
	s.Pages += out.Pages
	if r := out.Review; r != nil {
		a := &s.Approvals
		a.Asked++
		switch {
		case r.Approved:
			a.Approved++
		case r.TimedOut:
			a.TimedOut++
		default:
			a.Rejected++
		}
		if r.Escalated {
			a.Escalated++
		}
		if s.ReviewedID == "" || r.Escalated {
			s.ReviewedID = info.ID.String()
		}
	}
}

func percentileMillis(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func printSummary(cmd *cobra.Command, s demoSummary, f *demoFlags) {
	var table bytes.Buffer
	w := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "documents:\t%d\t\n", s.Documents)
	fmt.Fprintf(w, "completed:\t%d\t(%d accepted with confidence, %d approved, %d rejected, %d left for manual review)\n", s.Completed,
		s.Outcomes[outcomeAccepted], s.Outcomes[outcomeApproved], s.Outcomes[outcomeRejected], s.Outcomes[outcomeManualReview])
	fmt.Fprintf(w, "failed:\t%d\t\n", s.Failed)
	fmt.Fprintf(w, "dead-lettered:\t%d\t(corrupt documents, not retried, and exhausted retries: see cairn dlq list)\n", s.DeadLettered)
	fmt.Fprintf(w, "retried:\t%d\t(tasks with a failed attempt; %d failed attempts, each resumed at the step that failed)\n", s.Retried, s.FailedAttempts)
	a := s.Approvals
	who := map[string]string{approveAuto: "a simulated reviewer", approveAll: "a simulated reviewer approving all",
		approveReject: "a simulated reviewer rejecting all", approveTimeout: "nobody", approveManual: "you"}[s.Approve]
	fmt.Fprintf(w, "approvals:\t%d\t(confidence below %.2f: asked, answered by %s, --approve %s)\n", a.Asked, confidenceThreshold, who, s.Approve)
	fmt.Fprintf(w, "  approved:\t%d\t\n", a.Approved)
	fmt.Fprintf(w, "  rejected:\t%d\t\n", a.Rejected)
	timeout := f.timeout()
	fmt.Fprintf(w, "  escalated:\t%d\t(no decision in %s: a supervisor was notified, and they waited %s more)\n", a.Escalated, timeout, timeout*escalationFactor)
	fmt.Fprintf(w, "  timed out:\t%d\t(no decision after the escalation either: rejected, \"no decision\", left for manual review)\n", a.TimedOut)
	fmt.Fprintf(w, "ocr pages:\t%d\t(a step a page, up to %d at once a document)\n", s.Pages, ocrConcurrency)
	fmt.Fprintf(w, "llm tokens:\t%d\t($%.4f on the simulated %s, failed calls included)\n", s.LLMTokens, s.LLMCostUSD, llmModel)
	fmt.Fprintf(w, "duration p50:\t%.1f ms\t(submitted → finished, waits for approval included)\n", s.P50Millis)
	fmt.Fprintf(w, "duration p99:\t%.1f ms\t\n", s.P99Millis)
	fmt.Fprintf(w, "wall time:\t%.2f s\t(%.1f tasks/s)\n", s.WallSeconds, s.TasksPerSec)
	if b := s.Batches; b.Parents > 0 {
		fmt.Fprintf(w, "batches:\t%d\t(%s parents, a child per document; their reports: %d completed, %d not; last child to batch done: %.1f ms)\n",
			b.Parents, batchTypeName, b.Completed, b.NotCompleted, b.FanInMillis)
	}
	_ = w.Flush()
	for line := range strings.Lines(table.String()) {
		fmt.Fprintln(cmd.OutOrStdout(), strings.TrimRight(line, " \n"))
	}
	if s.ExampleID != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "\na retried task's history: cairn task history %s\n", s.ExampleID)
	}
	if s.ReviewedID != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "a reviewed task's history: cairn task history %s\n", s.ReviewedID)
	}
}
