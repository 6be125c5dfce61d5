package intake

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// The batch intake: [SubmitBatches] submits documents as batches, each one
// parent workflow (demo.batch) that starts document.process as a child per
// document and reports the batch once every child has finished. The
// children run on their own (own histories, retries, approvals); the
// parent holds no worker slot while they do.

const (
	// BatchType is the workflow type of a batch parent.
	BatchType = "demo.batch"
	// maxBatchDocuments is the most documents one batch parent takes.
	maxBatchDocuments = 500
)

// Batch is the batch parent's input.
type Batch struct {
	ID        string     `json:"id"`
	Documents []Document `json:"documents"`
}

// BatchReport is the batch parent's output: what became of its documents.
type BatchReport struct {
	Batch     string `json:"batch"`
	Documents int    `json:"documents"`
	// Outcomes counts the completed documents by Extraction.Outcome
	// (accepted, approved, rejected, manual_review).
	Outcomes map[string]int `json:"outcomes"`
	// NotCompleted counts the documents that did not complete, by status
	// (failed, dead_lettered, cancelled).
	NotCompleted map[string]int `json:"not_completed,omitempty"`
}

// batchWorkflow is demo.batch over the document workflow doc.
func batchWorkflow(doc *sdk.Workflow[Document, Extraction]) *sdk.Workflow[Batch, BatchReport] {
	return sdk.NewWorkflow(BatchType, 1, func(ctx workflow.Context, b Batch) (BatchReport, error) {
		children := make([]*workflow.Child[Extraction], len(b.Documents))
		for i, d := range b.Documents {
			children[i] = workflow.StartChild(ctx, doc, d, &workflow.ChildOpts{MaxAttempts: documentRetry.MaxAttempts})
		}
		rep := BatchReport{Batch: b.ID, Documents: len(b.Documents), Outcomes: map[string]int{}}
		for _, c := range children {
			out, err := c.Result(ctx)
			var ce *workflow.ChildError
			switch {
			case err == nil:
				rep.Outcomes[out.Outcome]++
			case errors.As(err, &ce):
				// A document that failed is the batch's to report, not to
				// fail on.
				if rep.NotCompleted == nil {
					rep.NotCompleted = map[string]int{}
				}
				rep.NotCompleted[string(ce.Status)]++
			default:
				return rep, err
			}
		}
		return rep, nil
	}, &sdk.WorkflowOpts{MaxRunningChildren: maxBatchDocuments})
}

// SubmitBatches starts demo.batch parents for docs of the batch batchID
// ([GenerateDocuments]), 500 documents each, and returns their ids, for
// [Await]. Each start's idempotency key is demo/<batchID>/<its first
// document's id>.
func SubmitBatches(ctx context.Context, c *sdk.Client, batchID string, docs []Document) ([]uuid.UUID, error) {
	batch := batchWorkflow(DocumentWorkflow(Config{}))
	var ids []uuid.UUID
	for start := 0; start < len(docs); start += maxBatchDocuments {
		part := docs[start:min(start+maxBatchDocuments, len(docs))]
		run, err := sdk.Start(ctx, c, batch, Batch{ID: batchID, Documents: part}, &sdk.StartOpts{
			IdempotencyKey: "demo/" + batchID + "/" + part[0].ID,
		})
		if err != nil {
			return ids, err
		}
		ids = append(ids, run.ID)
	}
	return ids, nil
}

// batchChildren returns the ids of the children the batch parents have
// started so far, in order, and how many of them have finished.
func batchChildren(ctx context.Context, c *sdk.Client, parents []uuid.UUID) (children []uuid.UUID, finished int, err error) {
	for _, p := range parents {
		events, err := c.History(ctx, p)
		if err != nil {
			return nil, 0, err
		}
		state, err := history.Replay(events)
		if err != nil {
			return nil, 0, err
		}
		for _, ch := range state.Children {
			id, err := uuid.Parse(ch.ID)
			if err != nil {
				return nil, 0, errors.Wrapf(err, "child %d of batch %s", ch.Position, p)
			}
			children = append(children, id)
			if ch.Finished {
				finished++
			}
		}
	}
	return children, finished, nil
}

// fanInMillis is, for each batch parent, the time from its last child's
// end to its completion, the longest of them.
func fanInMillis(ctx context.Context, c *sdk.Client, parents []uuid.UUID) (float64, error) {
	var longest time.Duration
	for _, p := range parents {
		events, err := c.History(ctx, p)
		if err != nil {
			return 0, err
		}
		var lastChild, done time.Time
		for _, e := range events {
			switch e.Type() {
			case history.ChildFinished:
				lastChild = e.At
			case history.TaskCompleted:
				done = e.At
			}
		}
		if !lastChild.IsZero() && !done.IsZero() {
			longest = max(longest, done.Sub(lastChild))
		}
	}
	return float64(longest.Microseconds()) / 1000, nil
}

// BatchSummary is what the batch parents reported.
type BatchSummary struct {
	Parents      int      `json:"parents"`
	IDs          []string `json:"ids"`
	Completed    int      `json:"completed"`
	NotCompleted int      `json:"not_completed"`
	// FanInMillis is the longest time from a parent's last child's end to
	// the parent's completion.
	FanInMillis float64 `json:"fan_in_ms"`
}

// summarizeBatches adds up the batch parents' reports.
func summarizeBatches(ctx context.Context, c *sdk.Client, parents []*sdk.TaskInfo) (BatchSummary, error) {
	s := BatchSummary{Parents: len(parents)}
	ids := make([]uuid.UUID, len(parents))
	for i, p := range parents {
		ids[i] = p.ID
		s.IDs = append(s.IDs, p.ID.String())
		if p.Status != history.StatusCompleted {
			return s, errors.Newf("batch %s ended %s", p.ID, p.Status)
		}
		rep, err := sdk.Output[BatchReport](p)
		if err != nil {
			return s, err
		}
		for _, n := range rep.Outcomes {
			s.Completed += n
		}
		for _, n := range rep.NotCompleted {
			s.NotCompleted += n
		}
	}
	var err error
	s.FanInMillis, err = fanInMillis(ctx, c, ids)
	return s, err
}

// batchInfos returns the batch parents' children, as tasks.
func batchInfos(ctx context.Context, c *sdk.Client, parents []uuid.UUID) ([]*sdk.TaskInfo, error) {
	ids, _, err := batchChildren(ctx, c, parents)
	if err != nil {
		return nil, err
	}
	infos := make([]*sdk.TaskInfo, len(ids))
	for i, id := range ids {
		if infos[i], err = c.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	return infos, nil
}
