package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
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
	failureRate     float64
	latency         time.Duration
	seed            uint64
	leaseTTL        time.Duration
	rescueInterval  time.Duration
	shutdownTimeout time.Duration
}

func (f *demoFlags) pipeline() pipelineConfig {
	return pipelineConfig{failureRate: f.failureRate, latency: f.latency}
}

func (f *demoFlags) validate() error {
	switch {
	case f.documents < 1 || f.documents > 1_000_000:
		return errmark.Mark(errors.Newf("--documents %d: use 1 to 1000000", f.documents), configError)
	case f.concurrency < 1 || f.concurrency > 1000:
		return errmark.Mark(errors.Newf("--concurrency %d: use 1 to 1000", f.concurrency), configError)
	case f.failureRate < 0 || f.failureRate >= 1:
		return errmark.Mark(errors.Newf("--failure-rate %g: use 0 up to (not including) 1", f.failureRate), configError)
	case f.latency < 0:
		return errmark.Mark(errors.New("--latency must not be negative"), configError)
	case f.leaseTTL < 300*time.Millisecond:
		return errmark.Mark(errors.Newf("--lease-ttl %s: use at least 300ms", f.leaseTTL), configError)
	}
	return nil
}

func newDemoCmd(g *globals) *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The document pipeline demo: OCR → extract → validate",
		Long: `The document pipeline demo runs the workflow document.process (steps ocr,
extract and validate) over generated sample documents, with simulated latency,
simulated transient failures (retried), and a few corrupt documents that fail
permanently. It applies cairn's migrations first.`,
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&f.documents, "documents", 100, "number of sample documents")
	pf.IntVar(&f.concurrency, "concurrency", 32, "tasks a worker runs at once")
	pf.Float64Var(&f.failureRate, "failure-rate", 0.1, "chance a simulated OCR or LLM call fails transiently")
	pf.DurationVar(&f.latency, "latency", 20*time.Millisecond, "typical simulated step latency")
	pf.Uint64Var(&f.seed, "seed", uint64(time.Now().UnixNano()), "seed for generated documents")
	pf.DurationVar(&f.leaseTTL, "lease-ttl", engine.DefaultLeaseTTL, "worker lease TTL: a crashed worker's tasks resume after it")
	pf.DurationVar(&f.rescueInterval, "rescue-interval", 5*time.Second, "how often the rescuer looks for expired leases")
	pf.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a stopping worker lets running steps finish")
	cmd.AddCommand(newDemoRunCmd(g, f), newDemoSubmitCmd(g, f), newDemoWorkerCmd(g, f))
	return cmd
}

// demoSetup opens the configured store (migrated) and a client over it.
func demoSetup(ctx context.Context, g *globals, f *demoFlags) (*sdk.Client, func(), error) {
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	return g.clientWith(ctx, storeOpts{maxConns: int32(min(f.concurrency+8, 64)), migrate: true})
}

func newDemoWorker(c *sdk.Client, g *globals, f *demoFlags) (*sdk.Worker, error) {
	w, err := sdk.NewWorker(sdk.WorkerConfig{
		Store: c.Store(), Namespace: g.namespace, Concurrency: f.concurrency,
		LeaseTTL: f.leaseTTL, RescueInterval: f.rescueInterval, PollInterval: 500 * time.Millisecond,
		MaxPayloadBytes: g.maxPayload,
		Logger:          newRedactingLogger(os.Stderr, slog.LevelWarn),
	})
	if err != nil {
		return nil, err
	}
	return w, sdk.RegisterSafely(w, newDocumentPipeline(f.pipeline()))
}

func submitDocuments(ctx context.Context, c *sdk.Client, f *demoFlags) ([]uuid.UUID, error) {
	batch := newBatchID()
	docs := generateDocuments(f.documents, f.seed, batch)
	wf := sdk.TypeRef{Name: demoTypeName, Version: 1}
	ids := make([]uuid.UUID, 0, len(docs))
	// Batches of 1,000 in one statement each, as an API taking an upload
	// of many documents would.
	for start := 0; start < len(docs); start += 1000 {
		batch := docs[start:min(start+1000, len(docs))]
		starts := make([]sdk.StartParams, len(batch))
		for i, doc := range batch {
			starts[i] = sdk.StartParams{Workflow: wf, Input: doc, Opts: sdk.StartOpts{
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
			w, err := newDemoWorker(c, g, f)
			if err != nil {
				return err
			}
			// The worker outlives the signal context: the signal starts a
			// graceful stop, not a crash.
			if err := w.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "worker %s running %s@1 with concurrency %d; SIGINT or SIGTERM stops it\n",
				w.WorkerID(), demoTypeName, f.concurrency)
			<-ctx.Done()
			fmt.Fprintf(cmd.ErrOrStderr(), "worker %s stopping: finishing running steps (up to %s)\n", w.WorkerID(), f.shutdownTimeout)
			stopCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
			defer cancel()
			if err := w.Stop(stopCtx); err != nil {
				return errors.Wrap(err, "graceful shutdown")
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "worker %s stopped\n", w.WorkerID())
			return nil
		},
	}
}

// demoSummary is what `demo run` reports.
type demoSummary struct {
	Documents    int     `json:"documents"`
	Completed    int     `json:"completed"`
	Failed       int     `json:"failed"`
	DeadLettered int     `json:"dead_lettered"`
	Unfinished   int     `json:"unfinished"`
	Retried      int     `json:"retried"`
	Attempts     int     `json:"attempts"`
	P50Millis    float64 `json:"p50_ms"`
	P99Millis    float64 `json:"p99_ms"`
	WallSeconds  float64 `json:"wall_seconds"`
	TasksPerSec  float64 `json:"tasks_per_second"`
	ExampleID    string  `json:"example_task_id,omitempty"`
}

func newDemoRunCmd(g *globals, f *demoFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the whole demo in one process: submit --documents, work them off, print a summary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, closeDB, err := demoSetup(ctx, g, f)
			if err != nil {
				return err
			}
			defer closeDB()
			w, err := newDemoWorker(c, g, f)
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
			ids, err := submitDocuments(ctx, c, f)
			if err != nil {
				return err
			}
			progress := cmd.ErrOrStderr()
			if g.output == "json" {
				progress = nil
			}
			if progress != nil {
				fmt.Fprintf(progress, "submitted %d documents in %s; worker %s running with concurrency %d\n",
					len(ids), time.Since(started).Round(time.Millisecond), w.WorkerID(), f.concurrency)
			}
			infos, err := waitAll(ctx, c, ids, func(done int, counts map[history.Status]int) {
				if progress != nil {
					fmt.Fprintf(progress, "progress: %d/%d finished (completed %d, failed %d, dead-lettered %d)\n",
						done, len(ids), counts[history.StatusCompleted], counts[history.StatusFailed], counts[history.StatusDeadLettered])
				}
			})
			if err != nil {
				return err
			}
			s := summarize(infos, time.Since(started))
			if g.output == "json" {
				return printJSON(cmd, s)
			}
			printSummary(cmd, s)
			return nil
		},
	}
}

// waitAll polls until every task is finished, reporting progress about once
// a second.
func waitAll(ctx context.Context, c *sdk.Client, ids []uuid.UUID, report func(int, map[history.Status]int)) ([]*sdk.TaskInfo, error) {
	infos := make(map[uuid.UUID]*sdk.TaskInfo, len(ids))
	lastReport := time.Now()
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
		if done == len(ids) || time.Since(lastReport) >= time.Second {
			report(done, counts)
			lastReport = time.Now()
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

func summarize(infos []*sdk.TaskInfo, wall time.Duration) demoSummary {
	s := demoSummary{Documents: len(infos), WallSeconds: wall.Seconds()}
	var durations []time.Duration
	for _, info := range infos {
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
		if info.Attempt > 1 {
			s.Retried++
			if s.ExampleID == "" {
				s.ExampleID = info.ID.String()
			}
		}
		if info.FinishedAt != nil {
			durations = append(durations, info.FinishedAt.Sub(info.CreatedAt))
		}
	}
	slices.Sort(durations)
	s.P50Millis = percentileMillis(durations, 0.50)
	s.P99Millis = percentileMillis(durations, 0.99)
	if wall > 0 {
		s.TasksPerSec = float64(len(infos)) / wall.Seconds()
	}
	return s
}

func percentileMillis(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func printSummary(cmd *cobra.Command, s demoSummary) {
	w := newTable(cmd)
	fmt.Fprintf(w, "documents:\t%d\n", s.Documents)
	fmt.Fprintf(w, "completed:\t%d\n", s.Completed)
	fmt.Fprintf(w, "failed:\t%d\n", s.Failed)
	fmt.Fprintf(w, "dead-lettered:\t%d\t(corrupt documents, not retried, and exhausted retries: see cairn dlq list)\n", s.DeadLettered)
	fmt.Fprintf(w, "retried:\t%d\t(tasks that needed more than one attempt; %d attempts in all)\n", s.Retried, s.Attempts)
	fmt.Fprintf(w, "duration p50:\t%.1f ms\t(submitted → finished)\n", s.P50Millis)
	fmt.Fprintf(w, "duration p99:\t%.1f ms\n", s.P99Millis)
	fmt.Fprintf(w, "wall time:\t%.2f s\t(%.0f tasks/s)\n", s.WallSeconds, s.TasksPerSec)
	_ = w.Flush()
	if s.ExampleID != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "\na retried task's history: cairn task history %s\n", s.ExampleID)
	}
}
