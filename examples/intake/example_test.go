package intake_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/examples/intake"
	"github.com/cairnflow/cairn/sdk"
)

// The intake in one process on the embedded store, as `cairn demo run`
// runs it: a worker runs the workflows, a simulated reviewer approves the
// poor scans, and the documents go in as one batch.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "intake-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "intake.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	c, err := sdk.NewClient(sdk.ClientConfig{Store: st})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	w, err := sdk.NewWorker(sdk.WorkerConfig{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	reviewer := intake.NewSimulatedReviewer(c, intake.ApproveAll, 10*time.Millisecond, nil)
	defer reviewer.Stop() // after the worker: its steps tell the reviewer
	if err := intake.Register(w, intake.Config{Latency: time.Millisecond, ApprovalTimeout: time.Minute, Reviewers: reviewer}); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(ctx) }()

	started := time.Now()
	batch := intake.NewBatchID()
	docs := intake.GenerateDocuments(6, 42, batch, 0.5)
	parents, err := intake.SubmitBatches(ctx, c, batch, docs)
	if err != nil {
		panic(err)
	}
	s, err := intake.Await(ctx, c, parents, started, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d documents: %d completed, %d accepted with confidence, %d approved by a reviewer\n",
		s.Documents, s.Completed, s.Outcomes[intake.OutcomeAccepted], s.Outcomes[intake.OutcomeApproved])
	// Output: 6 documents: 6 completed, 3 accepted with confidence, 3 approved by a reviewer
}
