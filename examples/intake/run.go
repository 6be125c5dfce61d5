package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
)

// Register registers the intake's workflow types on w, running with cfg:
// document.process ([DocumentWorkflow]) and the batch parent demo.batch
// ([SubmitBatches]).
func Register(w *sdk.Worker, cfg Config) error {
	doc := DocumentWorkflow(cfg)
	if err := sdk.RegisterSafely(w, doc); err != nil {
		return err
	}
	return sdk.RegisterSafely(w, batchWorkflow(doc))
}

// RegisterReplay adds the intake's workflow types, as [Register]
// registers them, to a replayer (what `cairn replay` replays against).
func RegisterReplay(r *sdk.Replayer, cfg Config) error {
	doc := DocumentWorkflow(cfg)
	if err := sdk.RegisterReplay(r, doc); err != nil {
		return err
	}
	return sdk.RegisterReplay(r, batchWorkflow(doc))
}

// Submit starts document.process for each of docs, each a task of its own
// (idempotency key demo/<document id>), and returns their ids.
func Submit(ctx context.Context, c *sdk.Client, docs []Document) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, 0, len(docs))
	// Batches of 1,000 in one statement each, as an API taking an upload
	// of many documents would.
	for start := 0; start < len(docs); start += 1000 {
		batch := docs[start:min(start+1000, len(docs))]
		starts := make([]sdk.StartParams, len(batch))
		for i, doc := range batch {
			starts[i] = sdk.StartParams{Workflow: documentRef, Input: doc, Opts: sdk.StartOpts{
				IdempotencyKey: "demo/" + doc.ID, MaxAttempts: documentRetry.MaxAttempts,
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

// Summary is what became of a run's documents ([Await]), as `cairn demo
// run` reports it.
type Summary struct {
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
	Approvals      ApprovalSummary `json:"approvals"`
	Pages          int             `json:"ocr_pages"`
	LLMTokens      int64           `json:"llm_tokens"`
	LLMCostUSD     float64         `json:"llm_cost_usd"`
	P50Millis      float64         `json:"p50_ms"`
	P99Millis      float64         `json:"p99_ms"`
	WallSeconds    float64         `json:"wall_seconds"`
	TasksPerSec    float64         `json:"tasks_per_second"`
	ExampleID      string          `json:"example_task_id,omitempty"`
	ReviewedID     string          `json:"example_reviewed_task_id,omitempty"`
	// Approve and ApprovalTimeout are who answered and the first wait;
	// [Await] leaves them to its caller, who knows.
	Approve         string  `json:"approve"`
	ApprovalTimeout float64 `json:"approval_timeout_seconds"`
	// Batches is what the batch parents reported.
	Batches BatchSummary `json:"batches"`
}

// ApprovalSummary counts the approvals the finished documents asked for.
type ApprovalSummary struct {
	Asked    int `json:"asked"`
	Approved int `json:"approved"`
	Rejected int `json:"rejected"` // by a reviewer
	// Escalated: the first wait timed out, a supervisor was notified.
	Escalated int `json:"escalated"`
	// TimedOut: the second wait timed out too; the default rejected them.
	TimedOut int `json:"timed_out"`
}

// Await waits until the batch parents ([SubmitBatches]) have finished,
// then summarizes their documents: the wall time since started, and what
// the tasks returned and their histories say. progress, if set, hears
// how many documents have finished, about once a second while they do and
// every 15 seconds while they wait (for a person, say).
func Await(ctx context.Context, c *sdk.Client, parents []uuid.UUID, started time.Time, progress func(finished int)) (Summary, error) {
	batches, err := waitAll(ctx, c, parents, func(int, map[history.Status]int) {
		if progress == nil {
			return
		}
		if _, finished, err := batchChildren(ctx, c, parents); err == nil {
			progress(finished)
		}
	})
	if err != nil {
		return Summary{}, err
	}
	wall := time.Since(started)
	infos, err := batchInfos(ctx, c, parents)
	if err != nil {
		return Summary{}, err
	}
	s, err := summarize(ctx, c, infos, wall)
	if err != nil {
		return Summary{}, err
	}
	if s.Batches, err = summarizeBatches(ctx, c, batches); err != nil {
		return Summary{}, err
	}
	return s, nil
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
// failed attempt (a failed call is paid for too). It reads a history a
// task (the references left as stored: it reads no outputs from them).
func summarize(ctx context.Context, c *sdk.Client, infos []*sdk.TaskInfo, wall time.Duration) (Summary, error) {
	s := Summary{Documents: len(infos), WallSeconds: wall.Seconds(), Outcomes: map[string]int{}}
	var durations []time.Duration
	for _, info := range infos {
		events, err := c.RawHistory(ctx, info.ID)
		if err != nil {
			return s, errors.Wrap(err, "read the histories")
		}
		s.count(info, events)
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
	s.LLMCostUSD = math.Round(s.LLMCostUSD*1e6) / 1e6
	return s, nil
}

// count adds one task to the summary.
func (s *Summary) count(info *sdk.TaskInfo, events []history.Event) {
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

// WriteSummary writes s to w as a table, then the tasks worth a look with
// cairn task history; firstWait is the approvals' first wait
// (s.ApprovalTimeout, as a duration).
func WriteSummary(w io.Writer, s Summary, firstWait time.Duration) error {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "documents:\t%d\t\n", s.Documents)
	fmt.Fprintf(tw, "completed:\t%d\t(%d accepted with confidence, %d approved, %d rejected, %d left for manual review)\n", s.Completed,
		s.Outcomes[OutcomeAccepted], s.Outcomes[OutcomeApproved], s.Outcomes[OutcomeRejected], s.Outcomes[OutcomeManualReview])
	fmt.Fprintf(tw, "failed:\t%d\t\n", s.Failed)
	fmt.Fprintf(tw, "dead-lettered:\t%d\t(corrupt documents, not retried, and exhausted retries: see cairn dlq list)\n", s.DeadLettered)
	fmt.Fprintf(tw, "retried:\t%d\t(tasks with a failed attempt; %d failed attempts, each resumed at the step that failed)\n", s.Retried, s.FailedAttempts)
	a := s.Approvals
	who := map[string]string{ApproveAuto: "a simulated reviewer", ApproveAll: "a simulated reviewer approving all",
		ApproveReject: "a simulated reviewer rejecting all", ApproveTimeout: "nobody", ApproveManual: "you"}[s.Approve]
	fmt.Fprintf(tw, "approvals:\t%d\t(confidence below %.2f: asked, answered by %s, --approve %s)\n", a.Asked, ConfidenceThreshold, who, s.Approve)
	fmt.Fprintf(tw, "  approved:\t%d\t\n", a.Approved)
	fmt.Fprintf(tw, "  rejected:\t%d\t\n", a.Rejected)
	fmt.Fprintf(tw, "  escalated:\t%d\t(no decision in %s: a supervisor was notified, and they waited %s more)\n", a.Escalated, firstWait, firstWait*EscalationFactor)
	fmt.Fprintf(tw, "  timed out:\t%d\t(no decision after the escalation either: rejected, \"no decision\", left for manual review)\n", a.TimedOut)
	fmt.Fprintf(tw, "ocr pages:\t%d\t(a step a page, up to %d at once a document)\n", s.Pages, ocrConcurrency)
	fmt.Fprintf(tw, "llm tokens:\t%d\t($%.4f on the simulated %s, failed calls included)\n", s.LLMTokens, s.LLMCostUSD, llmModel)
	fmt.Fprintf(tw, "duration p50:\t%.1f ms\t(submitted → finished, waits for approval included)\n", s.P50Millis)
	fmt.Fprintf(tw, "duration p99:\t%.1f ms\t\n", s.P99Millis)
	fmt.Fprintf(tw, "wall time:\t%.2f s\t(%.1f tasks/s)\n", s.WallSeconds, s.TasksPerSec)
	if b := s.Batches; b.Parents > 0 {
		fmt.Fprintf(tw, "batches:\t%d\t(%s parents, a child per document; their reports: %d completed, %d not; last child to batch done: %.1f ms)\n",
			b.Parents, BatchType, b.Completed, b.NotCompleted, b.FanInMillis)
	}
	_ = tw.Flush()
	var out strings.Builder
	for line := range strings.Lines(table.String()) {
		out.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	if s.ExampleID != "" {
		fmt.Fprintf(&out, "\na retried task's history: cairn task history %s\n", s.ExampleID)
	}
	if s.ReviewedID != "" {
		fmt.Fprintf(&out, "a reviewed task's history: cairn task history %s\n", s.ReviewedID)
	}
	_, err := io.WriteString(w, out.String())
	return err
}
